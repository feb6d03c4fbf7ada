"""Benchmark our continuous batching against transformers' own, on recorded eval prompts.

In one process, on the same prompts, with the same model (the shipped SmolLM2-135M-Instruct,
loaded by the product's ``load_chat_model``, in the product's dtype) and the same greedy
decoding and token limit, each round times three engines, interleaved round by round:

(a) ``ours``: every prompt sent from ``--threads`` threads at once through
    :class:`~crag.generator.local.LocalChatModel` with batching on (``generator_batch_size =
    --threads``, :mod:`crag.generator.batching`), as concurrent runs (``crag-bench eval
    --workers``) send them;
(b) ``library``: transformers' continuous batching, ``model.generate_batch`` on the same token
    ids, at most ``--threads`` requests per batch, with a paged cache sized for the prompts
    (``--library-attention``: ``sdpa`` or ``paged|eager``, the implementations it accepts
    without flash attention; ``auto`` takes the first that works). The call's whole cost is
    timed, the manager's set-up included (there are no CUDA graphs or compilation to warm
    up on a CPU);
(c) ``plain``: ``model.generate`` on one prompt after the other (the reference).

The prompts are the generator prompts recorded by a ``crag-bench eval --prompts-only`` run
(``--run``: its rows.jsonl; ``--prompts`` of them, evenly spaced, so both experiments are in),
or, if that run cannot be read, bench_generation.py's nq-dev prompts. The product's reply
n-gram guard (``no_repeat_ngram_size``, 4 by default) is off on every side: the library's
continuous batching builds its logits processors from a ``GenerationConfig`` only (no custom
processor), drops the repetition penalty and has no reply-only n-gram rule. Prints each
round's seconds and generated tokens per second, the medians, the median ratio of ours to
the library's seconds (above 1: ours is slower), and how many outputs are identical token for
token to the plain ``generate`` ones.

Usage:
    .venv/bin/python bench/scripts/bench_continuous_batching.py [--prompts 24] [--repeats 3]
        [--threads 8] [--max-new-tokens 48] [--library-attention auto]
        [--library-batch-tokens 8192] [--run RUN_DIR]
"""

from __future__ import annotations

import argparse
import logging
import math
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage

from crag.generator.batching import GenerationRequest
from crag.generator.factory import load_chat_model
from crag.generator.local import LocalChatModel
from crag.generator.step_decoding import end_token_ids
from crag_bench.prompt_recording import messages_of
from crag_bench.reader_swap import asks_generator, load_recorded_run

logger = logging.getLogger("bench_continuous_batching")
LIBRARY_ATTENTIONS = ("sdpa", "paged|eager")
"""The attention implementations transformers' continuous batching takes without flash."""
Tokens = list[list[int]]


def recorded_prompts(run_dir: Path, count: int) -> list[list[BaseMessage]]:
    """``count`` generator prompts of a recorded eval run, evenly spaced over its rows.

    Raises:
        ValueError: The run cannot be read or holds fewer than ``count`` generator prompts.
    """
    _, rows = load_recorded_run(run_dir)
    calls = [row.prompts[0] for row in rows if row.prompts and asks_generator(row)]
    if len(calls) < count:
        raise ValueError(f"{run_dir} holds {len(calls)} generator prompts, {count} asked")
    return [messages_of(calls[index * len(calls) // count]) for index in range(count)]


def nq_dev_prompts(count: int) -> list[list[BaseMessage]]:
    """bench_generation.py's answer prompts for the first ``count`` nq-dev questions."""
    from crag_bench.sibling_scripts import bench_script

    prompts: list[list[BaseMessage]] = bench_script("bench_generation").build_prompts(count)
    return prompts


def load_prompts(run_dir: Path | None, count: int) -> list[list[BaseMessage]]:
    """The recorded prompts if a run is given and can be read, else the nq-dev ones."""
    if run_dir is None:
        return nq_dev_prompts(count)
    try:
        prompts = recorded_prompts(run_dir, count)
    except ValueError as exc:
        logger.warning("recorded prompts unusable (%s): using nq-dev prompts", exc)
        return nq_dev_prompts(count)
    logger.info("%d recorded generator prompts of %s", count, run_dir)
    return prompts


def strip_end(tokens: Sequence[int], ends: set[int]) -> list[int]:
    """``tokens`` without a final end-of-sequence token (the step decoder leaves it out)."""
    return list(tokens[:-1]) if tokens and tokens[-1] in ends else list(tokens)


def run_ours(
    model: LocalChatModel, prompts: list[list[BaseMessage]], ids: Tokens, threads: int
) -> Tokens:
    """Every prompt from ``threads`` threads at once through the product's batching path."""
    batcher = model._batcher
    assert batcher is not None
    outputs: dict[tuple[int, ...], list[int]] = {}
    original = batcher.generate

    def recording(request: GenerationRequest) -> list[int]:
        tokens = original(request)
        outputs[tuple(request.input_ids)] = list(tokens)
        return tokens

    model.enable_batching(threads)
    setattr(batcher, "generate", recording)  # noqa: B010 - an instance attribute, undone below
    try:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(model.invoke, prompts))
    finally:
        delattr(batcher, "generate")
        model.enable_batching(1)
    return [outputs[tuple(prompt)] for prompt in ids]


def generation_config(model: LocalChatModel, max_new_tokens: int) -> Any:
    """Greedy decoding to ``max_new_tokens``, ending at the step decoder's end tokens."""
    from transformers import GenerationConfig

    ends = sorted(end_token_ids(model._model, model._tokenizer))
    pad = model._tokenizer.pad_token_id or model._tokenizer.eos_token_id
    return GenerationConfig(  # type: ignore[no-untyped-call]
        do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=ends, pad_token_id=pad
    )


def library_config(ids: Tokens, threads: int, max_new_tokens: int, batch_tokens: int) -> Any:
    """A continuous batching config: ``threads`` requests a batch, a paged cache for them."""
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    page = 256
    pages_per_request = math.ceil((max(map(len, ids)) + max_new_tokens) / page) + 1
    return ContinuousBatchingConfig(
        page_size=page,
        num_blocks=threads * pages_per_request,
        max_batch_tokens=batch_tokens,
        max_requests_per_batch=threads,
        auto_switch_to_flash=False,
        allow_block_sharing=False,
    )


def run_library(
    model: LocalChatModel, ids: Tokens, attention: str, config: Any, max_new_tokens: int
) -> Tokens:
    """``generate_batch`` on every prompt with the ``attention`` implementation.

    Raises:
        RuntimeError: A request failed or came back unfinished.
    """
    network = model._model
    previous = network.config._attn_implementation  # the step decoder's (crag_sdpa)
    network.set_attn_implementation(attention)
    try:
        results = network.generate_batch(
            ids,
            generation_config=generation_config(model, max_new_tokens),
            continuous_batching_config=config,
            warmup=False,
        )
    finally:
        network.set_attn_implementation(previous)
    outputs = list(results.values())
    failed = [o.request_id for o in outputs if o.error is not None or not o.is_finished()]
    if len(outputs) != len(ids) or failed:
        raise RuntimeError(f"{len(outputs)} of {len(ids)} results, failed: {failed}")
    return [list(output.generated_tokens) for output in outputs]


def run_plain(model: LocalChatModel, ids: Tokens, max_new_tokens: int) -> Tokens:
    """``model.generate`` on one prompt after the other."""
    import torch

    config = generation_config(model, max_new_tokens)
    outputs: Tokens = []
    with torch.inference_mode():
        for prompt in ids:
            tensor = torch.tensor([prompt], device=model._model.device)
            output = model._model.generate(
                input_ids=tensor, attention_mask=torch.ones_like(tensor), generation_config=config
            )
            outputs.append(output[0, len(prompt) :].tolist())
    return outputs


def pick_attention(
    model: LocalChatModel, ids: Tokens, choice: str, config: Any, max_new_tokens: int
) -> str:
    """The library attention to time: ``choice``, or for ``auto`` the first that works.

    Raises:
        RuntimeError: No implementation worked.
    """
    if choice != "auto":
        return choice
    for attention in LIBRARY_ATTENTIONS:
        try:
            run_library(model, ids[:1], attention, config, 2)
        except Exception as exc:  # noqa: BLE001 - reported, the next one is tried
            logger.warning("library attention %s failed: %s", attention, exc)
            continue
        logger.info("library attention %s works", attention)
        return attention
    raise RuntimeError(f"none of {LIBRARY_ATTENTIONS} worked")


def timed(engine: Callable[[], Tokens], ends: set[int]) -> tuple[float, Tokens]:
    """Seconds ``engine`` took and its outputs, final end tokens removed."""
    start = time.perf_counter()
    outputs = engine()
    return time.perf_counter() - start, [strip_end(tokens, ends) for tokens in outputs]


def agreement(outputs: Tokens, reference: Tokens) -> int:
    """How many outputs are identical, token for token, to the reference's."""
    return sum(a == b for a, b in zip(outputs, reference, strict=True))


def report(rounds: list[dict[str, dict[str, float]]], engines: Sequence[str]) -> None:
    """Print every round and the medians, with the ratio ours / library."""
    for number, figures in enumerate(rounds, 1):
        cells = [
            f"{name} {f['seconds']:.1f} s {f['tokens_per_s']:.1f} tok/s {f['same']:.0f} same"
            for name, f in figures.items()
        ]
        print(f"round {number}: " + "; ".join(cells))
    medians = {
        name: {key: statistics.median(r[name][key] for r in rounds) for key in rounds[0][name]}
        for name in engines
    }
    for name, median in medians.items():
        print(
            f"median {name}: {median['seconds']:.1f} s, {median['tokens_per_s']:.1f} "
            f"generated tokens/s, {median['tokens']:.0f} tokens, "
            f"{median['same']:.0f} identical to plain"
        )
    if "ours" in medians and "library" in medians:
        ratio = medians["ours"]["seconds"] / medians["library"]["seconds"]
        faster = "ours" if ratio < 1 else "the library"
        print(
            f"ratio of medians, ours / library seconds: {ratio:.2f} "
            f"({faster} {max(ratio, 1 / ratio):.2f}x faster)"
        )


def parse_args() -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--prompts", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=8, help="also the batch limits")
    parser.add_argument("--max-new-tokens", type=int, default=48, help="the eval's limit")
    parser.add_argument(
        "--library-attention", default="auto", choices=["auto", *LIBRARY_ATTENTIONS]
    )
    parser.add_argument(
        "--library-batch-tokens",
        type=int,
        default=8192,
        help="tokens a library forward pass holds (its default; of 512, 2048 and 8192 the fastest)",
    )
    parser.add_argument("--engines", default="ours,library,plain")
    parser.add_argument(
        "--run",
        type=Path,
        help="a `crag-bench eval --prompts-only` run folder (default: bench_generation.py's "
        "nq-dev prompts)",
    )
    return parser.parse_args()


def main() -> None:
    """Load the model and prompts, run the interleaved rounds, print the figures."""
    import torch

    args = parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    model = load_chat_model("smollm2", args.max_new_tokens, 0)  # n-gram guard off: see above
    assert isinstance(model, LocalChatModel)
    prompts = load_prompts(args.run, args.prompts)
    ids = [model._encode(p, args.max_new_tokens)["input_ids"][0].tolist() for p in prompts]
    lengths = sorted(map(len, ids))
    print(
        f"{len(ids)} prompts of {lengths[0]}-{lengths[-1]} tokens (median {lengths[len(ids) // 2]})"
    )
    print(f"dtype {model._model.dtype}, torch threads {torch.get_num_threads()}")
    config = library_config(ids, args.threads, args.max_new_tokens, args.library_batch_tokens)
    engines = args.engines.split(",")
    attention = "-"
    if "library" in engines:
        attention = pick_attention(model, ids, args.library_attention, config, args.max_new_tokens)
    print(
        f"library: attention {attention}, {config.max_requests_per_batch} requests a batch, "
        f"{config.max_batch_tokens} tokens a batch, {config.num_blocks} cache blocks of "
        f"{config.page_size} tokens"
    )
    ends = end_token_ids(model._model, model._tokenizer)
    runs: dict[str, Callable[[], Tokens]] = {
        "ours": lambda: run_ours(model, prompts, ids, args.threads),
        "library": lambda: run_library(model, ids, attention, config, args.max_new_tokens),
        "plain": lambda: run_plain(model, ids, args.max_new_tokens),
    }
    reference = run_plain(model, ids, args.max_new_tokens) if "plain" not in engines else None
    rounds: list[dict[str, dict[str, float]]] = []
    for number in range(1, args.repeats + 1):
        figures: dict[str, dict[str, float]] = {}
        outputs: dict[str, Tokens] = {}
        for name in engines:
            seconds, outputs[name] = timed(runs[name], ends)
            tokens = sum(map(len, outputs[name]))
            figures[name] = {"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds}
            logger.info("round %d: %s %.1f s", number, name, seconds)
        base = outputs.get("plain") or [strip_end(t, ends) for t in reference or []]
        for name in engines:
            figures[name]["same"] = agreement(outputs[name], base)
        rounds.append(figures)
    report(rounds, engines)


if __name__ == "__main__":
    main()
