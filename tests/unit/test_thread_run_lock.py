"""One run at a time per thread across processes (:mod:`crag.app.thread_run_lock`).

Against a real PostgreSQL (``pgserver``, on its Unix socket) named by ``CRAG_THREADS_DB``, as
server replicas share it: two runs on one thread started at once, from two threads of this
process with their own connections (and their checkpoints in that PostgreSQL), or as two tasks
of one event loop, take turns (each node records when it is entered and left; no run's nodes
interleave with the other's) and both finish; a run on another thread does not wait; a
holder killed with SIGKILL in another process frees the lock and the queued run goes on.
Without a shared PostgreSQL the graphs take no lock at all.
"""

from __future__ import annotations

import asyncio
import logging
import operator
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph

from crag.app.thread_run_lock import ThreadLockedGraph, one_run_per_thread
from crag.vectorstore.advisory_lock import SharedLockError
from crag.vectorstore.shared_database import THREADS_DB_ENV

REPO = Path(__file__).resolve().parents[2]

Event = tuple[str, str, float]
"""(run label, "enter" or "exit", time.monotonic())"""


class Steps(TypedDict):
    visits: Annotated[list[str], operator.add]


@pytest.fixture
def shared(postgres_uri: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The PostgreSQL the replicas share, named as they name it."""
    monkeypatch.setenv(THREADS_DB_ENV, postgres_uri)
    return postgres_uri


def recording_graph(
    events: list[Event], pause: float, marker: Path | None = None, checkpointer: Any = None
) -> ThreadLockedGraph[Any, Any, Any, Any]:
    """Two nodes in a row, each recording its entry and exit around ``pause`` seconds.

    ``marker``: a file the first node writes on entry (another process waits for it).
    """
    lock = threading.Lock()

    def node(name: str) -> Any:
        def visit(state: Steps, config: RunnableConfig) -> dict[str, list[str]]:
            label = str(config["configurable"]["label"])
            with lock:
                events.append((label, "enter", time.monotonic()))
            if marker is not None:
                marker.write_text("entered")
            time.sleep(pause)
            with lock:
                events.append((label, "exit", time.monotonic()))
            return {"visits": [f"{label}:{name}"]}

        return visit

    builder = StateGraph(Steps)
    builder.add_node("first", node("first"))
    builder.add_node("second", node("second"))
    builder.add_edge(START, "first")
    builder.add_edge("first", "second")
    builder.add_edge("second", END)
    return one_run_per_thread(builder.compile(checkpointer=checkpointer))


def spans(events: list[Event]) -> dict[str, tuple[float, float]]:
    """Each run's first entry and last exit."""
    found: dict[str, tuple[float, float]] = {}
    for label, _, at in events:
        start, end = found.get(label, (at, at))
        found[label] = (min(start, at), max(end, at))
    return found


def assert_one_after_the_other(events: list[Event], first: str, second: str) -> None:
    ordered = [label for label, _, _ in sorted(events, key=lambda event: event[2])]
    mine = [label for label in ordered if label in (first, second)]
    assert mine.count(first) == 4 and mine.count(second) == 4, events
    assert mine in ([first] * 4 + [second] * 4, [second] * 4 + [first] * 4), mine
    (a_start, a_end), (b_start, b_end) = spans(events)[first], spans(events)[second]
    assert a_end <= b_start or b_end <= a_start


def config(thread: str, label: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread, "label": label}}


def test_two_runs_on_one_thread_from_two_threads_take_turns(
    shared: str, caplog: pytest.LogCaptureFixture
) -> None:
    from crag.app.threads import checkpointer

    events: list[Event] = []
    results: dict[str, Any] = {}
    start = threading.Barrier(2)
    with checkpointer(shared) as saver:
        graph = recording_graph(events, pause=0.3, checkpointer=saver)

        def run(label: str) -> None:
            start.wait()
            results[label] = graph.invoke({"visits": []}, config("chat-1", label))

        runners = [threading.Thread(target=run, args=(label,)) for label in ("a", "b")]
        with caplog.at_level(logging.INFO, logger="crag.vectorstore.advisory_lock"):
            for runner in runners:
                runner.start()
            for runner in runners:
                runner.join(timeout=60)
        assert not any(runner.is_alive() for runner in runners)
        history = graph.get_state(config("chat-1", "x")).values["visits"]
    assert_one_after_the_other(events, "a", "b")
    assert sorted(results) == ["a", "b"]
    assert len(history) == 4  # both runs' nodes, in one line of checkpoints
    waited = [r.getMessage() for r in caplog.records if "waits for" in r.getMessage()]
    assert waited == ["a run on thread chat-1 waits for the thread's running run to finish"]


def test_async_runs_take_turns_per_thread_and_leave_the_loop_free(shared: str) -> None:
    from crag.app.threads import async_checkpointer

    events: list[Event] = []

    async def main() -> list[Any]:
        async with async_checkpointer(shared) as saver:
            graph = recording_graph(events, pause=0.4, checkpointer=saver)
            return await asyncio.wait_for(
                asyncio.gather(
                    graph.ainvoke({"visits": []}, config("chat-2", "a")),
                    graph.ainvoke({"visits": []}, config("chat-2", "b")),
                    graph.ainvoke({"visits": []}, config("chat-3", "other")),
                ),
                timeout=60,
            )

    results = asyncio.run(main())
    assert len(results) == 3
    assert_one_after_the_other(events, "a", "b")
    found = spans(events)
    other, first = found["other"], min(found["a"], found["b"])
    assert other[0] < first[1] and first[0] < other[1], "another thread's run did not wait"


CHILD = """
import os, pathlib, sys
os.environ["CRAG_THREADS_DB"] = sys.argv[1]
from tests.unit.test_thread_run_lock import config, recording_graph
graph = recording_graph([], pause=120, marker=pathlib.Path(sys.argv[2]))
graph.invoke({"visits": []}, config(sys.argv[3], "killed"))
"""


def waiting_locks(uri: str) -> int:
    import psycopg

    with psycopg.connect(uri, autocommit=True) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        ).fetchone()
    return int(row[0]) if row else 0


def test_a_killed_holder_frees_the_thread_and_the_queued_run_goes_on(
    shared: str, tmp_path: Path
) -> None:
    marker = tmp_path / "entered"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, shared, str(marker), "chat-4"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert child.poll() is None, "the holder ended before entering its node"
            assert time.monotonic() < deadline, "the holder never entered its node"
            time.sleep(0.1)
        events: list[Event] = []
        graph = recording_graph(events, pause=0.05)
        queued = threading.Thread(
            target=graph.invoke, args=({"visits": []}, config("chat-4", "queued"))
        )
        queued.start()
        time.sleep(1.5)
        assert events == [] and queued.is_alive(), "the run did not wait for the holder"
        assert waiting_locks(shared) == 1
        killed_at = time.monotonic()
        os.kill(child.pid, signal.SIGKILL)
        queued.join(timeout=30)
        assert not queued.is_alive(), "the queued run never went on"
        assert [kind for _, kind, _ in events] == ["enter", "exit", "enter", "exit"]
        assert events[0][2] > killed_at
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)


def test_without_a_shared_postgresql_no_lock_is_taken(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a lock was taken without a shared PostgreSQL")

    monkeypatch.setattr("crag.app.thread_run_lock.advisory_lock", refuse)
    monkeypatch.setattr("crag.app.thread_run_lock.async_advisory_lock", refuse)
    events: list[Event] = []
    graph = recording_graph(events, pause=0)
    for value in (None, str(tmp_path / "threads.sqlite")):
        if value is None:
            monkeypatch.delenv(THREADS_DB_ENV, raising=False)
        else:
            monkeypatch.setenv(THREADS_DB_ENV, value)
        assert graph.invoke({"visits": []}, config("t", "s"))["visits"] == ["s:first", "s:second"]
        done = asyncio.run(graph.ainvoke({"visits": []}, config("t", "a")))
        assert done["visits"] == ["a:first", "a:second"]


def test_the_served_graphs_and_their_copies_take_the_lock() -> None:
    from crag.app import graphs

    for served in (graphs.graph, graphs.ingest_graph, graphs.rag_graph, graphs.tutorial_graph):
        assert isinstance(served, ThreadLockedGraph)
        assert isinstance(served.copy(update={"checkpointer": None}), ThreadLockedGraph)
        assert isinstance(served.with_config({"configurable": {"x": 1}}), ThreadLockedGraph)


def test_an_unreachable_shared_database_fails_the_run_without_its_password(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import psycopg  # noqa: F401 - missing, the test fails: it never skips

    monkeypatch.setenv(
        THREADS_DB_ENV, f"postgresql://crag:s3cret@/crag?host={tmp_path / 'nowhere'}"
    )
    graph = recording_graph([], pause=0)
    with pytest.raises(SharedLockError) as raised:
        graph.invoke({"visits": []}, config("t", "s"))
    assert "cannot hold crag's lock" in str(raised.value)
    assert "s3cret" not in str(raised.value)
