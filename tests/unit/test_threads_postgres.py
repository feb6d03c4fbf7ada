"""Threads on a real PostgreSQL (started by the test): durability across processes.

Each case runs the graph in separate processes (``tests/thread_process.py``), as separate
``crag`` invocations or server workers would: a thread written by one is continued by another;
a process killed mid-run leaves the thread at its last checkpoint; two processes writing
different threads at once lose nothing; a database that goes away mid-run gives a clear error
and the run succeeds when retried after it is back.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crag.app.api import apersistent_graph, persistent_graph, thread_config, thread_turns
from crag.app.cli.commands import main
from crag.app.threads import (
    CONNECT_TIMEOUT_S,
    ThreadsDatabaseError,
    describe_threads_db,
    is_postgres,
)
from tests.fakes import (
    FakeComponents,
    FixedScoreEvaluator,
    ScriptedChatModel,
    StaticStore,
    app_components,
    corpus_documents,
)
from tests.postgres_support import PostgresServer, postgres_server

ROOT = Path(__file__).resolve().parents[2]
MONA = "Who painted the Mona Lisa?"
FOLLOW_UP = "Where is it held?"
PROCESS_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    with postgres_server() as (_, uri):
        yield uri


def _process(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.thread_process", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _outputs(*args: str) -> list[dict[str, Any]]:
    proc = _process(*args)
    out, err = proc.communicate(timeout=PROCESS_TIMEOUT_S)
    assert proc.returncode == 0, err
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def _wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + PROCESS_TIMEOUT_S
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "the run never reached the generator"
        time.sleep(0.1)


def test_a_thread_written_by_one_process_is_continued_by_another(postgres: str) -> None:
    first = _outputs(postgres, "t-continue", MONA)
    assert first[0]["answer"] == "Leonardo da Vinci."
    second = _outputs(postgres, "t-continue", FOLLOW_UP)
    # the follow-up was read with the first turn: its standalone question names the painting
    assert "Mona Lisa" in second[0]["standalone_question"]
    with persistent_graph(postgres) as graph:
        turns = thread_turns(graph, "t-continue")
    assert turns[0]["question"] == MONA
    assert turns[1]["question"].startswith(FOLLOW_UP)


def test_a_process_killed_mid_run_leaves_the_last_checkpoint(postgres: str, tmp_path: Path) -> None:
    marker = tmp_path / "generating"
    proc = _process(postgres, "t-killed", MONA, "--block-at-generate", str(marker))
    _wait_for(marker, proc)
    time.sleep(1.0)  # let the checkpoints of the finished steps reach the database
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=PROCESS_TIMEOUT_S)
    assert proc.returncode == -signal.SIGKILL

    with persistent_graph(postgres) as graph:
        state = graph.get_state(thread_config("t-killed"))
    assert state.values["question"] == MONA
    assert state.next, "the interrupted run should have a step left to run"
    assert "answer" not in state.values or not state.values["answer"]

    resumed = _outputs(postgres, "t-killed", "--resume")
    assert resumed[0]["answer"] == "Leonardo da Vinci."
    again = _outputs(postgres, "t-killed", MONA)  # and a new run on the thread starts cleanly
    assert again[0]["answer"] == "Leonardo da Vinci."
    with persistent_graph(postgres) as graph:
        assert [t["question"] for t in thread_turns(graph, "t-killed")] == [MONA, MONA]
        assert not graph.get_state(thread_config("t-killed")).next


def test_two_processes_writing_different_threads_at_once_lose_nothing(
    postgres: str, tmp_path: Path
) -> None:
    """Both processes run their turns in step: each chat call waits for the other's.

    So every turn of one is in flight, writing its checkpoints, while the other's is (without
    the barrier one process could finish before the other started).
    """
    turns = 4
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    meet = ("--meet-at-generate", str(barrier), "--peers", "2")
    names = ("t-left", "t-right")
    procs = {name: _process(postgres, name, *[MONA] * turns, *meet) for name in names}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=PROCESS_TIMEOUT_S)
        assert proc.returncode == 0, err
        assert len(out.splitlines()) == turns, name
    calls = {name: sorted(p.name for p in barrier.glob(f"{name}.*")) for name in names}
    assert len(calls["t-left"]) >= turns and len(calls["t-left"]) == len(calls["t-right"])
    with persistent_graph(postgres) as graph:
        spans: dict[str, tuple[str, str]] = {}
        for name in procs:
            assert [t["question"] for t in thread_turns(graph, name)] == [MONA] * turns
            history = graph.get_state_history(thread_config(name))
            written = sorted(s.created_at for s in history if s.created_at is not None)
            spans[name] = (written[0], written[-1])
    # the two threads' checkpoints were written over a common span of time
    assert max(start for start, _ in spans.values()) < min(end for _, end in spans.values())


def _blocking_chat(started: threading.Event, release: threading.Event) -> ScriptedChatModel:
    def respond(messages: Any) -> str:
        started.set()
        release.wait(PROCESS_TIMEOUT_S)
        return "Leonardo da Vinci."

    return ScriptedChatModel(respond=respond, prompts=[])


def test_a_database_gone_mid_run_fails_fast_with_one_line_and_the_retry_works(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The run fails within the connection timeout, with one line and no pool warnings.

    LangGraph writes checkpoints in the background and raises the first failure when the run
    ends: each later step used to wait the pool's timeout again (a minute, with a warning per
    reconnection attempt), where now the writes after the first failure fail at once.
    """
    started, release = threading.Event(), threading.Event()
    fakes = FakeComponents(
        store=StaticStore(corpus_documents()),
        scorer=FixedScoreEvaluator({"Leonardo": 0.9}),
        chat=_blocking_chat(started, release),
    )
    caplog.set_level(logging.INFO)
    with postgres_server() as (server, uri), persistent_graph(uri, components=fakes) as graph:
        failure: list[BaseException] = []

        def run() -> None:
            try:
                graph.invoke({"question": MONA}, thread_config("t-outage"))
            except BaseException as exc:  # noqa: BLE001 - the test inspects it
                failure.append(exc)

        worker = threading.Thread(target=run)
        worker.start()
        assert started.wait(PROCESS_TIMEOUT_S)
        server.stop()
        caplog.clear()
        stopped = time.monotonic()
        release.set()
        worker.join(PROCESS_TIMEOUT_S)
        elapsed = time.monotonic() - stopped
        assert len(failure) == 1
        assert isinstance(failure[0], ThreadsDatabaseError)
        message = str(failure[0])
        assert "threads database" in message and "retry" in message
        assert "\n" not in message
        assert elapsed < CONNECT_TIMEOUT_S + 3, f"the run failed after {elapsed:.1f} s"
        pool_warnings = [
            r.getMessage() for r in caplog.records
            if r.name.startswith("psycopg") and r.levelno >= logging.WARNING
        ]  # fmt: skip
        assert not pool_warnings, pool_warnings

        _restart(server, uri)
        out = graph.invoke({"question": MONA}, thread_config("t-outage"))
        assert out["answer"] == "Leonardo da Vinci."


def test_an_async_run_that_loses_the_database_fails_fast_too() -> None:
    """The same through ``apersistent_graph`` (psycopg's async pool) and ``ainvoke``."""
    started, release = threading.Event(), threading.Event()
    fakes = FakeComponents(
        store=StaticStore(corpus_documents()),
        scorer=FixedScoreEvaluator({"Leonardo": 0.9}),
        chat=_blocking_chat(started, release),
    )

    async def scenario(server: PostgresServer, uri: str) -> float:
        async with apersistent_graph(uri, components=fakes) as graph:
            run = asyncio.create_task(graph.ainvoke({"question": MONA}, thread_config("t-async")))
            assert await asyncio.to_thread(started.wait, PROCESS_TIMEOUT_S)
            server.stop()
            stopped = time.monotonic()
            release.set()
            with pytest.raises(ThreadsDatabaseError) as caught:
                await run
            elapsed = time.monotonic() - stopped
            assert "\n" not in str(caught.value) and "retry" in str(caught.value)
            _restart(server, uri)
            out = await graph.ainvoke({"question": MONA}, thread_config("t-async"))
            assert out["answer"] == "Leonardo da Vinci."
            return elapsed

    with postgres_server() as (server, uri):
        elapsed = asyncio.run(scenario(server, uri))
    assert elapsed < CONNECT_TIMEOUT_S + 3, f"the run failed after {elapsed:.1f} s"


def _restart(server: PostgresServer, uri: str) -> None:
    assert server.start() == uri  # same data directory, same socket: the URI still holds


def test_an_unreachable_database_is_one_clear_line(tmp_path: Path) -> None:
    url = f"postgresql://crag:secret@/crag?host={tmp_path}"  # no server listens there
    assert is_postgres(url) and not is_postgres(tmp_path / "threads.sqlite")
    assert "secret" not in describe_threads_db(url)
    with pytest.raises(ThreadsDatabaseError) as caught, persistent_graph(url):
        pass
    assert "secret" not in str(caught.value)
    assert main(["history", "t1", "--threads-db", url]) == 2


def test_crag_ask_thread_on_postgres(postgres: str, capsys: pytest.CaptureFixture[str]) -> None:
    fakes = FakeComponents(
        store=StaticStore(corpus_documents()),
        scorer=FixedScoreEvaluator({"Leonardo": 0.9}),
        chat=ScriptedChatModel(respond=lambda m: "Leonardo da Vinci.", prompts=[]),
    )
    with app_components(fakes):
        assert main(["ask", "-q", "--thread", "cli", "--threads-db", postgres, MONA]) == 0
    capsys.readouterr()
    assert main(["history", "cli", "--threads-db", postgres, "--json"]) == 0
    assert [t["question"] for t in json.loads(capsys.readouterr().out)] == [MONA]
