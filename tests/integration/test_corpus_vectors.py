"""The shipped vectors of the default corpus against the bundled embedder itself.

They equal what the embedder makes of the chunks; a store filled from them holds what a store
filled by embedding holds and answers alike; where they do not apply the corpus is embedded.
"""

from __future__ import annotations

import logging
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_huggingface import HuggingFaceEmbeddings

from crag.vectorstore.corpus import (
    MANIFEST_FILE,
    VECTORS_DIRECTORY,
    VECTORS_FILE,
    check_embedder,
    ensure_default_corpus,
    shipped_vectors,
)
from crag.vectorstore.embeddings import load_embeddings, locked_embeddings
from crag.vectorstore.hybrid import search
from crag.vectorstore.store import close_stores, open_store
from crag.vectorstore.vector_memo import VectorMemo
from tests.fakes import CountingEmbeddings
from tests.process_caches import forget_lexical_indexes

pytestmark = pytest.mark.integration

LIMIT = 160
"""Summaries in the compared stores (the first 160 by title, "0" to "African Union"): each
question's article among them. The embedded store's chunks are embedded here, about 20 a second
on two loaded cores; 300 summaries took twice as long and compared nothing else."""

QUESTIONS = (
    "Who wrote A Christmas Carol?",
    "Who wrote The Wealth of Nations?",
    "Who was Ada Lovelace?",
    "What causes acid rain?",
    "When did the Lisbon earthquake happen?",
    "What is absolute zero?",
    "When was Abraham Lincoln president?",
    "What is the capital of Afghanistan?",
    "What is the Acropolis of Athens?",
    "What is the Aeneid about?",
)


def _where(doc: Document) -> tuple[str, int]:
    """A retrieved chunk's source and index."""
    return str(doc.metadata["source"]), int(doc.metadata["chunk"])


def _fill(
    path: Path, embeddings: HuggingFaceEmbeddings, vectors: Path, **settings: int
) -> tuple[CountingEmbeddings, Chroma]:
    counting = CountingEmbeddings(embeddings)
    store = open_store(path, "corpus", counting, create=True)
    report = ensure_default_corpus(
        store,
        limit=settings.pop("limit", LIMIT),
        progress=False,
        vectors_directory=vectors,
        **settings,
    )
    assert report is not None and not report.failed
    return counting, store


def test_the_shipped_vectors_are_the_embedders(embeddings: HuggingFaceEmbeddings) -> None:
    shipped = shipped_vectors()
    rows = [
        (chunk, row)
        for row, chunk in enumerate(c for doc_chunks in shipped.chunks for c in doc_chunks)
    ]
    sample = random.Random(7).sample(rows, 20)
    fresh = np.asarray(embeddings.embed_documents([chunk.text for chunk, _ in sample]))
    expected = shipped.vectors[[row for _, row in sample]]
    assert np.abs(fresh - expected).max() < 1e-5


def test_the_shared_embedder_is_the_bundled_one() -> None:
    check_embedder(locked_embeddings("all-MiniLM-L6-v2"))  # the one the app's stores get
    check_embedder(load_embeddings())


def test_a_store_from_the_shipped_vectors_answers_as_one_embedded(
    tmp_path: Path, embeddings: HuggingFaceEmbeddings, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="crag.vectorstore.corpus"):
        shipped_counter, shipped = _fill(tmp_path / "shipped", embeddings, VECTORS_DIRECTORY)
        embedded_counter, embedded = _fill(tmp_path / "embedded", embeddings, tmp_path / "none")
    messages = [r.getMessage() for r in caplog.records]
    assert any(
        m.startswith("filling the default corpus from its shipped vectors") for m in messages
    )
    assert any("none/default_corpus_vectors.json is missing" in m for m in messages)
    assert shipped_counter.documents == 0
    assert embedded_counter.documents > LIMIT
    try:
        one = shipped.get(include=["documents", "metadatas", "embeddings"])
        two = embedded.get(include=["documents", "metadatas", "embeddings"])
        order_one, order_two = np.argsort(one["ids"]), np.argsort(two["ids"])
        assert [one["ids"][i] for i in order_one] == [two["ids"][i] for i in order_two]
        assert [one["documents"][i] for i in order_one] == [two["documents"][i] for i in order_two]
        metadatas = [
            (one["metadatas"][i], two["metadatas"][j])
            for i, j in zip(order_one, order_two, strict=True)
        ]
        assert all(mine == theirs for mine, theirs in metadatas)
        gap = np.abs(
            np.asarray(one["embeddings"])[order_one] - np.asarray(two["embeddings"])[order_two]
        )
        assert gap.max() < 1e-5
        for question in QUESTIONS:
            hits_one = shipped.similarity_search_with_score(question, k=5)
            hits_two = embedded.similarity_search_with_score(question, k=5)
            assert [_where(d) for d, _ in hits_one] == [_where(d) for d, _ in hits_two], question
            assert np.allclose([s for _, s in hits_one], [s for _, s in hits_two], atol=1e-5)
            for mode in ("lexical", "hybrid"):
                found = [
                    [_where(d) for d in search(s, question, 5, mode=mode, memo=VectorMemo())]
                    for s in (shipped, embedded)
                ]
                assert found[0] == found[1], (mode, question)
    finally:
        close_stores()
        forget_lexical_indexes()


@pytest.mark.parametrize("damage", ["other-chunk-size", "corrupt-file"])
def test_what_the_vectors_do_not_fit_is_embedded(
    tmp_path: Path,
    embeddings: HuggingFaceEmbeddings,
    caplog: pytest.LogCaptureFixture,
    damage: str,
) -> None:
    vectors = tmp_path / "data"
    vectors.mkdir()
    for name in (VECTORS_FILE, MANIFEST_FILE):
        shutil.copy(VECTORS_DIRECTORY / name, vectors / name)
    settings = {"limit": 10}
    if damage == "other-chunk-size":
        settings["chunk_size"] = 300
        expected = "shipped vectors do not apply: they were made with chunk_size=1000"
    else:
        (vectors / VECTORS_FILE).write_bytes(b"PK\x03\x04 cut short")
        expected = "default_corpus_vectors.npz does not match the SHA-256"
    with caplog.at_level(logging.INFO, logger="crag.vectorstore.corpus"):
        counting, _ = _fill(tmp_path / "store", embeddings, vectors, **settings)
    close_stores()
    lines = [r for r in caplog.records if "shipped vectors do not apply" in r.getMessage()]
    assert len(lines) == 1 and expected in lines[0].getMessage()
    assert lines[0].levelno == (logging.WARNING if damage == "corrupt-file" else logging.INFO)
    assert counting.documents >= 10
