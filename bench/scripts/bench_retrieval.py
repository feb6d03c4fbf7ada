"""Retrieval recall@k and query latency of dense, lexical and hybrid retrieval on dev sets.

Prints, per set and mode, the share of questions with a gold document in the top k and the
median query latency, and the time to build the lexical index of the store. Tune on the
``*-dev`` sets only.

Usage::

    .venv/bin/python bench/scripts/bench_retrieval.py --store .crag/chroma --limit 1000 \
        --datasets nq-dev,trivia-dev
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections.abc import Sequence
from typing import Any

from crag.vectorstore.embeddings import load_embeddings
from crag.vectorstore.hybrid import RETRIEVAL_MODES, search
from crag.vectorstore.lexical import build_index, read_chunks
from crag.vectorstore.lexical_store import lexical_index
from crag.vectorstore.store import open_store
from crag.vectorstore.vector_memo import VectorMemo
from crag_bench.datasets import load_dataset

logger = logging.getLogger(__name__)


def _options(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=".crag/chroma", help="Chroma store on disk")
    parser.add_argument("--collection", default="crag")
    parser.add_argument("--datasets", default="nq-dev,trivia-dev")
    parser.add_argument("--limit", type=int, default=1000, help="first N questions per set")
    parser.add_argument("--k", type=int, default=10, help="recall@k and passages retrieved")
    parser.add_argument("--modes", default=",".join(RETRIEVAL_MODES))
    return parser.parse_args(argv)


def _build_time(store: Any) -> tuple[int, float, float]:
    """Chunks, seconds to read them and seconds to build their BM25 index (in memory)."""
    start = time.perf_counter()
    ids, texts = read_chunks(store._collection)
    read = time.perf_counter() - start
    start = time.perf_counter()
    build_index(ids, texts)
    return len(ids), read, time.perf_counter() - start


def _measure(store: Any, questions: list[Any], mode: str, k: int) -> tuple[float, float]:
    """Recall@k (share of questions with a gold source in the top k) and median seconds."""
    memo = VectorMemo(max_entries=0)
    hits = 0
    latencies: list[float] = []
    for question in questions:
        start = time.perf_counter()
        documents = search(store, question.question, k, mode=mode, memo=memo)
        latencies.append(time.perf_counter() - start)
        sources = {document.metadata.get("source") for document in documents}
        hits += bool(sources & set(question.gold_sources))
    return hits / max(len(questions), 1), statistics.median(latencies)


def main(argv: Sequence[str] | None = None) -> None:
    """Print the figures (see the module)."""
    logging.basicConfig(level=logging.WARNING)
    options = _options(argv)
    store = open_store(options.store, options.collection, load_embeddings(), create=False)
    chunks, read, build = _build_time(store)
    print(f"store: {chunks} chunks; read {read:.2f} s, BM25 build {build:.2f} s")
    lexical_index(store)  # built (or loaded) once, outside the latency figures
    for name in options.datasets.split(","):
        questions = [q for q in load_dataset(name) if q.gold_sources][: options.limit]
        for mode in options.modes.split(","):
            search(store, "warm up", options.k, mode=mode, memo=VectorMemo(0))
            recall, latency = _measure(store, questions, mode, options.k)
            print(
                f"{name} ({len(questions)} questions) {mode:8s} recall@{options.k} "
                f"{recall:.3f}  median query {latency * 1000:.1f} ms",
                flush=True,
            )


if __name__ == "__main__":
    main()
