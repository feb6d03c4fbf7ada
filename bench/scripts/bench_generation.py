"""Benchmark the local generator: prompts one at a time against continuous batching.

Builds answer prompts as the graph does (the generate prompt; knowledge: 0, 2 or 10 bundled
Wikipedia summaries, so prompt lengths range from ~60 to ~1,500 tokens) for the first dev
questions, then, in each of ``--repeats`` rounds: (1) every prompt alone through ``generate``
(batching off, as a served graph runs), (2) the same prompts from ``--threads`` threads at once,
decoded by the step decoder (``crag-bench eval --workers``), and (3) decoding steps of 8 rows over
~1,300 cached tokens: with the decode attention over appendable cache layers (the default),
with it over transformers' cache layers (each step copies the cache), and with transformers'
SDPA. Prints each round's figures and the medians; ratios are taken within a round.

Usage:
    .venv/bin/python bench/scripts/bench_generation.py [--prompts 24] [--threads 8] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from crag.generator.batching import GenerationRequest
from crag.generator.factory import load_chat_model
from crag.generator.local import LocalChatModel
from crag.generator.step_decoding import StepDecoder
from crag.prompts.generate import GENERATE_HUMAN, GENERATE_SYSTEM, NO_ANSWER
from crag.vectorstore.corpus import corpus_path

logger = logging.getLogger("bench_generation")
QUESTIONS = Path(__file__).resolve().parents[1] / "crag_bench/data/open_domain/nq-dev.jsonl"


def build_prompts(count: int) -> list[list[BaseMessage]]:
    """Answer prompts for the first ``count`` nq-dev questions, with 0, 2 or 10 summaries."""
    pages = json.loads(corpus_path().read_text(encoding="utf-8")).values()
    summaries = [str(page["extract"]) for page in pages]
    lines = QUESTIONS.read_text(encoding="utf-8").splitlines()[:count]
    prompts: list[list[BaseMessage]] = []
    for index, line in enumerate(lines):
        passages = summaries[index * 10 : index * 10 + (0, 2, 10)[index % 3]]
        knowledge = "\n".join(f"[{n}] {text}" for n, text in enumerate(passages, 1))
        question = json.loads(line)["question"]
        prompts.append(
            [
                SystemMessage(GENERATE_SYSTEM.format(no_answer=NO_ANSWER)),
                HumanMessage(GENERATE_HUMAN.format(knowledge=knowledge, question=question)),
            ]
        )
    return prompts


def time_alone(model: LocalChatModel, prompts: list[list[BaseMessage]]) -> float:
    """Seconds to answer every prompt one after the other, batching off."""
    model.enable_batching(1)
    start = time.perf_counter()
    for prompt in prompts:
        model.invoke(prompt)
    return time.perf_counter() - start


def time_batched(model: LocalChatModel, prompts: list[list[BaseMessage]], threads: int) -> float:
    """Seconds to answer every prompt from ``threads`` threads at once, batching on."""
    model.enable_batching(threads)
    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(model.invoke, prompts))
    elapsed = time.perf_counter() - start
    model.enable_batching(1)
    return elapsed


def step_milliseconds(
    model: LocalChatModel, long_prompt: list[int], *, fast: bool, in_place: bool = True
) -> float:
    """Median milliseconds of a decoding step of 8 rows over ``long_prompt``'s length."""
    decoder = StepDecoder(
        model._model, model._tokenizer, decode_attention=fast, append_in_place=in_place
    )
    for _ in range(8):
        decoder.admit(GenerationRequest(list(long_prompt), 1000))
    decoder.step()
    times = []
    for _ in range(10):
        start = time.perf_counter()
        decoder.step()
        times.append(time.perf_counter() - start)
    decoder.fail_all()
    return 1000 * statistics.median(times)


def run_round(
    model: LocalChatModel, prompts: list[list[BaseMessage]], threads: int
) -> dict[str, Any]:
    """One round of the three measurements."""
    long_prompt = max((model._encode(p)["input_ids"][0].tolist() for p in prompts), key=len)
    alone = time_alone(model, prompts)
    batched = time_batched(model, prompts, threads)
    fast = step_milliseconds(model, long_prompt, fast=True)
    copying = step_milliseconds(model, long_prompt, fast=True, in_place=False)
    sdpa = step_milliseconds(model, long_prompt, fast=False)
    return {
        "alone_s": alone,
        "batched_s": batched,
        "batched_speedup": alone / batched,
        "step_ms_decode_attention": fast,
        "step_ms_copying_cache": copying,
        "step_ms_sdpa": sdpa,
        "in_place_speedup": copying / fast,
        "step_speedup": sdpa / fast,
        "cached_tokens": len(long_prompt),
    }


def main() -> None:
    """Run the rounds and print every figure and the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=24)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    model = load_chat_model("smollm2", max_new_tokens=48)
    assert isinstance(model, LocalChatModel)
    prompts = build_prompts(args.prompts)
    rounds = [run_round(model, prompts, args.threads) for _ in range(args.repeats)]
    for number, figures in enumerate(rounds, 1):
        logger.info(
            "round %d: %s", number, json.dumps({k: round(v, 3) for k, v in figures.items()})
        )
    medians = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    logger.info(
        "medians over %d rounds, %d prompts, %d threads: alone %.1f s, batched %.1f s "
        "(%.2fx); decoding step, 8 rows over %d tokens: %.0f ms with the decode attention "
        "appending in place, %.0f ms copying the cache each step (%.2fx), %.0f ms with SDPA "
        "(%.2fx)",
        args.repeats,
        args.prompts,
        args.threads,
        medians["alone_s"],
        medians["batched_s"],
        medians["batched_speedup"],
        medians["cached_tokens"],
        medians["step_ms_decode_attention"],
        medians["step_ms_copying_cache"],
        medians["in_place_speedup"],
        medians["step_ms_sdpa"],
        medians["step_speedup"],
    )


if __name__ == "__main__":
    main()
