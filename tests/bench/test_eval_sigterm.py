"""SIGTERM stops ``crag-bench eval`` and ``eval-reader`` while their workers are busy.

Each test runs the real command in a subprocess on files it writes, with a slow fake
generator (``SlowModel`` below: one second an answer, no model to load) and, for ``eval``, a
hashing embedder, so that the signal lands while many runs are still queued. The process must
stop within seconds (not after the queue drains), say so in one line, exit 143 and keep the
rows it finished in ``OUT/rows.partial.jsonl``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crag_bench.runner import Row
from tests.warm_support import ROOT

STOP_SECONDS = 10.0
"""How long the process may take to exit after SIGTERM (the queued work takes 30 s or more)."""

SLOW_MODEL = """
import sys, time
from langchain_core.language_models.fake_chat_models import FakeListChatModel

class SlowModel(FakeListChatModel):
    '''A fake generator: answers "Paris" after a second.'''

    def _call(self, *args, **kwargs):
        time.sleep(1.0)
        return "Paris"

slow = SlowModel(responses=["Paris"])
"""

EVAL_CLI = (
    SLOW_MODEL
    + """
import crag.vectorstore.embeddings as embeddings
from tests.hash_embeddings import HashEmbeddings
fast = HashEmbeddings()
embeddings.shared_embeddings = lambda name="": fast
embeddings.load_embeddings = lambda name="": fast
import crag_bench.eval_components as eval_components
eval_components.EvalComponents.chat_model = lambda self, settings: slow
from crag_bench.cli import main
sys.exit(main())
"""
)

READER_CLI = (
    SLOW_MODEL
    + """
import crag.generator.factory as factory
factory.load_chat_model = lambda *args, **kwargs: slow
from crag_bench.cli import main
sys.exit(main())
"""
)


def _start(script: str, args: list[str], cwd: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAG_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _wait_for_progress(process: subprocess.Popen[bytes], done: int, timeout: float) -> str:
    """Read the progress bar on stderr until it shows ``done`` of 60 or more; what was read."""
    assert process.stderr is not None
    fd = process.stderr.fileno()
    seen = ""
    deadline = time.monotonic() + timeout
    while max((int(n) for n in re.findall(r"(\d+)/60 ", seen)), default=0) < done:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"the progress did not reach {done}; got {seen[-2000:]!r}"
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            data = os.read(fd, 65536)
            assert data, f"the stream ended before {done} were done; got {seen[-2000:]!r}"
            seen += data.decode("utf-8", "replace")
    return seen


def _terminate_after(process: subprocess.Popen[bytes], done: int) -> tuple[float, str]:
    """Send SIGTERM once ``done`` runs are done; the seconds to exit and all of stderr."""
    try:
        seen = _wait_for_progress(process, done, timeout=240)
        process.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        try:
            _, rest = process.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            rest = b""
        return time.monotonic() - sent, seen + rest.decode("utf-8", "replace")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _partial_rows(out: Path) -> list[dict[str, object]]:
    lines = (out / "rows.partial.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def _assert_stopped(process: subprocess.Popen[bytes], seconds: float, err: str) -> None:
    assert seconds < STOP_SECONDS, f"still running {seconds:.0f} s after SIGTERM: {err[-2000:]}"
    assert process.returncode == 143, err[-2000:]
    assert "crag-bench: terminated" in err and "Traceback" not in err, err[-2000:]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_sigterm_stops_an_eval_and_keeps_its_finished_rows(tmp_path: Path, workers: str) -> None:
    corpus = tmp_path / "docs"
    corpus.mkdir()
    (corpus / "paris.txt").write_text("Paris is the capital of France.", encoding="utf-8")
    questions = tmp_path / "questions.jsonl"
    questions.write_text(
        "".join(
            json.dumps({"id": str(n), "question": f"Question {n}?", "possible_answers": ["Paris"]})
            + "\n"
            for n in range(60)
        ),
        encoding="utf-8",
    )
    out = tmp_path / "out"
    args = ["eval", "--questions", str(questions), "--corpus", str(corpus), "--out", str(out)]
    args += ["--experiments", "no-retrieval", "--no-performance", "--workers", workers]
    process = _start(EVAL_CLI, [*args, "--latency-questions", "1"], tmp_path)
    seconds, err = _terminate_after(process, 3)
    _assert_stopped(process, seconds, err)
    rows = _partial_rows(out)
    assert 3 <= len(rows) < 60, len(rows)
    assert all(row["answer"] == "Paris" and row["experiment"] == "no-retrieval" for row in rows)
    assert not (out / "results.json").exists()


def _recorded_row(number: int) -> Row:
    question = f"Question {number}?"
    call = {
        "node": "answer_closed_book",
        "messages": [
            {"role": "system", "content": "Answer briefly."},
            {"role": "human", "content": question},
        ],
    }
    return Row(
        experiment="no-retrieval",
        id=str(number),
        question=question,
        answers=["Paris"],
        answer="",
        correct=False,
        action=None,
        gold_in_top_k=None,
        answer_in_knowledge=False,
        passages=0,
        internal=0,
        external=0,
        seconds=0.0,
        stages={},
        notes=[],
        prompts=[call],  # type: ignore[list-item]
    )


def test_sigterm_stops_eval_reader_and_keeps_its_finished_rows(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    meta = {"max_new_tokens": 16, "seed": 0, "gold_removed_share": 50, "generator": "smollm2"}
    results = {"meta": meta, "experiments": [{"name": "no-retrieval"}]}
    (run / "results.json").write_text(json.dumps(results), encoding="utf-8")
    rows = [dataclasses.asdict(_recorded_row(n)) for n in range(60)]
    (run / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "out"
    args = ["eval-reader", str(run), "--generator", "slow", "--out", str(out), "--workers", "2"]
    process = _start(READER_CLI, args, tmp_path)
    seconds, err = _terminate_after(process, 3)
    _assert_stopped(process, seconds, err)
    done = _partial_rows(out)
    assert 3 <= len(done) < 60, len(done)
    assert all(row["answer"] == "Paris" for row in done)
    assert not (out / "results.json").exists()
