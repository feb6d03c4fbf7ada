"""crag's continuous batching against transformers' own, on the generate node's prompts.

On the shipped generator (SmolLM2-135M-Instruct) on this machine's CPU, greedy, ``--max-new-
tokens`` (48), for each prompt count of ``--counts`` (8 and 16 prompts submitted at once):

- ``crag``: :class:`~crag.generator.local.LocalChatModel` with batching on (``enable_batching(n)``,
  as the deployment setting ``generator_batch_size`` does for served runs), every prompt sent by
  ``invoke`` from its own thread; the reply n-gram blocker on (``no_repeat_ngram_size`` of the
  deployment settings, 4), in each dtype of ``--dtypes``;
- ``transformers``: the library's continuous batching, ``model.generate_batch`` on the same
  token ids and the same weights, every prompt in one call (``max_requests_per_batch`` n, a
  paged cache sized for the prompts, attention ``sdpa`` or ``paged|eager``: the first that
  runs); no n-gram blocker (it cannot take crag's, see below);
- the reference: each prompt's lone answer, ``invoke``'s path with batching off (``generate``,
  float32, the blocker on), and for the library also the lone answer with the blocker off.

Each of ``--repeats`` rounds runs both engines on every count, which goes first alternating
round by round. It prints the medians of wall seconds, generated tokens per second and how many
answers equal the reference token for token, with the load average before and after each timed
run, and each round's ratio of crag's seconds to the library's. Then two checks of
what crag needs from a batcher: (1) the reply n-gram blocker: the library builds its logits
processors from a ``GenerationConfig`` only, so the nearest it has is ``no_repeat_ngram_size``
(transformers' rule, prompt included); the check runs it on four prompts and reports what
happens; (2) stopping one row on cancel: crag cancels a request's :class:`CancelToken` after
four decoding steps, the library calls ``cancel_request`` once a streamed row has four tokens;
both report what the cancelled row and the other rows got.

The prompts are captured from crag's graph (``crag.app.api.ask`` on the store
``CRAG_STORE_PATH`` names, the bundled corpus, written on first use), the generate node's
model call wrapped as ``profile_generation.py`` does, and saved to ``--prompts`` (read from it
when it exists).

Usage:
    CRAG_STORE_PATH=/tmp/me/chroma .venv/bin/python bench/scripts/batching_vs_transformers.py \
        [--counts 8,16] [--max-new-tokens 48] [--dtypes float32,bfloat16] [--repeats 1] \
        [--prompts prompts.json] [--output figures.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from crag.core.cancellation import CancelToken
from crag.generator.batching import GenerationRequest
from crag.generator.local import LocalChatModel
from crag.generator.smollm2 import ensure_smollm2
from crag.generator.step_decoding import end_token_ids
from crag_bench.sibling_scripts import bench_script

logger = logging.getLogger("batching_vs_transformers")
Tokens = list[list[int]]
Dtype = Literal["float32", "bfloat16"]
LIBRARY_ATTENTIONS = ("sdpa", "paged|eager")
"""The attention implementations transformers' continuous batching takes without flash."""
CANCEL_AFTER = 4
"""Tokens (decoding steps) a row has when the cancellation checks cancel it."""


PROFILE = bench_script("profile_generation")
EARLIER = bench_script("bench_continuous_batching")
"""The long-prompt measurement, whose batched path (``run_ours``) this one times too."""

QUESTIONS = (
    *PROFILE.QUESTIONS,  # profile_generation's six, then ten more
    "Who wrote Anna Karenina?",
    "Who composed The Four Seasons?",
    "In which country is Angkor Wat?",
    "Who wrote the Aeneid?",
    "Who directed Battleship Potemkin?",
    "Which band recorded Bohemian Rhapsody?",
    "Who wrote Adventures of Huckleberry Finn?",
    "Who created The Adventures of Tintin?",
    "Who painted the Arnolfini Portrait?",
    "In which city is the Alhambra?",
    "What does the Bayeux Tapestry depict?",
    "Who wrote Alice's Adventures in Wonderland?",
    "What kind of instrument is the bassoon?",
    "Who wrote the Analects?",
)


def load_average() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


def capture_prompts(count: int) -> list[list[BaseMessage]]:
    """The generate node's messages for the first ``count`` questions that reach the generator.

    Runs crag's graph (``crag.app.api.ask``) with the node's model call wrapped to keep what it
    was sent; a question answered without the generator (abstained) is skipped.

    Raises:
        RuntimeError: Fewer than ``count`` of :data:`QUESTIONS` reached the generator.
    """
    import crag.nodes.generate as generate_node
    from crag.app.api import ask

    sent: list[list[BaseMessage]] = []
    reply = generate_node._reply

    def keeping(model: Any, messages: list[BaseMessage]) -> BaseMessage:
        sent.append(list(messages))
        return reply(model, messages)

    prompts: list[list[BaseMessage]] = []
    generate_node._reply = keeping
    try:
        for question in QUESTIONS:
            sent.clear()
            ask(question)
            prompts.extend(sent[:1])
            logger.info("%s: %d generator call(s)", question, len(sent))
            if len(prompts) == count:
                return prompts
    finally:
        generate_node._reply = reply
    raise RuntimeError(f"only {len(prompts)} of {len(QUESTIONS)} questions reached the generator")


def load_prompts(path: Path | None, count: int) -> list[list[BaseMessage]]:
    """``count`` prompts saved in ``path``, else captured (and saved there)."""
    if path is not None and path.is_file():
        saved = json.loads(path.read_text(encoding="utf-8"))
        kinds = {"system": SystemMessage, "human": HumanMessage}
        if len(saved) >= count:
            return [[kinds[m["type"]](m["content"]) for m in p] for p in saved[:count]]
        logger.warning("%s holds %d prompts, %d asked: capturing", path, len(saved), count)
    prompts = capture_prompts(count)
    if path is not None:
        rows = [[{"type": m.type, "content": m.text} for m in p] for p in prompts]
        path.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return prompts


def load_model(dtype: Dtype, max_new_tokens: int, ngram: int) -> LocalChatModel:
    """The shipped generator as the factory makes it, in ``dtype``."""
    return LocalChatModel(
        model_path=str(ensure_smollm2()),
        max_new_tokens=max_new_tokens,
        no_repeat_ngram_size=ngram,
        dtype=dtype,
    )


def lone_answers(model: LocalChatModel, ids: Tokens, ngram: int) -> tuple[Tokens, list[float]]:
    """Each prompt's lone answer (``invoke``'s path, batching off) and its seconds.

    ``ngram``: the reply n-gram blocker's size for these answers (0: off).
    """
    model.enable_batching(1)
    kept = model.no_repeat_ngram_size
    model.no_repeat_ngram_size = ngram
    outputs: Tokens = []
    seconds: list[float] = []
    try:
        for prompt in ids:
            request = GenerationRequest(input_ids=prompt, max_new_tokens=model.max_new_tokens)
            start = time.perf_counter()
            outputs.append(model._generate_alone(request))
            seconds.append(time.perf_counter() - start)
    finally:
        model.no_repeat_ngram_size = kept
    return outputs, seconds


def generation_config(model: LocalChatModel, max_new_tokens: int, ngram: int = 0) -> Any:
    """Greedy to ``max_new_tokens``, ending at crag's end tokens; ``ngram``: the library's rule."""
    from transformers import GenerationConfig

    ends = sorted(end_token_ids(model._model, model._tokenizer))
    pad = model._tokenizer.pad_token_id or model._tokenizer.eos_token_id
    return GenerationConfig(  # type: ignore[no-untyped-call]
        do_sample=False,
        max_new_tokens=max_new_tokens,
        eos_token_id=ends,
        pad_token_id=pad,
        **({"no_repeat_ngram_size": ngram} if ngram else {}),
    )


def library_config(ids: Tokens, max_new_tokens: int) -> Any:
    """A continuous batching config: every prompt in the batch, a paged cache for them all.

    8,192 tokens a forward pass (the library's default; of 512, 2,048 and 8,192 the fastest
    on this CPU in ``bench_continuous_batching.py``'s measurement); no flash attention to
    switch to on a CPU; no prefix sharing (the prompts share only their instructions).
    """
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    page = 256
    pages_per_request = math.ceil((max(map(len, ids)) + max_new_tokens) / page) + 1
    return ContinuousBatchingConfig(
        page_size=page,
        num_blocks=len(ids) * pages_per_request,
        max_batch_tokens=8192,
        max_requests_per_batch=len(ids),
        auto_switch_to_flash=False,
        allow_block_sharing=False,
    )


class LibraryAttention:
    """Within the block the model runs ``attention``; crag's own is put back after.

    The library refuses crag's ``crag_sdpa`` (it takes ``sdpa``, ``paged|eager`` or flash).
    """

    def __init__(self, model: LocalChatModel, attention: str) -> None:
        self._network = model._model
        self._attention = attention
        self._previous = self._network.config._attn_implementation

    def __enter__(self) -> Any:
        self._network.set_attn_implementation(self._attention)
        return self._network

    def __exit__(self, *exc: object) -> None:
        self._network.set_attn_implementation(self._previous)


def library_batched(
    model: LocalChatModel, ids: Tokens, attention: str, max_new_tokens: int, ngram: int = 0
) -> Tokens:
    """``generate_batch`` on every prompt at once (``ngram``: the library's n-gram rule).

    Raises:
        RuntimeError: A request failed or came back unfinished (the first error is named).
    """
    with LibraryAttention(model, attention) as network:
        results = network.generate_batch(
            ids,
            generation_config=generation_config(model, max_new_tokens, ngram),
            continuous_batching_config=library_config(ids, max_new_tokens),
            warmup=False,
        )
    outputs = list(results.values())
    failed = [o for o in outputs if o.error is not None or not o.is_finished()]
    if len(outputs) != len(ids) or failed:
        first = failed[0].error if failed else "missing results"
        raise RuntimeError(f"{len(outputs)} of {len(ids)} results, {len(failed)} failed: {first}")
    return [list(output.generated_tokens) for output in outputs]


def pick_attention(model: LocalChatModel, ids: Tokens) -> str:
    """The first of :data:`LIBRARY_ATTENTIONS` the library runs (two tokens, one prompt).

    Raises:
        RuntimeError: None ran; the errors are named.
    """
    errors = []
    for attention in LIBRARY_ATTENTIONS:
        try:
            library_batched(model, ids[:1], attention, 2)
        except Exception as exc:  # noqa: BLE001 - reported, the next one is tried
            errors.append(f"{attention}: {type(exc).__name__}: {exc}")
            logger.warning("library attention %s failed: %s", attention, exc)
            continue
        return attention
    raise RuntimeError("; ".join(errors))


def strip_end(tokens: Sequence[int], ends: set[int]) -> list[int]:
    """``tokens`` without a final end token (crag's paths leave it out)."""
    return list(tokens[:-1]) if tokens and tokens[-1] in ends else list(tokens)


def timed(run: Callable[[], Tokens], ends: set[int]) -> tuple[dict[str, float], Tokens]:
    """Wall seconds, generated tokens, tokens/s and the load before and after ``run``."""
    before = load_average()
    start = time.perf_counter()
    outputs = [strip_end(tokens, ends) for tokens in run()]
    seconds = time.perf_counter() - start
    tokens = sum(map(len, outputs))
    figures = {
        "seconds": seconds,
        "tokens": tokens,
        "tokens_per_s": tokens / seconds,
        "load_before": before,
        "load_after": load_average(),
    }
    return figures, outputs


def same(outputs: Tokens, reference: Tokens) -> int:
    """How many outputs equal the reference's, token for token."""
    return sum(a == b for a, b in zip(outputs, reference, strict=True))


def crag_cancel_check(model: LocalChatModel, ids: Tokens, uncancelled: Tokens) -> dict[str, Any]:
    """Rows decoded together by crag's batcher; row 0's token cancelled after four steps.

    Reports the cancelled row's tokens, the seconds from the cancel to its caller's return,
    and how many other rows got their uncancelled answers.
    """
    batcher = model._batcher
    assert batcher is not None
    model.enable_batching(len(ids))
    tokens = [CancelToken() for _ in ids]
    requests = [
        GenerationRequest(input_ids=p, max_new_tokens=model.max_new_tokens, token=t)
        for p, t in zip(ids, tokens, strict=True)
    ]
    returned: dict[int, float] = {}

    def run(index: int) -> list[int]:
        output = batcher.generate(requests[index])
        returned[index] = time.perf_counter()
        return output

    steps = len(batcher.step_sizes)
    try:
        with ThreadPoolExecutor(len(ids)) as pool:
            futures = [pool.submit(run, index) for index in range(len(ids))]
            while len(batcher.step_sizes) < steps + CANCEL_AFTER - 1 and not futures[0].done():
                time.sleep(0.002)
            cancelled_at = time.perf_counter()
            tokens[0].cancel()
            outputs = [future.result() for future in futures]
    finally:
        model.enable_batching(1)
    return {
        "cancelled_row_tokens": len(outputs[0]),
        "cancel_to_return_s": round(returned[0] - cancelled_at, 3),
        "other_rows_unchanged": same(outputs[1:], uncancelled[1:]),
        "other_rows": len(ids) - 1,
    }


def drain_library(manager: Any, cancel_id: str, others: set[str]) -> dict[str, Any]:
    """Results until every other request finished; ``cancel_id`` cancelled at four tokens."""
    finished: dict[str, list[int]] = {}
    streamed_at_cancel = None
    cancelled_at = None
    deadline = time.perf_counter() + 600
    while not others <= finished.keys() and time.perf_counter() < deadline:
        result = manager.get_result(timeout=1)
        if result is None:
            continue
        streamed = len(result.generated_tokens)
        if result.request_id == cancel_id and cancelled_at is None and streamed >= CANCEL_AFTER:
            manager.cancel_request(cancel_id)
            cancelled_at = time.perf_counter()
            streamed_at_cancel = streamed
        if result.is_finished():
            finished[result.request_id] = list(result.generated_tokens)
    late = []
    while (result := manager.get_result(timeout=2)) is not None:  # anything left for row 0
        late.append(result)
    return {
        "finished": finished,
        "streamed_at_cancel": streamed_at_cancel,
        "cancelled_row_finished_result": cancel_id in finished
        or any(r.request_id == cancel_id and r.is_finished() for r in late),
        "cancelled_row_outputs_after_cancel": sum(r.request_id == cancel_id for r in late),
    }


def library_cancel_check(
    model: LocalChatModel, ids: Tokens, attention: str, uncancelled: Tokens, ends: set[int]
) -> dict[str, Any]:
    """One row cancelled through the library's manager, the others decoded on.

    ``init_continuous_batching``, ``add_request``, ``get_result``: row 0 streamed and
    ``cancel_request``-ed once it has four tokens.
    """
    with LibraryAttention(model, attention) as network:
        manager = network.init_continuous_batching(
            generation_config=generation_config(model, model.max_new_tokens),
            continuous_batching_config=library_config(ids, model.max_new_tokens),
        )
        manager.start()
        try:
            cancel_id = manager.add_request(ids[0], streaming=True)
            others = [manager.add_request(prompt) for prompt in ids[1:]]
            drained = drain_library(manager, cancel_id, set(others))
        finally:
            manager.stop(block=True, timeout=30)
            manager.destroy()
    finished = drained.pop("finished")
    outputs = [strip_end(finished.get(rid, []), ends) for rid in others]
    return {
        **drained,
        "other_rows_unchanged": same(outputs, uncancelled[1:]),
        "other_rows": len(ids) - 1,
    }


class KeptWarnings(logging.Handler):
    """Keeps the messages of warnings logged while it is attached."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        """Keep the record's message."""
        self.messages.append(record.getMessage())


def library_ngram_check(model: LocalChatModel, ids: Tokens, attention: str) -> dict[str, Any]:
    """What the library does with ``no_repeat_ngram_size`` 4 (eight tokens).

    Its warnings, and whether the requests ran (then how many outputs equal those without it).
    """
    kept = KeptWarnings()
    library_logger = logging.getLogger("ContinuousBatchingLogger")
    library_logger.addHandler(kept)
    try:
        outputs = library_batched(model, ids, attention, 8, ngram=4)
        plain = library_batched(model, ids, attention, 8)
        outcome = f"ran: {same(outputs, plain)} of {len(ids)} outputs equal to those without it"
    except Exception as exc:  # noqa: BLE001 - the outcome is what is reported
        outcome = f"failed: {type(exc).__name__}: {exc}"
    finally:
        library_logger.removeHandler(kept)
    return {"outcome": outcome, "library_warnings": sorted(set(kept.messages))[:5]}


def compare(
    model: LocalChatModel,
    prompts: list[list[BaseMessage]],
    ids: Tokens,
    attention: str,
    references: dict[str, Tokens],
    library_first: bool = False,
) -> dict[str, dict[str, float]]:
    """The batched path of crag and the library's on ``prompts`` at once; figures per engine.

    ``library_first``: the library's run goes first (rounds alternate the order).
    """
    ends = end_token_ids(model._model, model._tokenizer)
    count = len(prompts)
    runs: dict[str, Callable[[], Tokens]] = {
        "crag": lambda: EARLIER.run_ours(model, prompts, ids, len(prompts)),
        "transformers": lambda: library_batched(model, ids, attention, model.max_new_tokens),
    }
    order = ["transformers", "crag"] if library_first else ["crag", "transformers"]
    figures: dict[str, dict[str, float]] = {}
    for name in order:
        run = runs[name]
        figures[name], outputs = timed(run, ends)
        for label, reference in references.items():
            figures[name][f"same_as_{label}"] = same(outputs, reference[:count])
        logger.info("%d prompts, %s: %s", count, name, figures[name])
    return figures


def lone_figures(seconds: list[float], outputs: Tokens, load: float) -> dict[str, float]:
    """The lone reference's figures for the first ``len(seconds)`` prompts."""
    tokens = sum(map(len, outputs))
    total = sum(seconds)
    return {"seconds": total, "tokens": tokens, "tokens_per_s": tokens / total, "load": load}


def references_for(
    model: LocalChatModel, ids: Tokens, ngram: int
) -> tuple[dict[str, Tokens], list[float], float]:
    """Lone answers (float32) with the blocker on and off, the former's seconds, the load."""
    load = load_average()
    with_blocker, seconds = lone_answers(model, ids, ngram)
    without, _ = lone_answers(model, ids, 0)
    return {"lone": with_blocker, "lone_no_blocker": without}, seconds, load


def run_dtype(
    dtype: Dtype, args: argparse.Namespace, prompts: list[list[BaseMessage]], state: dict[str, Any]
) -> dict[str, Any]:
    """Every count's comparison in ``dtype`` (the float32 pass also makes the references)."""
    model = load_model(dtype, args.max_new_tokens, args.ngram)
    ids = [model._encode(p, args.max_new_tokens)["input_ids"][0].tolist() for p in prompts]
    if "references" not in state:
        if dtype != "float32":
            raise ValueError("the first dtype must be float32: it makes the lone references")
        state["references"], seconds, load = references_for(model, ids, args.ngram)
        state["lone"] = {
            str(n): lone_figures(seconds[:n], state["references"]["lone"][:n], load)
            for n in args.counts
        }
        state["attention"] = pick_attention(model, ids)
        state["prompt_tokens"] = [len(prompt) for prompt in ids]
    rounds: dict[str, list[dict[str, dict[str, float]]]] = {str(n): [] for n in args.counts}
    for number in range(args.repeats):
        for count in args.counts:
            rounds[str(count)].append(
                compare(
                    model,
                    prompts[:count],
                    ids[:count],
                    state["attention"],
                    state["references"],
                    library_first=number % 2 == 1,
                )
            )
    state.setdefault("rounds", {})[dtype] = rounds
    if dtype == "float32" and args.checks:
        state["checks"] = checks(model, ids, state["attention"], state["references"])
    return {count: medians(by_round) for count, by_round in rounds.items()}


def medians(rounds: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Every engine's figures, the median over ``rounds``."""
    return {
        name: {key: statistics.median(r[name][key] for r in rounds) for key in rounds[0][name]}
        for name in rounds[0]
    }


def checks(
    model: LocalChatModel, ids: Tokens, attention: str, references: dict[str, Tokens]
) -> dict[str, Any]:
    """The n-gram blocker and cancellation checks, on the four shortest prompts."""
    ends = end_token_ids(model._model, model._tokenizer)
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))[:4]
    short = [ids[i] for i in order]
    library_plain = [
        strip_end(t, ends) for t in library_batched(model, short, attention, model.max_new_tokens)
    ]
    crag_uncancelled = [references["lone"][i] for i in order]
    return {
        "library_no_repeat_ngram_size_4": library_ngram_check(model, short, attention),
        "crag_cancel": crag_cancel_check(model, short, crag_uncancelled),
        "library_cancel": library_cancel_check(model, short, attention, library_plain, ends),
    }


def print_table(figures: dict[str, Any]) -> None:
    """One line per count and engine."""
    lengths = sorted(figures["prompt_tokens"])
    print(
        f"{len(lengths)} prompts of {lengths[0]}-{lengths[-1]} tokens "
        f"(median {statistics.median(lengths):.0f}); library attention {figures['attention']}"
    )
    for count, lone in figures["lone"].items():
        print(
            f"{count} prompts, lone (float32, one after the other): {lone['seconds']:.1f} s, "
            f"{lone['tokens_per_s']:.1f} tok/s (load {lone['load']:.2f})"
        )
        for dtype, by_count in figures["dtypes"].items():
            for engine, f in by_count[count].items():
                print(
                    f"{count} prompts, {engine} {dtype}: {f['seconds']:.1f} s, "
                    f"{f['tokens_per_s']:.1f} tok/s, {f['tokens']:.0f} tokens, "
                    f"{f['same_as_lone']:.0f}/{count} equal to lone, "
                    f"{f['same_as_lone_no_blocker']:.0f}/{count} to lone without blocker "
                    f"(load {f['load_before']:.2f} -> {f['load_after']:.2f})"
                )
    print_rounds(figures["rounds"])
    for name, outcome in figures.get("checks", {}).items():
        print(f"check {name}: {outcome}")


def print_rounds(rounds: dict[str, dict[str, list[dict[str, dict[str, float]]]]]) -> None:
    """Each round's seconds and the ratio crag / transformers (below 1: crag is faster)."""
    for dtype, by_count in rounds.items():
        for count, by_round in by_count.items():
            cells = [
                f"{r['crag']['seconds']:.1f} / {r['transformers']['seconds']:.1f} s "
                f"({r['crag']['seconds'] / r['transformers']['seconds']:.2f})"
                for r in by_round
            ]
            print(f"{count} prompts {dtype}, crag / transformers per round: " + "; ".join(cells))


def parse_args() -> argparse.Namespace:
    """The command line."""
    from crag.settings.deployment import deployment_with

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--counts", default="8,16", help="prompts submitted at once, per run")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--dtypes", default="float32,bfloat16", help="float32 first")
    parser.add_argument("--repeats", type=int, default=1, help="rounds (medians printed)")
    parser.add_argument("--no-checks", dest="checks", action="store_false")
    parser.add_argument("--prompts", type=Path, help="saved prompts (written if absent)")
    parser.add_argument("--output", type=Path, help="write the figures as JSON")
    args = parser.parse_args()
    args.counts = [int(n) for n in args.counts.split(",")]
    args.dtypes = args.dtypes.split(",")
    args.ngram = deployment_with().no_repeat_ngram_size
    return args


def main() -> None:
    """Capture or read the prompts, run every dtype and count, print and save the figures."""
    import torch
    import transformers

    args = parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("ContinuousBatchingLogger").setLevel(logging.WARNING)
    prompts = load_prompts(args.prompts, max(args.counts))
    state: dict[str, Any] = {}
    dtypes = {dtype: run_dtype(dtype, args, prompts, state) for dtype in args.dtypes}
    figures = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "transformers": transformers.__version__,
        "torch_threads": torch.get_num_threads(),
        "no_repeat_ngram_size": args.ngram,
        "max_new_tokens": args.max_new_tokens,
        "attention": state["attention"],
        "prompt_tokens": state["prompt_tokens"],
        "lone": state["lone"],
        "dtypes": dtypes,
        "checks": state.get("checks", {}),
        "rounds": state["rounds"],
    }
    print_table(figures)
    if args.output is not None:
        args.output.write_text(json.dumps(figures, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
