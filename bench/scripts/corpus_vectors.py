"""Build the shipped vectors of the default corpus, and their manifest.

Chunks the bundled Wikipedia summaries exactly as filling an empty store does
(:func:`crag.vectorstore.corpus.corpus_chunks`: ingestion's splitter, chunk size and overlap,
chunk ids), embeds every chunk with the bundled all-MiniLM-L6-v2 (normalised, float32), and
writes ``vectorstore/data/default_corpus_vectors.npz`` (array ``vectors``, one row per chunk, in
the chunks' order; compressed without loss) and ``default_corpus_vectors.json`` (the corpus
file's SHA-256, the embedder and its package version, the chunking, the chunks' count and
digest, the vectors file's SHA-256 and the licence). :func:`crag.vectorstore.corpus.
ensure_default_corpus` uses them only while all of that still holds.

Run it again after changing the corpus package, the embedder package or the chunking (the test
``tests/unit/test_corpus_vectors.py`` fails until then). Embedding takes minutes on a CPU.

Usage:
    .venv/bin/python bench/scripts/corpus_vectors.py [--out vectorstore/data]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from crag.core.file_digest import file_sha256
from crag.vectorstore.corpus import (
    CHUNK_OVERLAP,
    CHUNK_SIZE,
    CORPUS_ATTRIBUTION,
    CORPUS_DISTRIBUTION,
    CORPUS_FILE,
    EMBEDDER_DISTRIBUTION,
    MANIFEST_FILE,
    VECTORS_DIRECTORY,
    VECTORS_FILE,
    CorpusChunk,
    chunks_digest,
    corpus_chunks,
    corpus_path,
    embedder_version,
    load_corpus,
)
from crag.vectorstore.embeddings import DEFAULT_EMBEDDER, load_embeddings
from crag.vectorstore.ingest import EMBED_BATCH_SIZE

logger = logging.getLogger("corpus_vectors")

LICENCE = (
    f"{CORPUS_ATTRIBUTION} These vectors are computed from that text (each row embeds one "
    "chunk of a summary) and are shared under the same licence, CC BY-SA 4.0. The embedder, "
    "all-MiniLM-L6-v2 (sentence-transformers), is Apache-2.0."
)


def embed(chunks: Sequence[CorpusChunk], batch_size: int = EMBED_BATCH_SIZE) -> np.ndarray:
    """The bundled embedder's vector of every chunk, float32, in order."""
    embeddings = load_embeddings(DEFAULT_EMBEDDER)
    rows: list[list[float]] = []
    started = time.perf_counter()
    for first in range(0, len(chunks), batch_size):
        batch = [chunk.text for chunk in chunks[first : first + batch_size]]
        rows.extend(embeddings.embed_documents(batch))
        done = first + len(batch)
        rate = done / (time.perf_counter() - started)
        logger.info("embedded %d/%d chunks (%.1f chunks/s)", done, len(chunks), rate)
    return np.asarray(rows, dtype=np.float32)


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def manifest(
    chunks: Sequence[CorpusChunk], documents: int, vectors: np.ndarray, vectors_path: Path
) -> dict[str, Any]:
    """What :func:`crag.vectorstore.corpus.shipped_vectors` checks, and the licence."""
    rows, dimension = vectors.shape
    return {
        "corpus": {
            "distribution": CORPUS_DISTRIBUTION,
            "file": str(CORPUS_FILE),
            "sha256": file_sha256(corpus_path()),
            "documents": documents,
        },
        "embedder": {
            "name": DEFAULT_EMBEDDER,
            "distribution": EMBEDDER_DISTRIBUTION,
            "version": embedder_version(),
            "normalized": True,
            "dimension": int(dimension),
        },
        "chunking": {
            "splitter": "RecursiveCharacterTextSplitter (crag.vectorstore.ingest.split_text)",
            "chunk_size": CHUNK_SIZE,
            "chunk_overlap": CHUNK_OVERLAP,
        },
        "chunks": {
            "count": len(chunks),
            "sha256": chunks_digest(chunks),
            "digest_of": "each chunk's id, NUL, text, NUL (UTF-8), documents by title, "
            "chunks by index",
        },
        "vectors": {
            "file": VECTORS_FILE,
            "array": "vectors",
            "dtype": "float32",
            "shape": [int(rows), int(dimension)],
            "sha256": file_sha256(vectors_path),
        },
        "built_with": {
            name: _version(name) for name in ("sentence-transformers", "torch", "numpy")
        },
        "licence": LICENCE,
    }


def build(out: Path) -> dict[str, Any]:
    """Chunk, embed and write the vectors and the manifest into ``out``; the manifest."""
    docs = load_corpus()
    chunks = [chunk for doc_chunks in corpus_chunks(docs) for chunk in doc_chunks]
    logger.info("%d summaries, %d chunks", len(docs), len(chunks))
    vectors = embed(chunks)
    out.mkdir(parents=True, exist_ok=True)
    vectors_path = out / VECTORS_FILE
    np.savez_compressed(vectors_path, vectors=vectors)
    described = manifest(chunks, len(docs), vectors, vectors_path)
    text = json.dumps(described, indent=2, ensure_ascii=False) + "\n"
    (out / MANIFEST_FILE).write_text(text, encoding="utf-8")
    size = vectors_path.stat().st_size / 1e6
    logger.info("wrote %s (%.1f MB) and %s", vectors_path, size, out / MANIFEST_FILE)
    return described


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: build into ``--out`` (default: the package's data folder)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=VECTORS_DIRECTORY, help="output folder")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    build(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
