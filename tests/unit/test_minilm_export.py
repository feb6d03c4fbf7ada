"""The encoder's ONNX export: a folder it cannot export is remembered, and torch embeds instead."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crag.vectorstore import minilm_export
from crag.vectorstore.embeddings import resolve_model_path
from crag.vectorstore.minilm import MiniLMEmbeddings


def test_a_folder_it_cannot_export_is_remembered_and_not_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRAG_CACHE_DIR", str(tmp_path / "cache"))
    broken = tmp_path / "not-a-model"
    broken.mkdir()
    (broken / "config.json").write_text("{}", encoding="utf-8")
    with pytest.raises(minilm_export.EncoderExportError, match="cannot export"):
        minilm_export.ensure_encoder_onnx(broken)
    target = minilm_export.encoder_onnx_folder(broken)
    assert target.with_name(target.name + ".failed").is_file()
    assert not target.exists()

    def no_second_try(*args: Any) -> None:
        raise AssertionError("the export ran again")

    monkeypatch.setattr(minilm_export, "_run_child", no_second_try)
    with pytest.raises(minilm_export.EncoderExportError, match="cannot export"):
        minilm_export.ensure_encoder_onnx(broken)


def test_without_its_export_the_encoder_runs_in_torch(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def failed(path: Path) -> Path:
        raise minilm_export.EncoderExportError("cannot export the encoder: a test")

    monkeypatch.setattr(minilm_export, "ensure_encoder_onnx", failed)
    embedder = MiniLMEmbeddings(resolve_model_path(), "cpu", 64)
    assert embedder.model is None  # nothing is exported or loaded before the first call
    assert len(embedder.embed_query("Who painted the Mona Lisa?")) == 384
    assert embedder.onnx is None and embedder.model is not None
    assert "runs in torch: cannot export the encoder" in caplog.text
