"""Performance figures of ``crag-bench eval`` beyond per-query latency.

* Cold start: a fresh ``crag ask`` process answering one question (interpreter start, imports,
  model loading, store opening and the run), with that process's peak memory.
* Ingestion: chunks written per second by the project's ingestion (chunk, embed, store in
  Chroma) against the embedder's own throughput on the very same chunks.
"""

from __future__ import annotations

import logging
import random
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

from crag.settings.run_settings import RunSettings

logger = logging.getLogger(__name__)

COLD_START_TIMEOUT = 600.0
"""Seconds before the cold-start process is abandoned."""


ERROR_LINES = 25
"""Lines of a failed process's stderr kept in the results."""


def measure_cold_start(settings: RunSettings, question: str) -> dict[str, Any]:
    """Time a new ``crag ask`` process from start to printed answer, with its peak memory.

    The process uses the same store, generator, evaluator and (simulated) web as the eval. Its
    peak resident memory is read from ``RUSAGE_CHILDREN``, the largest of this process's
    finished children (this is the first one the eval starts). A failed attempt is tried once
    more; the results keep the first attempt's error next to the second's figures.
    """
    first = _cold_start_once(settings, question)
    if first.get("error") is None:
        return first
    logger.warning("cold start failed; trying once more")
    second = _cold_start_once(settings, question)
    second["first_attempt_error"] = first["error"]
    return second


def _cold_start_once(settings: RunSettings, question: str) -> dict[str, Any]:
    """One cold-start measurement (see :func:`measure_cold_start`)."""
    given = {
        "search_provider": settings.deployment.search_provider,
        "search_url": settings.deployment.search_url,
        "allowed_hosts": settings.deployment.allowed_hosts,
        "max_new_tokens": settings.max_new_tokens,
        "evaluator": settings.deployment.evaluator,
        "generator": settings.deployment.generator,
        "default_corpus": settings.deployment.default_corpus,
    }
    command = [sys.executable, "-m", "crag.app.cli.commands", "ask", question, "--json", "-q"]
    command += [
        "--store",
        settings.deployment.store_path,
        "--collection",
        settings.deployment.collection,
    ]
    for key, value in given.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        command += ["--set", f"{key}={text}"]
    started = time.perf_counter()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=COLD_START_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired:
        return {"seconds": None, "error": f"no answer within {COLD_START_TIMEOUT:.0f} s"}
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    if done.returncode != 0:
        lines = [
            line
            for line in done.stderr.strip().splitlines()
            if line.strip() and "Loading weights" not in line
        ]
        tail = "\n".join(lines[-ERROR_LINES:]) or f"exit code {done.returncode}"
        logger.warning("cold start: crag ask failed:\n%s", tail)
        return {"seconds": seconds, "peak_rss_mb": peak, "error": tail}
    return {"seconds": seconds, "peak_rss_mb": peak, "error": None}


def measure_ingestion(embedder: str, documents: int, seed: int = 0) -> dict[str, Any]:
    """Ingest ``documents`` bundled summaries into a new store; embed the same chunks alone.

    Returns chunks per second for both, and their ratio (ingestion / raw embedding).
    """
    from crag.vectorstore.corpus import load_corpus
    from crag.vectorstore.embeddings import load_embeddings
    from crag.vectorstore.ingest import EMBED_BATCH_SIZE, QUIET, ingest_documents, split_text
    from crag.vectorstore.store import open_store

    corpus = load_corpus()
    chosen = sorted(random.Random(seed).sample(range(len(corpus)), min(documents, len(corpus))))
    docs = [corpus[i] for i in chosen]
    embeddings = load_embeddings(embedder)
    chunks = [chunk for doc in docs for chunk in split_text(doc.text)]
    embeddings.embed_documents(chunks[:8])  # warm-up: first-call allocations

    started = time.perf_counter()
    for start in range(0, len(chunks), EMBED_BATCH_SIZE):
        embeddings.embed_documents(chunks[start : start + EMBED_BATCH_SIZE])
    raw_seconds = time.perf_counter() - started

    # The store's client stays cached by path; the folder goes when the process ends.
    scratch = tempfile.TemporaryDirectory(prefix="crag-eval-ingest-", ignore_cleanup_errors=True)
    with scratch as folder:
        store = open_store(folder, "ingestion-bench", embeddings, create=True)
        started = time.perf_counter()
        report = ingest_documents(docs, store, QUIET)
        ingest_seconds = time.perf_counter() - started
    written = report.chunks_added
    return {
        "documents": len(docs),
        "chunks": len(chunks),
        "chunks_written": written,
        "raw_embed_seconds": raw_seconds,
        "ingest_seconds": ingest_seconds,
        "raw_embed_chunks_per_s": len(chunks) / raw_seconds if raw_seconds else None,
        "ingest_chunks_per_s": written / ingest_seconds if ingest_seconds else None,
        "ingest_over_raw": (written / ingest_seconds) / (len(chunks) / raw_seconds)
        if ingest_seconds and raw_seconds
        else None,
    }
