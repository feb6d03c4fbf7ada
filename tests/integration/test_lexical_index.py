"""The lexical (BM25) index of a store on disk: finds rare terms, follows writes, never stale.

A real Chroma store in a temporary directory with the real MiniLM embedder.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from crag.documents.loaders import LoadedDocument
from crag.vectorstore import lexical, lexical_store
from crag.vectorstore.embeddings import load_embeddings
from crag.vectorstore.hybrid import search
from crag.vectorstore.ingest import (
    QUIET,
    ingest_documents,
    ingest_paths,
    prune_missing,
    remove_sources,
)
from crag.vectorstore.lexical import META_FILE, digest, read_chunks
from crag.vectorstore.lexical_store import (
    fetch_documents,
    index_directory,
    lexical_ids,
)
from crag.vectorstore.store import close_stores, open_store
from crag.vectorstore.vector_memo import VectorMemo
from tests.process_caches import forget_lexical_indexes

pytestmark = pytest.mark.integration

TARGET = (
    "Service bulletin: the gasket kit ZX-4471 fits only the boilers installed before 2009; "
    "newer boilers take a different seal."
)
FILLERS = [
    f"Maintenance note {n}: the heating system of building {n} was inspected, the pressure "
    f"was checked and the radiators were bled by the technician on duty."
    for n in range(12)
]
LOOKALIKES = [
    f"Part ZX-{code} is the gasket kit for the boilers of series {n}; order it from the service "
    "desk."
    for n, code in enumerate(["4417", "4741", "7441", "4477", "4411", "1447"])
]
"""Codes the embedder cannot tell from ZX-4471: dense retrieval ranks them above it."""


@pytest.fixture(scope="module")
def embeddings() -> Embeddings:
    return load_embeddings()


@pytest.fixture(autouse=True)
def fresh_cache() -> None:
    forget_lexical_indexes()


def lexical_search(store: Chroma, query: str, k: int) -> list[Document]:
    """The ``k`` chunks BM25 ranks best for ``query``, as documents, as hybrid search reads them."""
    return fetch_documents(store, lexical_ids(store, query, k))


def _doc(source: str, text: str, version: str = "1") -> LoadedDocument:
    return LoadedDocument(source=source, text=text, sha256=f"{source}:{version}")


def _store(path: Path, embeddings: Embeddings) -> Chroma:
    store = open_store(path, "docs", embeddings, create=True)
    docs = [_doc(f"mem:note{n}", text) for n, text in enumerate(FILLERS)]
    docs += [_doc(f"mem:part{n}", text) for n, text in enumerate(LOOKALIKES)]
    ingest_documents([*docs, _doc("mem:bulletin", TARGET)], store, QUIET)
    return store


def _sources(documents: list[Document]) -> list[str]:
    return [str(d.metadata["source"]) for d in documents]


def test_lexical_and_hybrid_find_a_rare_code_dense_misses(
    tmp_path: Path, embeddings: Embeddings
) -> None:
    store = _store(tmp_path / "store", embeddings)
    memo = VectorMemo()
    question = "What is part ZX-4471?"
    dense = search(store, question, 1, mode="dense", memo=memo)
    lexical_hits = search(store, question, 1, mode="lexical", memo=memo)
    hybrid = search(store, question, 3, mode="hybrid", memo=memo)
    assert _sources(dense) != ["mem:bulletin"]
    assert _sources(lexical_hits) == ["mem:bulletin"]
    assert lexical_hits[0].page_content == TARGET and lexical_hits[0].metadata["chunk"] == 0
    assert "mem:bulletin" in _sources(hybrid)
    directory = index_directory(store)
    assert directory == tmp_path / "store" / "lexical" / "docs"
    assert (directory / META_FILE).is_file()
    assert not [p for p in directory.parent.iterdir() if p.name.startswith(".")]


def test_the_index_follows_ingest_replace_prune_and_remove(
    tmp_path: Path, embeddings: Embeddings
) -> None:
    store = _store(tmp_path / "store", embeddings)
    assert lexical_search(store, "gasket", 3)  # the index exists from here on
    folder = tmp_path / "files"
    folder.mkdir()
    (folder / "a.txt").write_text("The quokka smiles at every visitor on Rottnest Island.")
    (folder / "b.txt").write_text("The axolotl regrows its limbs in a Mexican lake.")
    ingest_paths([folder], store, QUIET)
    saved = json.loads((index_directory(store) / META_FILE).read_text())  # type: ignore[operator]
    assert saved["digest"] == digest(*read_chunks(store._collection))  # refreshed by the write
    assert _sources(lexical_search(store, "quokka", 3)) == [str(folder / "a.txt")]
    (folder / "a.txt").write_text("The wombat digs burrows in the Australian bush.")
    ingest_paths([folder], store, QUIET)
    assert lexical_search(store, "quokka", 3) == []
    assert _sources(lexical_search(store, "wombat", 3)) == [str(folder / "a.txt")]
    (folder / "a.txt").unlink()
    assert prune_missing(store, [folder]) == [str(folder / "a.txt")]
    assert lexical_search(store, "wombat", 3) == []
    remove_sources(store, [str(folder / "b.txt")])
    assert lexical_search(store, "axolotl", 3) == []
    assert _sources(lexical_search(store, "ZX-4471", 1)) == ["mem:bulletin"]


def test_a_write_by_another_process_is_seen(tmp_path: Path, embeddings: Embeddings) -> None:
    store = _store(tmp_path / "store", embeddings)
    assert lexical_search(store, "pangolin", 3) == []
    script = (
        "import chromadb, sys\n"
        "client = chromadb.PersistentClient(path=sys.argv[1])\n"
        "client.get_collection('docs').add(ids=['x:0'], documents=['A pangolin rolls up.'],"
        " metadatas=[{'source': 'mem:pangolin', 'chunk': 0}], embeddings=[[0.1] * 384])\n"
    )
    subprocess.run([sys.executable, "-c", script, str(tmp_path / "store")], check=True)
    assert _sources(lexical_search(store, "pangolin", 3)) == ["mem:pangolin"]
    forget_lexical_indexes()  # a new process: loads the saved index, checks it, finds it fresh
    assert _sources(lexical_search(store, "pangolin", 3)) == ["mem:pangolin"]


def test_a_corrupt_index_is_rebuilt_with_a_warning(
    tmp_path: Path, embeddings: Embeddings, caplog: pytest.LogCaptureFixture
) -> None:
    store = _store(tmp_path / "store", embeddings)
    assert lexical_search(store, "gasket", 3)
    directory = index_directory(store)
    assert directory is not None
    (directory / "data.csc.index.npy").write_bytes(b"not an array")
    forget_lexical_indexes()
    # the state token no longer matches the file: a stale token would skip the load
    meta = json.loads((directory / META_FILE).read_text())
    assert meta["token"] is None or isinstance(meta["token"], list)
    with caplog.at_level(logging.WARNING, logger="crag.vectorstore.lexical"):
        assert _sources(lexical_search(store, "ZX-4471", 1)) == ["mem:bulletin"]
    assert "cannot be read" in caplog.text
    assert lexical.load_index(directory) is not None  # rewritten whole


def test_an_interrupted_save_keeps_the_previous_index(
    tmp_path: Path, embeddings: Embeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(tmp_path / "store", embeddings)
    before = lexical_store.lexical_index(store)
    directory = index_directory(store)
    assert before is not None and directory is not None

    def crash(path: Path, payload: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(lexical, "write_json", crash)
    with pytest.raises(OSError, match="disk full"):
        lexical.save_index(directory, lexical.build_index(["a:0"], ["other text"]))
    kept = lexical.load_index(directory)
    assert kept is not None and kept.digest == before.digest
    assert [p.name for p in directory.parent.iterdir()] == ["docs"]


def test_where_filters_the_lexical_side(tmp_path: Path, embeddings: Embeddings) -> None:
    store = _store(tmp_path / "store", embeddings)
    memo = VectorMemo()
    where = {"source": {"$in": ["mem:note3", "mem:note4"]}}
    for mode in ("lexical", "hybrid", "dense"):
        hits = search(store, "heating system building", 5, mode=mode, memo=memo, where=where)
        assert set(_sources(hits)) == {"mem:note3", "mem:note4"}, mode
    assert search(store, "ZX-4471", 5, mode="lexical", memo=memo, where=where) == []


def test_an_empty_store_gives_nothing(tmp_path: Path, embeddings: Embeddings) -> None:
    store = open_store(tmp_path / "empty", "docs", embeddings, create=True)
    memo = VectorMemo()
    assert search(store, "anything", 5, mode="lexical", memo=memo) == []
    assert search(store, "anything", 5, mode="hybrid", memo=memo) == []


def teardown_module() -> None:
    close_stores()
