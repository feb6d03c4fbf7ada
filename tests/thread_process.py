"""A separate process that runs the CRAG graph on a thread of a threads database.

The PostgreSQL durability tests (``tests/test_threads_postgres.py``) start it with
``python -m tests.thread_process DB THREAD QUESTION...``: it runs each question as a turn on
the thread, with the tests' fake components, and prints each run's output as a JSON line.
With ``--block-at-generate FILE`` it writes FILE when the generator is called and then waits
forever, so that the test can kill it mid-run. With ``--meet-at-generate DIR --peers N`` the
n-th call of the chat model waits until N processes have made their n-th call (a barrier of
files in DIR), so that their runs are in flight, and write their checkpoints, at the same time.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage

from crag.app.api import output_of, persistent_graph, thread_config
from tests.fakes import (
    FakeComponents,
    FixedScoreEvaluator,
    ScriptedChatModel,
    StaticSearch,
    StaticStore,
    corpus_documents,
)

ANSWER = "Leonardo da Vinci."
MEET_TIMEOUT_S = 60


def _meet(folder: Path, name: str, call: int, peers: int) -> None:
    """Say this process made its ``call``-th chat call; wait until ``peers`` processes have."""
    (folder / f"{name}.{call}").write_text(str(time.time()), encoding="utf-8")
    deadline = time.monotonic() + MEET_TIMEOUT_S
    while len(list(folder.glob(f"*.{call}"))) < peers:
        if time.monotonic() > deadline:
            raise SystemExit(f"the other processes never made chat call {call}")
        time.sleep(0.02)


def _chat(block_marker: str | None, meet: tuple[Path, str, int] | None = None) -> ScriptedChatModel:
    calls = iter(range(1_000_000))

    def respond(messages: list[BaseMessage]) -> str:
        if block_marker:
            Path(block_marker).write_text("generating", encoding="utf-8")
            while True:  # killed here by the test
                time.sleep(1)
        if meet is not None:
            _meet(*meet[:2], next(calls), meet[2])
        return ANSWER

    return ScriptedChatModel(respond=respond, prompts=[])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("thread")
    parser.add_argument("questions", nargs="*")
    parser.add_argument("--block-at-generate", metavar="FILE")
    parser.add_argument("--resume", action="store_true", help="continue the interrupted run")
    parser.add_argument("--meet-at-generate", metavar="DIR", type=Path)
    parser.add_argument("--peers", type=int, default=2)
    args = parser.parse_args()
    meet = (args.meet_at_generate, args.thread, args.peers) if args.meet_at_generate else None
    fakes = FakeComponents(
        store=StaticStore(corpus_documents()),
        scorer=FixedScoreEvaluator({"Leonardo": 0.9, "Mona Lisa": 0.9}),
        chat=_chat(args.block_at_generate, meet),
        web=StaticSearch(error="search is off in this test"),
    )
    config = thread_config(args.thread)
    with persistent_graph(args.db, components=fakes) as graph:
        inputs: list[Any] = [None] if args.resume else [{"question": q} for q in args.questions]
        for run_input in inputs:
            out = graph.invoke(run_input, config)
            print(json.dumps(output_of(out), ensure_ascii=False), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
