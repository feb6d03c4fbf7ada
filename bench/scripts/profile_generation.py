"""Where a lone SmolLM2 reply's time goes, and what each way of decoding it costs.

Captures the generate node's prompts for a few questions by running crag's graph in-process on
the store ``CRAG_STORE_PATH`` names (the bundled corpus, written on first use), loads the
generator as crag does (``crag.generator.factory.load_chat_model``), then on the first
question's prompt times, in rounds that alternate the variants (medians printed):

- prefill and per-token decoding in a plain loop over the model: bfloat16 and float32, torch's
  threads (2 on a 2-core machine) and one thread;
- crag's lone path (``invoke``: ``generate`` with the reply n-gram blocker), as ``crag ask``
  and the warm server run it: with the thread choice (:mod:`crag.generator.thread_choice`, off
  by default), on torch's threads, on one thread; the streaming path; ``generate`` without the
  blocker; plain ``model.generate(do_sample=False)``; the step decoder (batching's, one row);
- with ``--profile``, ``torch.profiler``'s top operators over ten decoding steps, per count;
- with ``--compile``, ``torch.compile`` of the model (bfloat16), if it compiles.

``--warm-answers N`` instead times whole warm answers in-process (``crag.app.api.ask``), the
thread choice on and off alternated, N rounds of the questions.

Then it checks that every question's greedy tokens are the same with the thread choice, on
torch's threads and on one thread. ``--busy`` keeps one core busy meanwhile (a spinning
process), as on a shared machine. Prints the load average beside the figures; ``--output``
writes them as JSON.

Usage:
    CRAG_STORE_PATH=/tmp/me/chroma .venv/bin/python bench/scripts/profile_generation.py \
        [--repeats 3] [--busy] [--profile] [--compile] [--prompts prompts.json] [--output f.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

logger = logging.getLogger("profile_generation")

QUESTIONS = (
    "Who painted the Mona Lisa?",
    "Who wrote the novel Pride and Prejudice?",
    "What is the capital of Australia?",
    "Who developed the theory of general relativity?",
    "What is the largest planet in the Solar System?",
    "In which year did the Berlin Wall fall?",
)


def generate_node_prompts(questions: tuple[str, ...]) -> list[list[BaseMessage]]:
    """The generate node's messages, in order, for those of ``questions`` that reach it.

    Runs crag's graph (``crag.app.api.ask``) with the node's model call wrapped to keep what it
    was sent; a question answered without the generator (abstained) adds nothing.
    """
    import crag.nodes.generate as generate_node
    from crag.app.api import ask

    sent: list[list[BaseMessage]] = []
    reply = generate_node._reply

    def keeping(model: Any, messages: list[BaseMessage]) -> BaseMessage:
        sent.append(list(messages))
        return reply(model, messages)

    generate_node._reply = keeping
    try:
        for question in questions:
            ask(question)
    finally:
        generate_node._reply = reply
    return sent


def capture_prompts(questions: tuple[str, ...]) -> tuple[list[list[BaseMessage]], float]:
    """The generate node's messages for each question, and a warm in-process answer's seconds.

    The first question is asked again at the end, warm, and timed.
    """
    from crag.app.api import ask

    sent = generate_node_prompts(questions)
    start = time.perf_counter()
    ask(questions[0])
    warm = time.perf_counter() - start
    if len(sent) != len(questions):
        raise RuntimeError("some question was answered without the generator (abstained?)")
    return sent, warm


def warm_answers(rounds: int) -> dict[str, float]:
    """Median seconds of a warm in-process answer (the whole graph), thread choice on and off.

    Every question once per round, the two settings alternated question by question; the
    generator is the graph's own instance (the factory's cache).
    """
    from crag.app.api import ask
    from crag.generator.factory import load_chat_model
    from crag.settings.deployment import deployment_with

    settings = deployment_with()
    model: Any = load_chat_model(
        settings.generator, 128, settings.no_repeat_ngram_size, dtype=settings.generator_dtype
    )
    ask(QUESTIONS[0])  # warm: the store, the evaluator, the generator loaded
    seconds: dict[bool, list[float]] = {True: [], False: []}
    chosen_before = model.choose_threads
    for _ in range(rounds):
        for question in QUESTIONS:
            for choose in (True, False):
                model.choose_threads = choose
                start = time.perf_counter()
                ask(question)
                seconds[choose].append(time.perf_counter() - start)
    model.choose_threads = chosen_before
    return {
        "thread choice on": statistics.median(seconds[True]),
        "off (torch's threads)": statistics.median(seconds[False]),
    }


def read_prompts(path: Path) -> list[list[BaseMessage]]:
    """The prompts :func:`write_prompts` saved in ``path``."""
    saved = json.loads(path.read_text(encoding="utf-8"))
    kinds = {"system": SystemMessage, "human": HumanMessage}
    return [[kinds[m["type"]](m["content"]) for m in p] for p in saved]


def write_prompts(path: Path, prompts: list[list[BaseMessage]]) -> None:
    """Save ``prompts`` in ``path`` (JSON: each message's type and text)."""
    rows = [[{"type": m.type, "content": m.text} for m in p] for p in prompts]
    path.write_text(json.dumps(rows, indent=1), encoding="utf-8")


def load_prompts(path: Path | None) -> tuple[list[list[BaseMessage]], float | None]:
    """The prompts saved in ``path`` (no warm time), else captured (and saved there)."""
    if path is not None and path.is_file():
        return read_prompts(path), None
    prompts, warm = capture_prompts(QUESTIONS)
    if path is not None:
        write_prompts(path, prompts)
    return prompts, warm


@contextmanager
def threads(count: int) -> Iterator[None]:
    """Torch on ``count`` threads within the block."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def plain_loop(model: Any, ids: Any, steps: int) -> dict[str, float]:
    """Prefill ms and median per-token decoding ms of a bare greedy loop over ``model``."""
    import torch
    from transformers import DynamicCache

    with torch.inference_mode():
        cache = DynamicCache(config=model.config)
        start = time.perf_counter()
        out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        token = out.logits[0, -1].argmax()
        prefill = time.perf_counter() - start
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            out = model(input_ids=token.view(1, 1), past_key_values=cache, use_cache=True)
            token = out.logits[0, -1].argmax()
            times.append(time.perf_counter() - start)
    return {"prefill_ms": prefill * 1000, "decode_ms": statistics.median(times) * 1000}


def timed_tokens(run: Callable[[], list[int]]) -> dict[str, float]:
    """Seconds and tokens of one reply ``run`` returns, and ms per token (prefill included)."""
    start = time.perf_counter()
    tokens = run()
    seconds = time.perf_counter() - start
    return {"s": seconds, "tokens": len(tokens), "ms_per_token": seconds * 1000 / len(tokens)}


def lone_reply(model: Any, messages: list[BaseMessage]) -> list[int]:
    """The token ids of crag's lone path (what ``invoke`` decodes, batching off)."""
    from crag.generator.batching import GenerationRequest

    ids = model._encode(messages, model.max_new_tokens)["input_ids"][0].tolist()
    request = GenerationRequest(input_ids=ids, max_new_tokens=model.max_new_tokens)
    return list(model._generate_alone(request))


def streamed_text(model: Any, messages: list[BaseMessage]) -> str:
    """The reply of crag's streaming path (``stream``: what ``crag ask`` prints)."""
    return "".join(chunk.text for chunk in model.stream(messages))


def streamed_reply(model: Any, messages: list[BaseMessage]) -> list[int]:
    """The streamed reply, tokenized again (for its length)."""
    return list(model.get_token_ids(streamed_text(model, messages)))


def generate_reply(model: Any, ids: Any, max_new_tokens: int, blocker: bool) -> list[int]:
    """``generate`` with crag's arguments (``blocker``: the n-gram blocker) or plain greedy."""
    import torch

    inner = model._model
    if blocker:
        kwargs = model._generation_kwargs(None, ids.shape[1], max_new_tokens=max_new_tokens)
    else:
        kwargs = {"max_new_tokens": max_new_tokens, "do_sample": False}
    with torch.inference_mode():
        out = inner.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **kwargs)
    return list(out[0, ids.shape[1] :].tolist())


def step_decoder_reply(model: Any, ids: Any, max_new_tokens: int) -> list[int]:
    """The step decoder (batching's) decoding the prompt as its only row."""
    from crag.generator.batching import GenerationRequest
    from crag.generator.step_decoding import StepDecoder

    decoder = StepDecoder(
        model._model, model._tokenizer, no_repeat_ngram_size=model.no_repeat_ngram_size
    )
    request = GenerationRequest(input_ids=ids[0].tolist(), max_new_tokens=max_new_tokens)
    decoder.admit(request)
    finished = decoder.take_finished()
    while not finished:
        decoder.step()
        finished = decoder.take_finished()
    return list(request.output or [])


def variants(bf16: Any, fp32: Any, messages: list[BaseMessage]) -> dict[str, Callable[[], Any]]:
    """Every variant timed on one prompt, by name."""
    import torch

    cpus = torch.get_num_threads()
    ids = bf16._encode(messages, bf16.max_new_tokens)["input_ids"]
    cap = bf16.max_new_tokens
    table: dict[str, Callable[[], Any]] = {}
    for name, model in (("bf16", bf16), ("fp32", fp32)):
        for count in (cpus, 1):
            table[f"loop {name} {count}t"] = _on(
                count, lambda m=model: plain_loop(m._model, ids, 16)
            )
    for count in (cpus, 1):
        table[f"invoke {count}t"] = _fixed(bf16, count, lambda: lone_reply(bf16, messages))
        table[f"stream {count}t"] = _fixed(bf16, count, lambda: streamed_reply(bf16, messages))
    table["invoke chosen"] = lambda: timed_tokens(lambda: lone_reply(bf16, messages))
    table["stream chosen"] = lambda: timed_tokens(lambda: streamed_reply(bf16, messages))
    for count in (cpus, 1):
        table[f"generate blocker {count}t"] = _on(
            count, lambda: timed_tokens(lambda: generate_reply(bf16, ids, cap, True))
        )
        table[f"generate plain {count}t"] = _on(
            count, lambda: timed_tokens(lambda: generate_reply(bf16, ids, cap, False))
        )
        table[f"step decoder {count}t"] = _on(
            count, lambda: timed_tokens(lambda: step_decoder_reply(bf16, ids, cap))
        )
    return table


def _on(count: int, run: Callable[[], Any]) -> Callable[[], Any]:
    def on_count() -> Any:
        with threads(count):
            return run()

    return on_count


def _fixed(model: Any, count: int, run: Callable[[], list[int]]) -> Callable[[], Any]:
    """``run`` timed with the model's thread choice off, torch on ``count`` threads."""

    def fixed() -> Any:
        with fixed_threads(model, count):
            return timed_tokens(run)

    return fixed


@contextmanager
def fixed_threads(model: Any, count: int) -> Iterator[None]:
    """Within the block the model's thread choice is off and torch runs ``count`` threads."""
    chosen_before = model.choose_threads
    model.choose_threads = False
    try:
        with threads(count):
            yield
    finally:
        model.choose_threads = chosen_before


def measure(table: dict[str, Callable[[], Any]], repeats: int) -> dict[str, dict[str, float]]:
    """Run every variant once per round, ``repeats`` rounds; the median of each figure."""
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in table}
    for number in range(repeats):
        for name, run in table.items():
            rounds[name].append(run())
        logger.info("round %d done (load %s)", number + 1, load())
    return {
        name: {key: statistics.median(r[key] for r in results) for key in results[0]}
        for name, results in rounds.items()
    }


def profile_steps(model: Any, ids: Any, count: int, rows: int = 12) -> str:
    """torch.profiler's top operators (self CPU) over ten decoding steps on ``count`` threads."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    from transformers import DynamicCache

    with threads(count), torch.inference_mode():
        cache = DynamicCache(config=model.config)
        token = model(input_ids=ids, past_key_values=cache, logits_to_keep=1).logits[0, -1]
        token = token.argmax()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            start = time.perf_counter()
            for _ in range(10):
                out = model(input_ids=token.view(1, 1), past_key_values=cache, use_cache=True)
                token = out.logits[0, -1].argmax()
            wall = (time.perf_counter() - start) * 100
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)
    return f"{count} thread(s): {wall:.1f} ms a step under the profiler\n{table}"


def compiled_loop(model: Any, ids: Any) -> dict[str, float]:
    """The plain loop over ``torch.compile(model)``: compile seconds, then its figures."""
    import torch

    compiled = torch.compile(model, dynamic=True)
    start = time.perf_counter()
    plain_loop(compiled, ids, 2)
    compile_s = time.perf_counter() - start
    return {"compile_s": compile_s, **plain_loop(compiled, ids, 16)}


def identity(model: Any, prompts: list[list[BaseMessage]]) -> list[dict[str, Any]]:
    """Each prompt's tokens with the thread choice, on torch's threads and on one thread."""
    import torch

    cpus = torch.get_num_threads()
    rows = []
    for messages in prompts:
        chosen = (lone_reply(model, messages), streamed_text(model, messages))
        fixed = []
        for count in (cpus, 1):
            with fixed_threads(model, count):
                fixed.append((lone_reply(model, messages), streamed_text(model, messages)))
        same = all(run == chosen for run in fixed)
        rows.append({"tokens": chosen[0], "text": chosen[1], "same": same})
    return rows


def load() -> str:
    """The load averages, as ``uptime`` prints them."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


@contextmanager
def busy_core(on: bool) -> Iterator[None]:
    """With ``on``, one process spinning on a core for the duration of the block."""
    if not on:
        yield
        return
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(1.0)
        yield
    finally:
        spinner.kill()
        spinner.wait()


def main(argv: list[str] | None = None) -> int:
    """Capture the prompts, time the variants, check the tokens; print (and write) it all."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from crag.generator.factory import load_chat_model

    if args.warm_answers:
        with busy_core(args.busy):
            before = load()
            figures = warm_answers(args.warm_answers)
        print(f"warm in-process answers, load {before} -> {load()}: {json.dumps(figures)}")
        return 0

    prompts, warm = load_prompts(args.prompts)
    bf16 = load_chat_model("smollm2", args.max_new_tokens, dtype="bfloat16")
    fp32 = load_chat_model("smollm2", args.max_new_tokens, dtype="float32")
    ids = bf16._encode(prompts[0], args.max_new_tokens)["input_ids"]  # type: ignore[attr-defined]
    report: dict[str, Any] = {"prompt_tokens": int(ids.shape[1]), "warm_ask_s": warm}
    with busy_core(args.busy):
        report["load_before"] = load()
        report["variants"] = measure(variants(bf16, fp32, prompts[0]), args.repeats)
        if args.compile:
            report["compiled"] = compiled_loop(bf16._model, ids)  # type: ignore[attr-defined]
        report["identity"] = identity(bf16, prompts)
        report["load_after"] = load()
        if args.profile:
            report["profiles"] = [profile_steps(bf16._model, ids, n) for n in (2, 1)]  # type: ignore[attr-defined]
    print_report(report)
    if args.output is not None:
        args.output.write_text(json.dumps(report, indent=1), encoding="utf-8")
    return 0


def print_report(report: dict[str, Any]) -> None:
    """The figures as lines of text."""
    lines = [
        f"prompt: {report['prompt_tokens']} tokens; load {report['load_before']} -> "
        f"{report['load_after']}; warm in-process ask: {report['warm_ask_s']}"
    ]
    for name, figures in report["variants"].items():
        lines.append(f"  {name:24s} " + "  ".join(f"{k} {v:.1f}" for k, v in figures.items()))
    if "compiled" in report:
        lines.append("  compiled loop bf16: " + json.dumps(report["compiled"]))
    same = sum(row["same"] for row in report["identity"])
    lines.append(f"tokens identical across thread counts: {same} of {len(report['identity'])}")
    lines.extend(report.get("profiles", []))
    print("\n".join(lines))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeats", type=int, default=3, help="rounds of every variant")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--busy", action="store_true", help="keep one core busy meanwhile")
    parser.add_argument("--profile", action="store_true", help="torch.profiler tables")
    parser.add_argument("--compile", action="store_true", help="also torch.compile")
    parser.add_argument(
        "--warm-answers",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="only time warm in-process answers (thread choice on and off), ROUNDS rounds",
    )
    parser.add_argument("--prompts", type=Path, help="prompts JSON: read if there, else written")
    parser.add_argument("--output", type=Path, help="write the figures as JSON here")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
