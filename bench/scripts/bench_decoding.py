"""The onnxruntime decoder's ways of saving work, each on and off, on crag's own prompts.

Three modes of the shipped SmolLM2's decoder (:mod:`crag.generator.onnx_decoding`):

- ``plain``: every prompt read whole, one model call a reply token (the decoder before these);
- ``prefix cache``: a prompt's read starts from a recent prompt's cache where they share their
  start (:mod:`crag.generator.prefix_cache`);
- ``prefix cache + drafts``: and each call also checks tokens drafted from the prompt
  (:mod:`crag.generator.prompt_lookup`).

The prompts are the generate node's for ``profile_generation.py``'s six questions, or for the
first ``--questions N`` of ``--dataset`` (a dev set: captured by running crag's graph, or read
from ``--prompts``). Each round decodes every prompt in every mode, the modes' order turned
round each round, each mode's cache emptied at its start so that no mode reads another's. It
prints per mode the median seconds of a reply, the seconds of all replies (a round's, averaged
over the rounds), the median model calls and tokens of a reply, the replies whose tokens are
``plain``'s and the load around the rounds.

Usage:
    .venv/bin/python bench/scripts/bench_decoding.py [--rounds 3] [--dataset nq-dev
        --questions 40] [--prompts /tmp/prompts.json] [--output figures.json]
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

MODES = ("plain", "prefix cache", "prefix cache + drafts")


def questions_of(dataset: str | None, count: int) -> tuple[str, ...] | None:
    """The first ``count`` questions of ``dataset``; None: profile_generation's six."""
    if dataset is None:
        return None
    from crag_bench.datasets import load_dataset

    return tuple(q.question for q in load_dataset(dataset)[:count])


def prompts_of(args: argparse.Namespace) -> list[Any]:
    """The generate node's messages for the chosen questions (saved to ``--prompts``)."""
    profile = bench_script("profile_generation")
    questions = questions_of(args.dataset, args.questions)
    if questions is None:
        return profile.load_prompts(args.prompts)[0]
    if args.prompts is not None and args.prompts.is_file():
        return profile.read_prompts(args.prompts)
    prompts = profile.generate_node_prompts(questions)
    if args.prompts is not None:
        profile.write_prompts(args.prompts, prompts)
    return prompts


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every mode over every prompt, ``args.rounds`` times; the figures."""
    from crag.generator.local import LocalChatModel
    from crag.generator.prefix_cache import PrefixCache
    from crag.generator.smollm2 import ensure_smollm2

    prompts = prompts_of(args)
    model = LocalChatModel(model_path=str(ensure_smollm2()), engine="onnxruntime")
    decoder = model._onnx
    if decoder is None or not decoder.checks_drafts:  # the model returns several positions
        raise SystemExit("the shipped model does not decode on onnxruntime with drafts here")
    ids = [model._encode(m)["input_ids"][0].tolist() for m in prompts]
    rules = model._rules(model.max_new_tokens, None)
    calls = [0]
    run_model = decoder._run

    def counted(*a: Any) -> Any:
        calls[0] += 1
        return run_model(*a)

    decoder._run = counted  # type: ignore[method-assign]
    rows: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    loads = [os.getloadavg()[0]]
    for round_index in range(args.rounds):
        order = MODES if round_index % 2 == 0 else tuple(reversed(MODES))
        for mode in order:
            decoder._prefixes = PrefixCache(0 if mode == "plain" else 64 << 20)
            decoder.checks_drafts = mode.endswith("drafts")
            for prompt in ids:
                calls[0] = 0
                start = time.perf_counter()
                reply = decoder.greedy(prompt, rules)
                seconds = time.perf_counter() - start
                rows[mode].append({"s": seconds, "calls": calls[0], "tokens": reply})
            loads.append(os.getloadavg()[0])
    decoder.checks_drafts = True
    plain = [r["tokens"] for r in rows["plain"][: len(ids)]]
    table = {}
    for mode, mode_rows in rows.items():
        first = [r["tokens"] for r in mode_rows[: len(ids)]]
        table[mode] = {
            "reply_s": statistics.median(r["s"] for r in mode_rows),
            "all_s": sum(r["s"] for r in mode_rows) / args.rounds,
            "calls": statistics.median(r["calls"] for r in mode_rows),
            "tokens": statistics.median(len(r["tokens"]) for r in mode_rows),
            "as_plain": sum(a == b for a, b in zip(first, plain, strict=True)),
        }
    return {"modes": table, "prompts": len(ids), "rounds": args.rounds, "loads": loads}


def main() -> int:
    """Measure and print a Markdown table (and write the JSON with ``--output``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dataset", help="a dev set's questions instead of the six")
    parser.add_argument("--questions", type=int, default=40, help="how many of --dataset")
    parser.add_argument("--prompts", type=Path, help="prompts JSON: read if there, else written")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    figures = run(args)
    loads = figures["loads"]
    print(
        f"load {min(loads):.2f}-{max(loads):.2f}, {figures['prompts']} prompts, "
        f"{figures['rounds']} rounds"
    )
    print("| mode | reply s (median) | all replies s | model calls | reply tokens | as plain |")
    print("|---|---|---|---|---|---|")
    for mode, row in figures["modes"].items():
        print(
            f"| {mode} | {row['reply_s']:.3f} | {row['all_s']:.1f} | {row['calls']:g} | "
            f"{row['tokens']:g} | "
            f"{row['as_plain']} of {figures['prompts']} |"
        )
    if args.output:
        args.output.write_text(json.dumps(figures, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
