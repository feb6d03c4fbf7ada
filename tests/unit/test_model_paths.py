"""The CLI names models on disk by absolute path: a warm server's caches key on the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from crag.app.cli.settings import parse_settings, with_absolute_model_paths


def _settings_in(folder: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    (folder / "models" / "m").mkdir(parents=True)
    monkeypatch.chdir(folder)
    deployment = with_absolute_model_paths(
        parse_settings(
            [
                "generator=local:models/m",
                "rewriter=gguf:models/m/model.gguf",
                "contextualizer=endpoint:models/m",
                "evaluator_model=models/m",
                "embedder=models/m",
            ]
        ).deployment
    )
    return {
        name: getattr(deployment, name)
        for name in ("generator", "rewriter", "contextualizer", "evaluator_model", "embedder")
    }


def test_relative_model_folders_name_the_folder_of_each_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _settings_in(tmp_path / "a", monkeypatch)
    second = _settings_in(tmp_path / "b", monkeypatch)
    assert first["generator"] == f"local:{tmp_path / 'a' / 'models' / 'm'}"
    assert second["generator"] == f"local:{tmp_path / 'b' / 'models' / 'm'}"
    assert first["rewriter"] == f"gguf:{tmp_path / 'a' / 'models' / 'm' / 'model.gguf'}"
    assert first["evaluator_model"] == str(tmp_path / "a" / "models" / "m")
    assert second["embedder"] == str(tmp_path / "b" / "models" / "m")
    assert first["contextualizer"] == second["contextualizer"] == "endpoint:models/m"


def test_names_that_are_not_folders_here_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    deployment = parse_settings(["generator=smollm2", "embedder=all-MiniLM-L6-v2"]).deployment
    assert with_absolute_model_paths(deployment) is deployment
