"""Whether the bundled MiniLM on transformers alone gives sentence-transformers' vectors.

Usage: .venv/bin/python bench/scripts/compare_minilm.py [--chunks 0] [--questions 250]

Embeds the default corpus's chunks (``--chunks N``: a random N of them, 0: all 10,483), some
longer texts made of consecutive chunks (past the model's 256 tokens, so truncation is
compared too), and the first ``--questions`` questions of ``nq-dev`` and of ``trivia-dev``, one
at a time as queries, with both embedders: ``crag.vectorstore.minilm.MiniLMEmbeddings`` (what
``crag ask`` loads) and ``HuggingFaceEmbeddings`` over sentence-transformers
(``crag.vectorstore.embeddings.load_embeddings``). Prints, per kind of text, how many texts, the
largest absolute difference of a vector component, how many vectors are equal to the last bit,
and each embedder's seconds.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np

from crag.app.environment import configure_environment
from crag.vectorstore.corpus import corpus_chunks, load_corpus
from crag.vectorstore.embeddings import (
    DEFAULT_EMBEDDER,
    ENCODE_BATCH_SIZE,
    load_embeddings,
    resolve_model_path,
)
from crag.vectorstore.minilm import MiniLMEmbeddings
from crag_bench.datasets import load_dataset

LONG_TEXTS = 50
"""Texts of eight consecutive chunks each: well past 256 tokens."""


def texts_to_compare(chunks: int, questions: int) -> dict[str, list[str]]:
    """The texts of each kind: corpus chunks, long texts, questions."""
    every = [c.text for doc in corpus_chunks(load_corpus()) for c in doc]
    rng = random.Random(7)
    sample = every if chunks <= 0 else rng.sample(every, min(chunks, len(every)))
    starts = rng.sample(range(len(every) - 8), LONG_TEXTS)
    asked = [
        q.question for name in ("nq-dev", "trivia-dev") for q in load_dataset(name)[:questions]
    ]
    return {
        "corpus chunks": sample,
        "long texts": ["\n".join(every[s : s + 8]) for s in starts],
        "questions (queries)": asked,
    }


def timed(embed: Callable[[], list[list[float]]]) -> tuple[np.ndarray, float]:
    """The vectors ``embed`` returns and its seconds."""
    start = time.perf_counter()
    vectors = np.asarray(embed(), dtype=np.float32)
    return vectors, time.perf_counter() - start


def compare(kind: str, texts: Sequence[str], library: object, light: MiniLMEmbeddings) -> None:
    """Print one row: both embedders over ``texts`` (queries one by one)."""
    queries = kind.startswith("questions")

    def run(embedder: object) -> Callable[[], list[list[float]]]:
        if queries:
            return lambda: [embedder.embed_query(t) for t in texts]  # type: ignore[attr-defined]
        return lambda: embedder.embed_documents(list(texts))  # type: ignore[attr-defined]

    expected, library_s = timed(run(library))
    got, light_s = timed(run(light))
    diff = float(np.abs(got - expected).max())
    equal = int(np.all(got == expected, axis=1).sum())
    print(f"{kind:<22} {len(texts):>6} {diff:>12.3g} {equal:>8} {library_s:>10.1f} {light_s:>8.1f}")


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=0, help="random chunks (0: all)")
    parser.add_argument("--questions", type=int, default=250, help="questions per dev set")
    args = parser.parse_args(argv)
    configure_environment()
    library = load_embeddings(DEFAULT_EMBEDDER)
    light = MiniLMEmbeddings(resolve_model_path(DEFAULT_EMBEDDER), "cpu", ENCODE_BATCH_SIZE)
    header = ("texts", "count", "max |diff|", "equal", "library s", "this s")
    print("{:<22} {:>6} {:>12} {:>8} {:>10} {:>8}".format(*header))
    for kind, texts in texts_to_compare(args.chunks, args.questions).items():
        compare(kind, texts, library, light)
    return 0


if __name__ == "__main__":
    sys.exit(main())
