"""The bundled MiniLM's encoder on onnxruntime against torch, batch by batch, on this CPU.

Usage: .venv/bin/python bench/scripts/bench_embedder_engines.py [--runs 3]
    [--shapes 1x16,1x64,1x256,16x64,16x256,64x16,64x128,64x256]

Why: ``crag.vectorstore.minilm`` sends calls of up to ``ONNX_MOST_TEXTS`` texts to the ONNX
export and larger ones to torch; this prints the figures that split rests on (docs/models.md).
Each shape is ``texts x tokens``: that many texts of exactly that many tokens (the classifier
and separator tokens included), embedded as one batch by each engine, ``--runs`` times after one
untimed call; the median of each is printed with their ratio, and the largest difference of a
vector component between the two.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np

from crag.app.environment import configure_environment
from crag.vectorstore.embeddings import DEFAULT_EMBEDDER, ENCODE_BATCH_SIZE, resolve_model_path
from crag.vectorstore.minilm import MiniLMEmbeddings

SHAPES = "1x16,1x64,1x256,16x64,16x256,64x16,64x128,64x256"
WORDS = ("river", "castle", "painter", "planet", "harbour", "violin", "glacier", "market")


def texts_of(count: int, tokens: int) -> list[str]:
    """``count`` different texts of ``tokens`` tokens each (one token per common word)."""
    return [
        " ".join(WORDS[(row + col) % len(WORDS)] for col in range(tokens - 2))
        for row in range(count)
    ]


def median_ms(call: Callable[[], np.ndarray], runs: int) -> tuple[float, np.ndarray]:
    """The median milliseconds of ``runs`` calls (after one untimed call) and the last result."""
    rows = call()
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        rows = call()
        seconds.append(time.perf_counter() - start)
    return 1000 * statistics.median(seconds), rows


def main(argv: Sequence[str] | None = None) -> int:
    """Print one row per shape."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="timed calls per shape and engine")
    parser.add_argument("--shapes", default=SHAPES, help="comma-separated TEXTSxTOKENS")
    args = parser.parse_args(argv)
    configure_environment()
    embedder = MiniLMEmbeddings(resolve_model_path(DEFAULT_EMBEDDER), "cpu", ENCODE_BATCH_SIZE)
    onnx = embedder.onnx_encoder()
    if onnx is None:
        print("the ONNX export could not be made: see the log", file=sys.stderr)
        return 1
    header = ("texts x tokens", "onnxruntime ms", "torch ms", "ratio", "max |diff|")
    print("{:<16} {:>15} {:>10} {:>7} {:>11}".format(*header))
    for shape in args.shapes.split(","):
        count, tokens = (int(part) for part in shape.lower().split("x"))
        texts = texts_of(count, tokens)
        assert len(onnx.tokenizer.encode(texts[0]).ids) == tokens, shape
        onnx_ms, onnx_rows = median_ms(lambda batch=texts: onnx.batch(batch), args.runs)
        torch_ms, torch_rows = median_ms(
            lambda batch=texts: embedder.torch_rows([batch]), args.runs
        )
        diff = float(np.abs(onnx_rows - torch_rows).max())
        ratio = onnx_ms / torch_ms
        print(f"{shape:<16} {onnx_ms:>15.1f} {torch_ms:>10.1f} {ratio:>7.2f} {diff:>11.2g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
