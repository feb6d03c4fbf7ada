"""Threads that outlive the process: the graph over SQLite, and ``crag ask --thread``.

Each process opens the same SQLite file (as separate ``crag`` invocations do); a follow-up run
on a thread sees the thread's state, and starts by resetting its own fields.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from crag.app.api import apersistent_graph, persistent_graph, thread_config, thread_turns
from crag.app.cli.commands import main
from tests.fakes import (
    mona_lisa_app_components,
)

MONA = "Who painted the Mona Lisa?"
NITROGEN = "What is the boiling point of liquid nitrogen?"


@pytest.fixture
def components(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Mona Lisa questions are Correct; anything else is Incorrect and web search is down."""
    return mona_lisa_app_components(monkeypatch)


def test_thread_survives_reopening_and_each_run_resets_its_fields(
    tmp_path: Path, components: Any
) -> None:
    db = tmp_path / "sub" / "threads.sqlite"
    config = thread_config("conversation-1")
    with persistent_graph(db, components=components) as first:
        out = first.invoke({"question": NITROGEN}, config)
        assert out["action"] == "incorrect"
        assert any("web search unavailable" in n for n in out["notes"])
    assert db.is_file()

    with persistent_graph(db, components=components) as second:  # a new process would do the same
        before = second.get_state(config).values
        assert before["question"] == NITROGEN and before["search_query"]
        out = second.invoke({"question": MONA}, config)
        after = second.get_state(config).values
        turns = thread_turns(second, "conversation-1")
        other = second.get_state(thread_config("another")).values
    assert out["action"] == "correct"
    assert out["notes"] == []
    assert [k["origin"] for k in out["knowledge"]] == ["internal"]
    assert after["search_query"] == "" and after["external_knowledge"] == []
    assert [(t["question"], t["action"]) for t in turns] == [
        (NITROGEN, "incorrect"),
        (MONA, "correct"),
    ]
    assert other == {}


def test_async_persistent_graph(tmp_path: Path, components: Any) -> None:
    db = tmp_path / "threads.sqlite"

    async def main_() -> tuple[dict[str, Any], dict[str, Any]]:
        async with apersistent_graph(db, components=components) as g:
            out = await g.ainvoke({"question": MONA}, thread_config("t"))
            state = await g.aget_state(thread_config("t"))
        return dict(out), dict(state.values)

    out, state = asyncio.run(main_())
    assert out["answer"] == "Leonardo da Vinci."
    assert state["question"] == MONA
    with persistent_graph(
        db, components=components
    ) as g:  # the sync saver reads what the async one wrote
        assert [t["question"] for t in thread_turns(g, "t")] == [MONA]


def test_crag_ask_thread_keeps_the_conversation_across_invocations(
    tmp_path: Path, components: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "threads.sqlite")
    assert main(["ask", "-q", "--thread", "t1", "--threads-db", db, NITROGEN]) == 0
    assert main(["ask", "-q", "--thread", "t1", "--threads-db", db, MONA]) == 0
    assert main(["ask", "-q", "--thread", "t2", "--threads-db", db, MONA]) == 0
    capsys.readouterr()

    assert main(["history", "t1", "--threads-db", db]) == 0
    out = capsys.readouterr().out
    assert out.index(f"1. Q: {NITROGEN}") < out.index(f"2. Q: {MONA}")
    assert "A (correct): Leonardo da Vinci." in out

    assert main(["history", "t1", "--threads-db", db, "--json"]) == 0
    turns = json.loads(capsys.readouterr().out)
    assert [t["question"] for t in turns] == [NITROGEN, MONA]

    assert main(["history", "t2", "--threads-db", db, "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 1


def test_history_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(tmp_path / "none.sqlite")
    assert main(["history", "t1", "--threads-db", missing]) == 2
    assert "no conversations yet" in capsys.readouterr().err
    with persistent_graph(tmp_path / "empty.sqlite"):
        pass
    assert main(["history", "nobody", "--threads-db", str(tmp_path / "empty.sqlite")]) == 1
    assert "has no finished runs" in capsys.readouterr().err


def test_the_threads_database_and_the_cache_are_deployment_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from crag.app.threads import configured_threads_db
    from crag.generator.gguf import cache_dir
    from crag.settings.deployment import DEFAULT_THREADS_PATH
    from crag.vectorstore.shared_database import shared_database

    monkeypatch.delenv("CRAG_THREADS_DB", raising=False)
    assert configured_threads_db() == DEFAULT_THREADS_PATH and shared_database() is None
    monkeypatch.setenv("CRAG_THREADS_DB", "  ")  # blank: the default file
    assert configured_threads_db() == DEFAULT_THREADS_PATH
    monkeypatch.setenv("CRAG_THREADS_DB", str(tmp_path / "t.sqlite"))
    assert configured_threads_db() == str(tmp_path / "t.sqlite") and shared_database() is None
    url = "postgresql://crag:pw@db:5432/crag"
    monkeypatch.setenv("CRAG_THREADS_DB", url)
    assert configured_threads_db() == url and shared_database() == url
    monkeypatch.setenv("CRAG_CACHE_DIR", str(tmp_path / "cache"))
    assert cache_dir() == tmp_path / "cache" / "models"
    monkeypatch.delenv("CRAG_CACHE_DIR")
    assert cache_dir() == Path.home() / ".cache" / "crag" / "models"
