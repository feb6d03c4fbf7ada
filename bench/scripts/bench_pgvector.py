"""pgvector beside Chroma: ingest speed, query latency and recall@10 on the dev questions.

Usage: .venv/bin/python bench/scripts/bench_pgvector.py [--store .crag/chroma] [--repeats 3]

Needs ``pip install 'crag[pgvector]'`` (``langchain-postgres``) and the dev extra's ``pgserver``
(PostgreSQL 18 with pgvector, started here in a temporary directory on a Unix socket and
removed afterwards). The chunks and their vectors are copied from the Chroma store, so both
stores hold the same vectors and only the stores are compared (nothing is embedded again but
the questions, once each). For the bundled ``nq-dev`` and ``trivia-dev`` questions it prints:
the time to write every chunk into pgvector (``add_embeddings``) and to build its HNSW index;
the median query latency of each store (top 10 by vector); and recall@10, the share of
questions with a chunk of a gold document among the 10 returned, for Chroma (HNSW), pgvector
exact (no index) and pgvector with its HNSW index.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from crag.settings.deployment import deployment_settings
from crag.vectorstore.embeddings import load_embeddings
from crag.vectorstore.store import open_store

ROOT = Path(__file__).resolve().parents[2]
SETS = ("nq-dev", "trivia-dev")
TOP_K = 10
BATCH = 1000


@contextmanager
def _postgres() -> Iterator[str]:
    """A PostgreSQL (with pgvector) in a temporary directory; its SQLAlchemy URL."""
    from pgserver.postgres_server import get_server

    data_dir = Path(tempfile.mkdtemp(prefix="crag-pgv-"))
    server = get_server(str(data_dir / "pg"), cleanup_mode="stop")
    try:
        yield server.get_uri().replace("postgresql://", "postgresql+psycopg://", 1)
    finally:
        server.cleanup()
        shutil.rmtree(data_dir, ignore_errors=True)


def _questions() -> list[dict[str, Any]]:
    rows = []
    for name in SETS:
        path = ROOT / "bench/crag_bench/data/open_domain" / f"{name}.jsonl"
        rows += [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return rows


def _chroma_contents(store: Any) -> tuple[list[str], list[str], list[list[float]], list[dict]]:
    got = store._collection.get(include=["documents", "embeddings", "metadatas"])
    return (
        got["ids"],
        got["documents"],
        [list(map(float, e)) for e in got["embeddings"]],
        got["metadatas"],
    )


def _recall(
    search: Callable[[list[float]], list[Any]],
    vectors: Sequence[list[float]],
    golds: Sequence[set[str]],
) -> tuple[float, float]:
    """recall@10 and the median latency (s) of ``search`` over the question vectors."""
    hits, latencies = 0, []
    for vector, gold in zip(vectors, golds, strict=True):
        start = time.perf_counter()
        docs = search(vector)
        latencies.append(time.perf_counter() - start)
        hits += any(d.metadata.get("source") in gold for d in docs)
    return hits / len(vectors), statistics.median(latencies)


def _write(
    pg: Any, ids: list[str], texts: list[str], vectors: list[list[float]], metadatas: list[dict]
) -> float:
    """Write every chunk with its vector into pgvector; the seconds it took."""
    start = time.perf_counter()
    for i in range(0, len(ids), BATCH):
        pg.add_embeddings(
            texts[i : i + BATCH],
            vectors[i : i + BATCH],
            metadatas[i : i + BATCH],
            ids=ids[i : i + BATCH],
        )
    return time.perf_counter() - start


def _build_hnsw_index(pg: Any) -> float:
    """Index the vectors with pgvector's HNSW (cosine); the seconds it took."""
    from sqlalchemy import text

    start = time.perf_counter()
    with pg._make_sync_session() as session:
        session.execute(
            text("CREATE INDEX ON langchain_pg_embedding USING hnsw (embedding vector_cosine_ops)")
        )
        session.commit()
    return time.perf_counter() - start


def main() -> int:
    """Copy the store into pgvector, query both, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=deployment_settings().store_path)
    args = parser.parse_args()
    from langchain_postgres import PGVector

    embeddings = load_embeddings()
    chroma = open_store(args.store, deployment_settings().collection, embeddings, create=False)
    ids, texts, vectors, metadatas = _chroma_contents(chroma)
    questions = _questions()
    golds = [set(q.get("gold_sources") or []) for q in questions]
    question_vectors = embeddings.embed_documents([q["question"] for q in questions])

    with _postgres() as url:
        pg = PGVector(embeddings, connection=url, collection_name="crag", embedding_length=384)
        write_s = _write(pg, ids, texts, vectors, metadatas)

        def pg_search(vector: list[float]) -> list[Any]:
            return pg.similarity_search_by_vector(vector, k=TOP_K)

        exact = _recall(pg_search, question_vectors, golds)
        index_s = _build_hnsw_index(pg)
        hnsw = _recall(pg_search, question_vectors, golds)

    def chroma_search(vector: list[float]) -> list[Any]:
        return chroma.similarity_search_by_vector(vector, k=TOP_K)

    chroma_figures = _recall(chroma_search, question_vectors, golds)
    print(f"{len(ids):,} chunks, {len(questions):,} questions ({', '.join(SETS)}), top {TOP_K}")
    print(
        f"pgvector write: {write_s:.1f} s ({len(ids) / write_s:,.0f} chunks/s); "
        f"HNSW index build: {index_s:.1f} s"
    )
    print(f"{'store':<24} {'recall@10':>9} {'median query ms':>16}")
    for name, (recall, latency) in (
        ("Chroma (HNSW)", chroma_figures),
        ("pgvector, exact", exact),
        ("pgvector, HNSW index", hnsw),
    ):
        print(f"{name:<24} {recall:9.3f} {latency * 1000:16.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
