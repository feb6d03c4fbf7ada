"""A served run's ``scope_folder`` must be absolute; the command line's may be relative.

The served question graphs' context schema is ``RunContext`` (:mod:`crag.settings.run_context`):
the per-run :class:`~crag.settings.context.Context` with its bounds shown and this one check added.
It is built as langgraph-api builds it (``RunContext(**context)``, inside the server's event
loop). A relative folder used to be resolved there with ``os.getcwd``, a blocking call the dev
server refuses (``BlockingError: An internal error occurred``), and against the server's
directory, which means nothing to the caller. ``tests/integration/test_scoped_server.py`` sends
the same settings to a real ``langgraph dev``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from crag.core.state import ChatInputState
from crag.graph.builder import CragGraph
from crag.settings.context import Context, InvalidSettingError
from crag.settings.run_context import RunContext
from tests.fakes import FakeComponents, dict_context

QUESTION: ChatInputState = {"question": "Who painted the Mona Lisa?"}


def refusal(folder: str) -> str:
    return (
        f"setting scope_folder: a served run must name an absolute folder, not "
        f"{folder.strip()!r}: the server cannot know which directory it is relative to"
    )


@pytest.mark.parametrize("folder", ["docs", "./docs", "..", "~/docs", " docs/a "])
def test_a_served_run_with_a_relative_folder_is_refused_with_one_line(folder: str) -> None:
    with pytest.raises(InvalidSettingError) as refused:
        RunContext(scope_folder=folder)
    assert str(refused.value) == refusal(folder)


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


def test_a_run_given_a_dict_is_checked_as_a_served_one(
    fake_components: FakeComponents,
    fake_graph: CragGraph,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # LangGraph builds the graph's context schema (RunContext) from a dict, as the server does.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidSettingError) as refused:
        fake_graph.invoke(QUESTION, context=dict_context(scope_folder="docs"))
    assert str(refused.value) == refusal("docs")
    assert fake_components.store.queries == []
    # A Context built in Python is the operator's own: its relative folder is resolved.
    fake_graph.invoke(QUESTION, context=Context(scope_folder="docs"))
    assert len(fake_components.store.queries) == 1


def test_another_kinds_setting_is_named_before_the_folder_is_checked() -> None:
    deployment: dict[str, Any] = {"scope_folder": "docs", "store_path": "/srv/store"}
    with pytest.raises(InvalidSettingError, match=r"^setting store_path is a deployment setting"):
        RunContext(**deployment)
    method: dict[str, Any] = {"scope_folder": "docs", "strip_mode": "words"}
    with pytest.raises(InvalidSettingError, match=r"^setting strip_mode is a parameter"):
        RunContext(**method)
