"""A served run's ``scope_folder`` must be absolute; the command line's may be relative.

The served schemas are built as langgraph-api builds them (``RunContext(**context)``, inside the
server's event loop). A relative folder used to be resolved there with ``os.getcwd``, a blocking
call the dev server refuses (``BlockingError: An internal error occurred``), and against the
server's directory, which means nothing to the caller. ``tests/integration/test_scoped_server.py``
sends the same settings to a real ``langgraph dev``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from crag.core.context import Context, InvalidSettingError
from crag.core.run_context import RunContext


@pytest.mark.parametrize("folder", ["docs", "./docs", "..", "~/docs", " docs/a "])
def test_a_served_run_with_a_relative_folder_is_refused_with_one_line(folder: str) -> None:
    with pytest.raises(InvalidSettingError) as refused:
        RunContext(scope_folder=folder)
    assert str(refused.value) == (
        f"setting scope_folder: a served run must name an absolute folder, not "
        f"{folder.strip()!r}: the server cannot know which directory it is relative to"
    )


def test_a_served_run_with_an_absolute_folder_is_normalised_without_the_working_directory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_getcwd() -> str:
        raise AssertionError("os.getcwd called: a blocking call in the server's event loop")

    monkeypatch.setattr(os, "getcwd", no_getcwd)
    assert RunContext(scope_folder="/srv/docs/../news/").scope_folder == "/srv/news"
    assert RunContext(scope_folder="").scope_folder == ""


def test_the_command_line_still_resolves_a_relative_folder_against_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert Context(scope_folder="docs/a").scope_folder == str(tmp_path / "docs" / "a")
