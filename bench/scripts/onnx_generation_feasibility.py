"""Feasibility of onnxruntime for crag's SmolLM2-135M decoding, against transformers (issue 55).

A measurement, not product code. It

1. exports SmolLM2-135M-Instruct (the shipped model, as ``crag.generator.smollm2`` converts
   it) to ONNX in float32 with ``torch.onnx.export(dynamo=True)``: one graph of a step with a
   KV cache (``input_ids`` and ``position_ids`` of a dynamic length and ``past_key_i`` /
   ``past_value_i`` of a dynamic past length in; the last position's ``logits`` and
   ``present_*`` out), which reads a prompt (past of length 0) and decodes a token (the past
   so far); then quantizes it with onnxruntime's ``quantize_dynamic`` (``--int8``: ``int8``
   per tensor, ``int8-channel`` per channel, ``int8-layers`` the layers' weights only) and,
   with ``--fuse``, applies onnxscript's ORT fusions (``optimize_for_ort``). The models go
   under ``--workdir`` (``/tmp/onnx_feas``) and are reused from there (``--reexport``: again);
2. takes crag's real generate-node prompts for six questions (``capture_prompts`` of
   ``bench/scripts/profile_generation.py`` runs crag's graph in-process on the store
   ``CRAG_STORE_PATH`` names, a fresh temporary folder when unset), saved to
   ``WORKDIR/prompts.json`` and read from there on later runs;
3. greedy-decodes every prompt, in rounds that interleave the variants, by crag's rules (the
   reply n-gram blocker of :mod:`crag.generator.repetition`, crag's end tokens, 128 tokens at
   most): crag's own path (``LocalChatModel`` as crag loads it: ``generate``, the thread
   choice, bfloat16 on a CPU with AVX512-BF16), a plain torch loop over the float32 model on
   2 and 1 threads, and onnxruntime (CPUExecutionProvider, all graph optimizations, 1 and 2
   intra-op threads) over each ONNX model. Every forward pass is time-stamped: prefill is the
   first, decoding the median gap between the later ones;
4. prints medians (prefill s, ms per decoded token, whole reply s), the export, quantization
   and session-creation seconds, the files' sizes, the load average around every round, how
   many replies have the tokens of torch float32's and of crag bfloat16's, and how many
   contain the right answer (a case-blind substring test: read the texts printed below it).

Usage (from the repository root; about 2 minutes of export the first time):
    .venv/bin/python -m pip install onnx onnxscript onnxruntime
    .venv/bin/python bench/scripts/onnx_generation_feasibility.py --smoke   # tiny, no graph
    .venv/bin/python bench/scripts/onnx_generation_feasibility.py --rounds 2 \
        --int8 int8,int8-channel [--fuse] [--only "crag,fp32 loop 2t,ORT"] \
        [--output /tmp/onnx_feas/figures.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from crag_bench.sibling_scripts import bench_script

logger = logging.getLogger("onnx_generation_feasibility")

ANSWERS = ("Leonardo da Vinci", "Jane Austen", "Canberra", "Albert Einstein", "Jupiter", "1989")
"""The right answer of each of profile_generation's six questions, in order."""

Step = Callable[[list[int]], Any]
"""Runs the model over new tokens (its cache kept inside) and returns the last logits."""


def load() -> str:
    """The 1-, 5- and 15-minute load averages, as ``uptime`` prints them."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def kv_step_module(model: Any) -> Any:
    """``model`` as a module of flat tensors: (ids, positions, *past) -> (logits, *present)."""
    import torch
    from transformers import DynamicCache

    layers = model.config.num_hidden_layers

    class KVStep(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, position_ids: Any, *past: Any) -> tuple[Any, ...]:
            cache = DynamicCache(config=model.config)
            for index in range(layers):
                cache.update(past[2 * index], past[2 * index + 1], index)
            out = self.model(
                input_ids=input_ids,
                position_ids=position_ids,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
            present = [
                t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)
            ]
            return (out.logits[:, -1, :], *present)

    return KVStep().eval()


def past_names(layers: int, prefix: str) -> list[str]:
    """``prefix_key_0, prefix_value_0, prefix_key_1, ...``: the cache's tensor names."""
    return [f"{prefix}_{kind}_{index}" for index in range(layers) for kind in ("key", "value")]


def export_onnx(model_dir: Path, target: Path) -> dict[str, Any]:
    """Export the float32 model's KV step to ``target``; seconds, size and a check of it."""
    import torch
    from transformers import AutoModelForCausalLM

    model: Any = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    config = model.config
    layers, heads = config.num_hidden_layers, config.num_key_value_heads
    step = kv_step_module(model)
    shape = (1, heads, 5, config.head_dim)
    past = tuple(torch.randn(shape) for _ in range(2 * layers))
    ids = torch.tensor([[5, 6, 7]])
    positions = torch.tensor([[5, 6, 7]])
    dynamic = torch.export.Dim.DYNAMIC
    start = time.perf_counter()
    torch.onnx.export(
        step,
        (ids, positions, *past),
        str(target),
        dynamo=True,
        dynamic_shapes=({1: dynamic}, {1: dynamic}, tuple({2: dynamic} for _ in past)),
        input_names=["input_ids", "position_ids", *past_names(layers, "past")],
        output_names=["logits", *past_names(layers, "present")],
        external_data=False,
    )
    seconds = time.perf_counter() - start
    return {"export_s": seconds, "load": load(), "check": check_export(step, target, config)}


def check_export(step: Any, path: Path, config: Any) -> dict[str, float]:
    """Largest |logit| difference, ORT against torch: a prompt of 40 (no past), one more."""
    import numpy as np
    import onnxruntime as ort
    import torch

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()][2:]
    shape = (1, config.num_key_value_heads, 0, config.head_dim)

    def compare(tokens: Any, start: int, past: tuple[Any, ...]) -> tuple[float, list[Any]]:
        positions = torch.arange(start, start + tokens.shape[1])[None]
        feeds = {"input_ids": tokens.numpy(), "position_ids": positions.numpy()}
        feeds.update({n: p.numpy() for n, p in zip(names, past, strict=True)})
        outputs = session.run(None, feeds)
        with torch.inference_mode():
            reference = step(tokens, positions, *past)[0].numpy()
        return float(np.abs(outputs[0] - reference).max()), outputs[1:]

    ids = torch.randint(100, config.vocab_size, (1, 40))
    prefill, cache = compare(ids, 0, tuple(torch.zeros(shape) for _ in names))
    one, _ = compare(ids[:, :1], 40, tuple(torch.from_numpy(a) for a in cache))
    return {"prefill_max_abs_diff": prefill, "step_max_abs_diff": one}


def fold_transposed_weights(source: Path, target: Path) -> int:
    """``source`` with every MatMul weight given as Transpose(initializer) stored transposed.

    The exporter leaves the tied output projection as ``MatMul(x, Transpose(embedding))``
    (too large for its constant folding), and ``quantize_dynamic`` skips a MatMul whose weight
    is not a constant: folded, the projection (a fifth of the weights) is quantized too.
    """
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(source))
    graph = model.graph
    weights = {i.name: i for i in graph.initializer}
    producers = {out: node for node in graph.node for out in node.output}
    folded = 0
    for node in graph.node:
        transpose = producers.get(node.input[1]) if node.op_type == "MatMul" else None
        if transpose is None or transpose.op_type != "Transpose":
            continue
        if transpose.input[0] not in weights:
            continue
        perm = [list(a.ints) for a in transpose.attribute if a.name == "perm"]
        data = numpy_helper.to_array(weights[transpose.input[0]])
        array = np.ascontiguousarray(np.transpose(data, perm[0] if perm else None))
        name = f"{transpose.input[0]}_transposed_{folded}"
        graph.initializer.append(numpy_helper.from_array(array, name))
        node.input[1] = name
        folded += 1
    onnx.save(model, str(target))
    return folded


INT8_MODES = {
    "int8": "weights int8 per tensor, the output projection and embedding included",
    "int8-channel": "the same, scales per output channel",
    "int8-layers": "the layers' MatMul weights only, per channel (embedding, projection fp32)",
}


def quantize_int8(source: Path, target: Path, mode: str) -> dict[str, Any]:
    """Dynamic int8 quantization (onnxruntime's) of ``source`` in ``mode`` (INT8_MODES)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    start = time.perf_counter()
    folded, model = 0, source
    if mode != "int8-layers":
        model = target.with_name(target.stem + "_folded_fp32.onnx")
        folded = fold_transposed_weights(source, model)
    quantize_dynamic(
        str(model),
        str(target),
        weight_type=QuantType.QInt8,
        per_channel=mode != "int8",
        op_types_to_quantize=["MatMul"] if mode == "int8-layers" else None,
    )
    if model != source:
        model.unlink()
    seconds = time.perf_counter() - start
    return {"quantize_s": seconds, "folded": folded, "mode": INT8_MODES[mode], "load": load()}


def fuse_for_ort(source: Path, target: Path) -> dict[str, Any]:
    """The ORT fusions of onnxscript (``optimize_for_ort``) over ``source``; what fused."""
    import onnx_ir as ir
    from onnxscript.rewriter.ort_fusions import optimize_for_ort

    start = time.perf_counter()
    model = ir.load(str(source))
    model, counts = optimize_for_ort(model)
    ir.save(model, str(target))
    fused = {name: count for name, count in counts.items() if count}
    return {"fuse_s": time.perf_counter() - start, "fused": fused, "load": load()}


def build_models(args: argparse.Namespace, model_dir: Path) -> dict[str, Any]:
    """The ONNX files (made when missing or with ``--reexport``) and how they were made."""
    work: Path = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    files = {"fp32": work / "smollm2_kv_fp32.onnx"}
    made: dict[str, Any] = {}
    if args.reexport or not files["fp32"].is_file():
        made["fp32"] = export_onnx(model_dir, files["fp32"])
        logger.info("exported: %s", made["fp32"])
    for mode in args.int8:
        files[mode] = work / f"smollm2_kv_{mode.replace('-', '_')}.onnx"
        if args.reexport or not files[mode].is_file():
            made[mode] = quantize_int8(files["fp32"], files[mode], mode)
    if args.fuse:
        files["fused"] = work / "smollm2_kv_fp32_fused.onnx"
        if args.reexport or not files["fused"].is_file():
            made["fused"] = fuse_for_ort(files["fp32"], files["fused"])
    sizes = {name: round(path.stat().st_size / 1e6, 1) for name, path in files.items()}
    return {"files": {k: str(v) for k, v in files.items()}, "made": made, "size_mb": sizes}


class OrtStep:
    """An onnxruntime session of the KV step, and the cache of the reply it is decoding."""

    def __init__(self, path: str, threads: int) -> None:
        """Create the session (all graph optimizations, ``threads`` intra-op threads)."""
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        start = time.perf_counter()
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.load_s = time.perf_counter() - start
        self.names = [i.name for i in self.session.get_inputs()][2:]
        self.past: list[Any] = []
        self.length = 0

    def reset(self) -> Step:
        """Forget the cache; the step function for a new reply."""
        import numpy as np

        heads, dim = 3, 64  # SmolLM2-135M: 3 key/value heads of 64
        self.past = [np.zeros((1, heads, 0, dim), np.float32) for _ in self.names]
        self.length = 0
        return self.step

    def step(self, tokens: list[int]) -> Any:
        """Feed ``tokens`` after the cache; the last position's logits."""
        import numpy as np

        positions = np.arange(self.length, self.length + len(tokens), dtype=np.int64)[None]
        feeds = {"input_ids": np.array([tokens], np.int64), "position_ids": positions}
        feeds.update(zip(self.names, self.past, strict=True))
        logits, *self.past = self.session.run(None, feeds)
        self.length += len(tokens)
        return logits[0]


def torch_step(model: Any, threads: int) -> Callable[[], Step]:
    """A factory of step functions over the HF ``model`` (a fresh DynamicCache per reply)."""
    import torch
    from transformers import DynamicCache

    def reset() -> Step:
        cache = DynamicCache(config=model.config)

        def step(tokens: list[int]) -> Any:
            before = torch.get_num_threads()
            torch.set_num_threads(threads)
            try:
                with torch.inference_mode():
                    ids = torch.tensor([tokens])
                    out = model(
                        input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1
                    )
                    return out.logits[0, -1].float().numpy()
            finally:
                torch.set_num_threads(before)

        return step

    return reset


def greedy(step: Step, prompt: list[int], ends: set[int], max_new: int) -> dict[str, Any]:
    """Greedy decoding by crag's rules (n-gram blocker, end tokens, max_new) by ``step``, timed."""
    import numpy as np

    from crag.generator.repetition import DEFAULT_NGRAM, banned_tokens

    start = time.perf_counter()
    logits = step(prompt)
    stamps = [time.perf_counter()]
    tokens: list[int] = []
    while True:
        banned = banned_tokens(tokens, DEFAULT_NGRAM)
        if banned:
            logits = np.array(logits, copy=True)
            logits[sorted(banned)] = -np.inf
        token = int(np.argmax(logits))
        if token in ends:
            break
        tokens.append(token)
        if len(tokens) >= max_new:
            break
        logits = step([token])
        stamps.append(time.perf_counter())
    return timed(tokens, start, stamps, time.perf_counter())


def timed(tokens: list[int], start: float, stamps: list[float], end: float) -> dict[str, Any]:
    """A reply's figures from the forward passes' end times (``stamps``)."""
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    return {
        "tokens": tokens,
        "prefill_s": stamps[0] - start if stamps else float("nan"),
        "decode_ms": statistics.median(gaps) * 1000 if gaps else float("nan"),
        "total_s": end - start,
    }


def crag_reply(chat: Any, profile: ModuleType, messages: Any) -> dict[str, Any]:
    """The lone path of crag (``invoke``'s ``generate``), each forward pass stamped."""
    stamps: list[float] = []
    hook = chat._model.register_forward_hook(lambda *_: stamps.append(time.perf_counter()))
    try:
        start = time.perf_counter()
        tokens = profile.lone_reply(chat, messages)
        end = time.perf_counter()
    finally:
        hook.remove()
    return timed(tokens, start, stamps, end)


def variants(
    chats: dict[str, Any], files: dict[str, str], profile: ModuleType, args: argparse.Namespace
) -> tuple[dict[str, Callable[[Any, list[int]], dict[str, Any]]], dict[str, float]]:
    """The variants ``--only`` keeps, and their sessions' creation seconds.

    Each variant, by name, is called with a prompt's messages and its token ids.
    """
    from crag.generator.step_decoding import end_token_ids

    wanted = args.only.split(",") if args.only else [""]

    fp32 = chats["fp32"]._model
    ends = end_token_ids(fp32, chats["fp32"]._tokenizer)
    cap = 4 if args.smoke else chats["bf16"].max_new_tokens
    table: dict[str, Callable[[Any, list[int]], dict[str, Any]]] = {}
    if not args.smoke:
        table["crag bf16 (generate)"] = lambda m, _ids: crag_reply(chats["bf16"], profile, m)
    for threads in (2, 1):
        reset = torch_step(fp32, threads)
        table[f"torch fp32 loop {threads}t"] = lambda _m, ids, r=reset: greedy(r(), ids, ends, cap)
    load_s: dict[str, float] = {}
    for kind, path in files.items():
        for threads in (1, 2):
            name = f"ORT {kind} {threads}t"
            if not any(w in name for w in wanted):
                continue
            session = OrtStep(path, threads)
            load_s[name] = session.load_s
            table[name] = lambda _m, ids, s=session: greedy(s.reset(), ids, ends, cap)
    kept = {name: run for name, run in table.items() if any(w in name for w in wanted)}
    return kept, load_s


def measure(
    table: dict[str, Callable[[Any, list[int]], dict[str, Any]]],
    prompts: Sequence[tuple[Any, list[int]]],
    rounds: int,
) -> tuple[dict[str, list[list[dict[str, Any]]]], list[str]]:
    """Every variant on every prompt, interleaved, ``rounds`` times; the runs and the loads."""
    runs: dict[str, list[list[dict[str, Any]]]] = {name: [[] for _ in prompts] for name in table}
    loads = []
    for number in range(rounds):
        before = load()
        for index, (messages, ids) in enumerate(prompts):
            for name, run in table.items():
                runs[name][index].append(run(messages, ids))
        loads.append(f"round {number + 1}: {before} -> {load()}")
        logger.info(loads[-1])
    return runs, loads


def summarize(
    runs: dict[str, list[list[dict[str, Any]]]], decode: Callable[[list[int]], str]
) -> dict[str, Any]:
    """Medians per variant, token identity against the references, and right answers."""
    first = {name: [prompt[0]["tokens"] for prompt in per] for name, per in runs.items()}
    table: dict[str, Any] = {}
    for name, per in runs.items():
        flat = [run for prompt in per for run in prompt]
        texts = [decode(tokens) for tokens in first[name]]
        right = [a.lower() in t.lower() for a, t in zip(ANSWERS, texts, strict=False)]
        table[name] = {
            "prefill_s": statistics.median(r["prefill_s"] for r in flat),
            "decode_ms": statistics.median(r["decode_ms"] for r in flat),
            "total_s": statistics.median(r["total_s"] for r in flat),
            "tokens": statistics.median(len(r["tokens"]) for r in flat),
            "stable": all(r["tokens"] == p[0]["tokens"] for p in per for r in p),
            "right": sum(right),
            "texts": texts,
        }
        for reference in ("torch fp32 loop 2t", "crag bf16 (generate)"):
            if reference in first:
                pairs = zip(first[name], first[reference], strict=True)
                table[name][f"same as {reference}"] = sum(a == b for a, b in pairs)
    return table


def prompt_ids(profile: ModuleType, args: argparse.Namespace, chat: Any) -> list[Any]:
    """The generate node's prompts (captured once, then read from the work folder), encoded."""
    if not os.environ.get("CRAG_STORE_PATH"):
        os.environ["CRAG_STORE_PATH"] = str(Path(tempfile.mkdtemp(prefix="onnx_feas_")) / "store")
    if args.smoke:  # no graph run: the bare question
        from langchain_core.messages import HumanMessage

        prompts = [[HumanMessage(profile.QUESTIONS[0])]]
    else:
        prompts, warm = profile.load_prompts(args.workdir / "prompts.json")
        if warm is not None:
            logger.info("warm in-process answer while capturing: %.2f s (load %s)", warm, load())
    encoded = [chat._encode(m, chat.max_new_tokens)["input_ids"][0].tolist() for m in prompts]
    return list(zip(prompts, encoded, strict=True))


def main(argv: list[str] | None = None) -> int:
    """Export, time the variants in rounds, print (and write) the figures."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logger.setLevel(logging.INFO)  # onnxruntime.quantization logs each tensor at INFO
    from crag.generator.factory import load_chat_model
    from crag.generator.smollm2 import ensure_smollm2

    profile = bench_script("profile_generation")
    report: dict[str, Any] = {"load_start": load()}
    report["models"] = build_models(args, ensure_smollm2())
    chats = {
        "bf16": load_chat_model("smollm2"),
        "fp32": load_chat_model("smollm2", dtype="float32"),
    }
    prompts = prompt_ids(profile, args, chats["bf16"])
    report["prompt_tokens"] = [len(ids) for _, ids in prompts]
    table, report["session_s"] = variants(chats, report["models"]["files"], profile, args)
    runs, report["loads"] = measure(table, prompts, 1 if args.smoke else args.rounds)
    tokenizer = chats["bf16"]._tokenizer
    report["variants"] = summarize(runs, lambda t: tokenizer.decode(t, skip_special_tokens=True))
    report["load_end"] = load()
    print_report(report)
    if args.output is not None:
        args.output.write_text(json.dumps(report, indent=1), encoding="utf-8")
    return 0


def print_report(report: dict[str, Any]) -> None:
    """The figures as a plain-text table."""
    lines = [
        f"load at start {report['load_start']}, at end {report['load_end']}",
        f"models: {json.dumps(report['models'])}",
        f"session creation s: {json.dumps(report['session_s'])}",
        f"prompt tokens: {report['prompt_tokens']}",
        *report["loads"],
        f"{'variant':24s} {'prefill s':>9s} {'ms/token':>8s} {'reply s':>7s} {'tokens':>6s} "
        f"{'=fp32':>5s} {'=bf16':>5s} {'right':>5s} stable",
    ]
    for name, row in report["variants"].items():
        lines.append(
            f"{name:24s} {row['prefill_s']:9.3f} {row['decode_ms']:8.1f} {row['total_s']:7.3f} "
            f"{row['tokens']:6.0f} {row.get('same as torch fp32 loop 2t', '-')!s:>5s} "
            f"{row.get('same as crag bf16 (generate)', '-')!s:>5s} {row['right']:5d} "
            f"{row['stable']}"
        )
    for name, row in report["variants"].items():
        lines.append(f"{name}: {json.dumps(row['texts'])}")
    print("\n".join(lines))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/onnx_feas"))
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every variant")
    parser.add_argument("--reexport", action="store_true", help="export (and quantize) again")
    parser.add_argument(
        "--int8",
        type=lambda text: [mode for mode in text.split(",") if mode],
        default=["int8"],
        help=f"comma-separated int8 models ('' for none): {INT8_MODES}",
    )
    parser.add_argument(
        "--only", help="comma-separated substrings: run only the variants whose name has one"
    )
    parser.add_argument("--fuse", action="store_true", help="also onnxscript's ORT fusions")
    parser.add_argument(
        "--smoke", action="store_true", help="one round, the bare first question, 4 tokens"
    )
    parser.add_argument("--output", type=Path, help="write the figures as JSON here")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
