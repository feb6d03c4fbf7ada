"""The generator's engines side by side on crag's own prompts: transformers and onnxruntime.

Loads the shipped SmolLM2 three ways, as crag loads it (``LocalChatModel``): ``torch`` with
``dtype`` ``auto`` (bfloat16 on a CPU with native bfloat16: the default before
``generator_engine``), ``torch`` in float32 (what batches decode in), and ``onnxruntime`` (the
default now: :mod:`crag.generator.onnx_decoding`). On the generate node's prompts for
``profile_generation.py``'s six questions (captured by running crag's graph, or read from
``--prompts``) it streams every reply, in rounds that alternate the engines, and prints per
engine the medians of: the time to the first token, the milliseconds per later token, the
whole reply; how many replies have transformers float32's tokens; how many hold the right
answer (a case-blind substring test); and the load average around the rounds. ``--busy``
keeps one core busy meanwhile (a spinning process), as on a shared machine.

Usage:
    CRAG_STORE_PATH=/tmp/me/chroma .venv/bin/python bench/scripts/bench_engines.py \
        [--rounds 3] [--busy] [--prompts /tmp/prompts.json] [--output figures.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import time
from pathlib import Path
from typing import Any

from crag_bench.sibling_scripts import bench_script

ANSWERS = ("Leonardo da Vinci", "Jane Austen", "Canberra", "Albert Einstein", "Jupiter", "1989")
"""The right answer of each of profile_generation's six questions, in order."""

ENGINES = {
    "torch, auto (bfloat16 here)": {"engine": "torch", "dtype": "auto"},
    "torch, float32": {"engine": "torch", "dtype": "float32"},
    "onnxruntime (float32)": {"engine": "onnxruntime", "dtype": "auto"},
}


def timed_stream(model: Any, messages: Any) -> dict[str, Any]:
    """One streamed reply: its text, first-token seconds, ms per later token, total seconds."""
    start = time.perf_counter()
    stamps: list[float] = []
    pieces: list[str] = []
    for chunk in model.stream(messages):
        stamps.append(time.perf_counter())
        pieces.append(chunk.text)
    total = time.perf_counter() - start
    text = "".join(pieces)
    tokens = len(model.get_token_ids(text))
    later = (stamps[-1] - stamps[0]) * 1000 / (tokens - 1) if tokens > 1 else float("nan")
    first = stamps[0] - start if stamps else float("nan")
    return {"text": text, "first_s": first, "ms_per_token": later, "total_s": total}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every engine over every prompt, ``args.rounds`` times alternated; the figures."""
    from crag.generator.local import LocalChatModel
    from crag.generator.smollm2 import ensure_smollm2

    profile = bench_script("profile_generation")
    prompts, _ = profile.load_prompts(args.prompts)
    path = str(ensure_smollm2())
    models = {}
    for name, options in ENGINES.items():
        start = time.perf_counter()
        models[name] = LocalChatModel(model_path=path, **options)
        logging.info("%s loaded in %.2f s", name, time.perf_counter() - start)
    replies: dict[str, list[dict[str, Any]]] = {name: [] for name in ENGINES}
    loads = [os.getloadavg()[0]]
    with profile.busy_core(args.busy):
        for _ in range(args.rounds):
            for name, model in models.items():
                replies[name].extend(timed_stream(model, messages) for messages in prompts)
                loads.append(os.getloadavg()[0])
    reference = [r["text"] for r in replies["torch, float32"][: len(prompts)]]
    table = {}
    for name, rows in replies.items():
        texts = [r["text"] for r in rows[: len(prompts)]]
        table[name] = {
            "first_token_s": statistics.median(r["first_s"] for r in rows),
            "ms_per_token": statistics.median(r["ms_per_token"] for r in rows),
            "reply_s": statistics.median(r["total_s"] for r in rows),
            "as_float32": sum(a == b for a, b in zip(texts, reference, strict=True)),
            "right": sum(a.lower() in t.lower() for a, t in zip(ANSWERS, texts, strict=False)),
            "texts": texts,
        }
    return {"engines": table, "prompts": len(prompts), "rounds": args.rounds, "loads": loads}


def main() -> int:
    """Measure and print a Markdown table (and write the JSON with ``--output``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--busy", action="store_true", help="keep one core busy meanwhile")
    parser.add_argument("--prompts", type=Path, help="prompts JSON: read if there, else written")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    figures = run(args)
    loads = figures["loads"]
    print(
        f"load {min(loads):.2f}-{max(loads):.2f}, {figures['prompts']} prompts, "
        f"{figures['rounds']} rounds{' , one core busy' if args.busy else ''}"
    )
    print("| engine | first token s | ms a token | reply s | tokens as float32 | right |")
    print("|---|---|---|---|---|---|")
    for name, row in figures["engines"].items():
        print(
            f"| {name} | {row['first_token_s']:.2f} | {row['ms_per_token']:.1f} | "
            f"{row['reply_s']:.2f} | {row['as_float32']} of {figures['prompts']} | "
            f"{row['right']} |"
        )
    if args.output:
        args.output.write_text(json.dumps(figures, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
