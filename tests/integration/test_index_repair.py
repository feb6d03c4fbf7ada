"""A vector index that stops finding chunks after mass deletes: detected, rebuilt, said so.

Real Chroma stores on disk. The damage is the one of issue 34 (``crag remove`` of a PDF whose
3,000 pages are the same), made smaller: 150 distinct documents, then one document of 1,500
identical chunks, removed with :func:`~crag.vectorstore.removal.remove_sources`. Chroma's HNSW
index only marks deleted nodes; the identical chunks were linked almost only to each other, and
a search that enters them finds fewer than ``k`` live chunks, often none (see
:mod:`crag.vectorstore.index_health`). Chroma does not build the same graph twice (its levels
are drawn at random), so the module's store is built again, at most :data:`ATTEMPTS` times
(about 5 s each), until raw Chroma shows the damage; at these sizes it did in every one of 24
builds (at 500 and 3,000, in about a third). Each test gets its own copy of that store.

The embedder gives each distinct text its own random direction (seeded by the text), the same
text the same vector: a question that is a document's text finds that document first.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_chroma import Chroma
from langchain_core.embeddings import Embeddings

from crag.documents.loaders import LoadedDocument
from crag.graph.builder import build_graph
from crag.settings.context import Context
from crag.settings.deployment import deployment_with
from crag.vectorstore.hybrid import search
from crag.vectorstore.index_health import (
    RETIRED_SUFFIX,
    SPARE_SUFFIX,
    matching_chunks,
    watch_index,
)
from crag.vectorstore.ingest import QUIET, ingest_documents
from crag.vectorstore.locking import LOCK_FILE
from crag.vectorstore.removal import remove_sources
from crag.vectorstore.store import close_stores, count, open_store
from crag.vectorstore.vector_memo import VectorMemo
from tests.fakes import FakeComponents, FixedScoreEvaluator, scripted_chat
from tests.server_support import chroma_server

pytestmark = pytest.mark.integration

DIMENSIONS = 64
TOPICS = 150
REPEATS = 1500
ATTEMPTS = 4
K = 10
REPEATED = "wikipedia:Repeated pages"
PAGE = "This page of the scanned manual repeats itself on every sheet. " * 9


class SeededEmbeddings(Embeddings):
    """A random unit vector per distinct text, seeded by the text (the same text, the same)."""

    def _vector(self, text: str) -> list[float]:
        seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
        vector = np.random.default_rng(seed).normal(size=DIMENSIONS)
        return [float(x) for x in vector / np.linalg.norm(vector)]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


EMBEDDINGS = SeededEmbeddings()


def _document(source: str, text: str) -> LoadedDocument:
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return LoadedDocument(source=source, text=text, sha256=digest, title=source)


def _topic(index: int) -> str:
    return f"Topic {index} is about the museum's room number {index * 7 + 3} and its paintings."


QUESTIONS = [_topic(index) for index in range(0, TOPICS, 5)]


def _raw_hits(store: Chroma, question: str) -> int:
    """What Chroma itself returns for ``question`` (no crag wrapper in the way)."""
    vectors = np.asarray([EMBEDDINGS.embed_query(question)], dtype=np.float32)
    found = store._collection.query(query_embeddings=vectors, n_results=K, include=[])
    return len(found["ids"][0])


def _records(got: Mapping[str, Any]) -> list[tuple[str, str, list[tuple[str, Any]]]]:
    """A ``get``'s chunks, comparable: id, text and sorted metadata, sorted by id."""
    rows = zip(got["ids"], got["documents"], got["metadatas"], strict=True)
    return sorted((i, text, sorted(meta.items())) for i, text, meta in rows)


def _build(directory: Path | str, collection: str = "docs", **server: Any) -> Chroma:
    """Ingest the topics and the repeated document, then remove the latter."""
    store = open_store(directory, collection, EMBEDDINGS, create=True, **server)
    topics = [_document(f"wikipedia:Topic {i}", _topic(i)) for i in range(TOPICS)]
    ingest_documents(topics, store, QUIET)
    repeated = _document(REPEATED, "\n\n".join([PAGE] * REPEATS))
    report = ingest_documents([repeated], store, QUIET)
    assert report.chunks_added == REPEATS, "each page is one chunk, all alike"
    remove_sources(store, [REPEATED])
    assert count(store) == TOPICS
    return store


@pytest.fixture(scope="module")
def damaged_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store on disk (closed) whose index lost its way: raw Chroma answers some question short."""
    root = tmp_path_factory.mktemp("damaged")
    for attempt in range(ATTEMPTS):
        directory = root / f"store-{attempt}"
        store = _build(directory)
        short = [q for q in QUESTIONS if _raw_hits(store, q) < K]
        close_stores()
        if short:
            return directory
    pytest.fail(f"Chroma's index was never damaged in {ATTEMPTS} builds: the repro is stale")


@pytest.fixture
def damaged(damaged_store: Path, tmp_path: Path) -> tuple[Chroma, list[str]]:
    """A copy of the damaged store, opened, and the questions raw Chroma answers short."""
    shutil.copytree(damaged_store, tmp_path / "store")
    store = open_store(tmp_path / "store", "docs", EMBEDDINGS, create=False)
    short = [q for q in QUESTIONS if _raw_hits(store, q) < K]
    assert short, "the copy of the damaged store is damaged too"
    return store, short


@pytest.fixture(autouse=True)
def _closed() -> object:
    yield None
    close_stores()


def test_a_search_that_meets_deleted_chunks_rebuilds_the_index_and_says_so(
    damaged: tuple[Chroma, list[str]],
) -> None:
    store, short = damaged
    before = store._collection.get(include=["documents", "metadatas"])
    with watch_index() as notes:
        hits = search(store, short[0], K, memo=VectorMemo())
    assert len(hits) == K
    assert hits[0].page_content == short[0]
    assert len(notes) == 1
    assert "vector index" in notes[0] and "was damaged" in notes[0]
    assert f"rebuilt it ({TOPICS:,} chunks)" in notes[0]
    # every chunk kept (ids, texts, metadata), and every question answered in full now
    after = store._collection.get(include=["documents", "metadatas"])
    assert _records(after) == _records(before)
    assert [_raw_hits(store, q) for q in QUESTIONS] == [K] * len(QUESTIONS)
    names = {c.name for c in store._client.list_collections()}
    assert names == {"docs"}


def test_a_run_on_a_damaged_index_gets_its_passages_and_a_note(
    damaged: tuple[Chroma, list[str]],
) -> None:
    store, short = damaged
    components = FakeComponents(
        store=store, scorer=FixedScoreEvaluator({"museum": 0.9}), chat=scripted_chat()
    )
    graph = build_graph(components=components, deployment=deployment_with(default_corpus=False))
    out = graph.invoke({"question": short[0]}, context=Context(top_k=K))
    assert len(out["documents"]) == K
    assert out["documents"][0]["text"] == short[0]
    assert any("rebuilt it" in note for note in out["notes"])
    assert not any("returned no passages" in note for note in out["notes"])


def test_another_handle_on_the_rebuilt_collection_reopens_it(
    damaged: tuple[Chroma, list[str]],
) -> None:
    store, short = damaged
    other = open_store(
        Path(store._client.get_settings().persist_directory), "docs", EMBEDDINGS, create=False
    )
    search(store, short[0], K, memo=VectorMemo())  # rebuilds: a new collection, same name
    hits = other.similarity_search(short[-1], k=K)
    assert len(hits) == K


def test_a_filter_that_matches_few_chunks_is_not_taken_for_damage(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store", "docs", EMBEDDINGS, create=True)
    ingest_documents(
        [_document(f"wikipedia:Topic {i}", _topic(i)) for i in range(30)], store, QUIET
    )
    collection_id = store._collection.id
    where = {"source": "wikipedia:Topic 3"}
    assert matching_chunks(store._collection, K, where) == 1
    with watch_index() as notes:
        hits = search(store, _topic(3), K, memo=VectorMemo(), where=where)
        everything = search(store, _topic(3), 50, memo=VectorMemo())
    assert [h.page_content for h in hits] == [_topic(3)]
    assert len(everything) == 30
    assert notes == []
    assert store._collection.id == collection_id, "no rebuild"


def _collection(store_path: Path, name: str, texts: list[str]) -> None:
    store = open_store(store_path, name, EMBEDDINGS, create=True)
    store.add_texts(texts, metadatas=[{"source": t, "chunk": 0} for t in texts], ids=texts)


def test_a_rebuild_cut_short_before_the_swap_is_undone(tmp_path: Path) -> None:
    path = tmp_path / "store"
    _collection(path, "docs", ["alpha", "beta", "gamma"])
    _collection(path, "docs" + SPARE_SUFFIX, ["alpha"])  # a partial copy
    close_stores()
    store = open_store(path, "docs", EMBEDDINGS, create=False)
    assert {c.name for c in store._client.list_collections()} == {"docs"}
    assert count(store) == 3


def test_a_rebuild_in_progress_elsewhere_is_left_to_its_writer(tmp_path: Path) -> None:
    path = tmp_path / "store"
    _collection(path, "docs", ["alpha", "beta", "gamma"])
    _collection(path, "docs" + SPARE_SUFFIX, ["alpha"])  # another process's copy, filling
    close_stores()
    writer = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT)  # that process's write lock
    try:
        fcntl.flock(writer, fcntl.LOCK_EX)
        store = open_store(path, "docs", EMBEDDINGS, create=False)
        names = {c.name for c in store._client.list_collections()}
        assert names == {"docs", "docs" + SPARE_SUFFIX}
        assert count(store) == 3
    finally:
        os.close(writer)


def test_a_rebuild_cut_short_in_the_swap_is_completed(tmp_path: Path) -> None:
    path = tmp_path / "store"
    _collection(path, "docs" + RETIRED_SUFFIX, ["alpha", "beta", "gamma"])
    _collection(path, "docs" + SPARE_SUFFIX, ["alpha", "beta", "gamma"])  # checked complete
    close_stores()
    store = open_store(path, "docs", EMBEDDINGS, create=False)
    assert {c.name for c in store._client.list_collections()} == {"docs"}
    assert count(store) == 3
    assert len(store.similarity_search("beta", k=3)) == 3


def test_a_damaged_index_on_a_chroma_server_is_rebuilt_too(tmp_path: Path) -> None:
    with chroma_server(tmp_path / "chroma") as server:
        where = {"host": server.host, "port": server.port}
        for attempt in range(ATTEMPTS):
            store = _build("", f"docs-{attempt}", **where)
            short = [q for q in QUESTIONS if _raw_hits(store, q) < K]
            if short:
                break
        else:
            pytest.fail(f"the server's index was never damaged in {ATTEMPTS} builds")
        with watch_index() as notes:
            hits = search(store, short[0], K, memo=VectorMemo())
        assert len(hits) == K
        assert notes and f"rebuilt it ({TOPICS:,} chunks)" in notes[0]
        assert [_raw_hits(store, q) for q in QUESTIONS] == [K] * len(QUESTIONS)
        names = {c.name for c in store._client.list_collections()}
        assert f"docs-{attempt}" in names
        assert not any(name.endswith((SPARE_SUFFIX, RETIRED_SUFFIX)) for name in names)
