"""A separate process that runs the CRAG graph on a thread of a threads database.

The PostgreSQL durability tests (``tests/test_threads_postgres.py``) start it with
``python -m tests.thread_process DB THREAD QUESTION...``: it runs each question as a turn on
the thread, with the tests' fake components, and prints each run's output as a JSON line.
With ``--block-at-generate FILE`` it writes FILE when the generator is called and then waits
forever, so that the test can kill it mid-run.
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


def _chat(block_marker: str | None) -> ScriptedChatModel:
    def respond(messages: list[BaseMessage]) -> str:
        if block_marker:
            Path(block_marker).write_text("generating", encoding="utf-8")
            while True:  # killed here by the test
                time.sleep(1)
        return ANSWER

    return ScriptedChatModel(respond=respond, prompts=[])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("thread")
    parser.add_argument("questions", nargs="*")
    parser.add_argument("--block-at-generate", metavar="FILE")
    parser.add_argument("--resume", action="store_true", help="continue the interrupted run")
    args = parser.parse_args()
    fakes = FakeComponents(
        store=StaticStore(corpus_documents()),
        scorer=FixedScoreEvaluator({"Leonardo": 0.9, "Mona Lisa": 0.9}),
        chat=_chat(args.block_at_generate),
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
