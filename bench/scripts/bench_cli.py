"""Where a cold ``crag ask`` spends its time, and what ``crag serve`` saves.

Usage: .venv/bin/python bench/scripts/bench_cli.py [--repeats 5] [--question "..."]

Runs in the repository's default store (``.crag/chroma``, filled on first use). Prints medians
over ``--repeats`` runs, each a fresh process, of:

1. the cold path, stage by stage, in one process per repeat, set up as ``crag`` sets itself up
   (:mod:`crag.app.environment`, the garbage collector paused: :mod:`crag.app.cli.collector`):
   importing ``crag.app.cli.commands``, ``torch``, the graph's modules, transformers' model
   classes (the embedder's and the generator's) and ``chromadb``; loading the embedder and
   opening the store, the evaluator, the generator; the run itself once all is loaded; and the
   process's own start and exit (its wall time less the stages);
2. ``crag ask`` wall time in-process (``--no-server``) and through a running ``crag serve``
   (started by this script on a socket of its own and stopped at the end).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

STAGES = r"""
import json, sys, time
t0 = time.perf_counter(); marks = {}
def mark(name):
    marks[name] = time.perf_counter() - t0 - sum(marks.values())
from crag.app.cli import collector; collector.pause()  # as crag's entry point does
from crag.app.environment import configure_environment; configure_environment()
import crag.app.cli.commands; mark("import crag.app.cli")
import torch; mark("import torch")
from crag.app.graphs import components, graph; from crag.settings.context import Context
from crag.settings.run_settings import RunSettings
mark("import the graph")
from transformers import AutoModel, AutoModelForCausalLM; mark("import transformers' models")
import chromadb; mark("import chromadb")
settings = RunSettings()
components.vectorstore(settings); mark("load the embedder, open the store")
components.evaluator(settings); mark("load the evaluator")
components.chat_model(settings); mark("load the generator")
graph.invoke({"question": sys.argv[1]}, context=Context()); mark("answer (models loaded)")
print(json.dumps(marks))
collector.before_exit()
"""

START_AND_EXIT = "start and exit the process"
"""The row for the interpreter's own start and teardown: wall time less the stages."""


def _median_table(rows: list[dict[str, float]]) -> list[tuple[str, float]]:
    return [(name, statistics.median(row[name] for row in rows)) for name in rows[0]]


def cold_stages(question: str, repeats: int) -> list[tuple[str, float]]:
    """Median seconds per stage of a cold process, its start and exit the last row."""
    rows = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", STAGES, question],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        wall = time.perf_counter() - start
        row = json.loads(out.strip().splitlines()[-1])
        row[START_AND_EXIT] = wall - sum(row.values())
        rows.append(row)
    return _median_table(rows)


def _crag(args: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(
        [str(ROOT / ".venv/bin/crag"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        check=True,
    )
    return time.perf_counter() - start


def warm_and_cold(question: str, repeats: int) -> dict[str, float]:
    """Median wall seconds of ``crag ask -q`` in-process and through ``crag serve``."""
    socket_dir = tempfile.mkdtemp(prefix="crag-bench-")
    env = {**os.environ, "CRAG_SERVE_SOCKET": str(Path(socket_dir) / "serve.sock")}
    cold = [_crag(["ask", "-q", "--no-server", question], env) for _ in range(repeats)]
    server = subprocess.Popen(
        [str(ROOT / ".venv/bin/crag"), "serve"],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stderr is not None
        for line in server.stderr:
            if "ready on" in line:
                break
        warm = [_crag(["ask", "-q", question], env) for _ in range(repeats)]
    finally:
        _crag(["serve", "--stop"], env)
        server.wait(timeout=60)
    return {
        "crag ask, in-process": statistics.median(cold),
        "crag ask, crag serve running": statistics.median(warm),
    }


def main() -> int:
    """Print both tables (medians)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--question", default="Who painted the Mona Lisa?")
    args = parser.parse_args()
    stages = cold_stages(args.question, args.repeats)
    print(f"Cold path, median of {args.repeats} processes (seconds):")
    for name, seconds in stages:
        print(f"  {name:<34} {seconds:6.2f}")
    print(f"  {'total':<34} {sum(s for _, s in stages):6.2f}")
    print(f"crag ask wall time, median of {args.repeats} (seconds):")
    for name, seconds in warm_and_cold(args.question, args.repeats).items():
        print(f"  {name:<30} {seconds:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
