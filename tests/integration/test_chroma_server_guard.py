"""The poisoning guard on a Chroma server, where no lock spans processes.

A real ``chroma run`` on 127.0.0.1. On a store on disk the write lock makes "may this run
replace X?" and the write one step; on a server they are two requests. So there a served run
replaces nothing, whatever ``ingest_run_replace`` says, and a new document is looked up again
just before its first chunks are written: the operator writing the same source in between
(arranged through the ingestion's own progress callback, called after the plan and before any
chunk is written) keeps its document.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_chroma import Chroma

from crag.vectorstore.configured_store import inline_document
from crag.vectorstore.ingest import QUIET, IngestOptions, ingest_documents
from crag.vectorstore.sources import OPERATOR_WRITER, served_writer
from crag.vectorstore.store import open_store
from tests.hash_embeddings import HashEmbeddings
from tests.server_support import ChromaServer, chroma_server

pytestmark = pytest.mark.integration

OPERATOR_TEXT = "Mona Lisa\nThe Mona Lisa is a portrait painted by Leonardo da Vinci."
POISON = "Mona Lisa\nThe Mona Lisa was painted by a caller of the server, last week."


@pytest.fixture(scope="module")
def chroma(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChromaServer]:
    with chroma_server(tmp_path_factory.mktemp("guard_server") / "data") as server:
        yield server


def on_server(chroma: ChromaServer, collection: str) -> Chroma:
    return open_store(
        "", collection, HashEmbeddings(), create=True, host=chroma.host, port=chroma.port
    )


@pytest.fixture
def collection() -> str:
    return f"guard-{uuid.uuid4().hex[:10]}"


def stored(store: Chroma, source: str) -> tuple[list[str], set[str]]:
    got = store.get(where={"source": source}, include=["documents", "metadatas"])
    return list(got["documents"] or []), {str(m["writer"]) for m in got["metadatas"] or []}


def test_a_served_run_replaces_nothing_on_a_chroma_server(
    chroma: ChromaServer, collection: str
) -> None:
    store = on_server(chroma, collection)
    mona = inline_document(OPERATOR_TEXT, source="wikipedia:Mona Lisa")
    assert ingest_documents([mona], store, QUIET).added == ["wikipedia:Mona Lisa"]
    poison = inline_document(POISON, source="wikipedia:Mona Lisa")
    report = ingest_documents(
        [poison], store, IngestOptions(progress=False, writer=served_writer("all"))
    )
    assert report.replaced == [] and report.chunks_added == 0
    assert "on a Chroma server" in report.failed[0][1]
    assert stored(store, "wikipedia:Mona Lisa") == ([OPERATOR_TEXT], {"operator"})


def test_a_source_the_operator_writes_during_a_served_run_stays_the_operators(
    chroma: ChromaServer, collection: str, tmp_path: Path
) -> None:
    served_store, operator_store = on_server(chroma, collection), on_server(chroma, collection)
    other = inline_document("Otters hold hands while they sleep.", source="otters")

    def operator_writes_meanwhile(done: int, total: int) -> None:
        if done == 0:  # planned (the source was free), nothing written yet
            mona = inline_document(OPERATOR_TEXT, source="wikipedia:Mona Lisa")
            ingest_documents(
                [mona], operator_store, IngestOptions(progress=False, writer=OPERATOR_WRITER)
            )

    poison = inline_document(POISON, source="wikipedia:Mona Lisa")
    report = ingest_documents(
        [poison, other],
        served_store,
        IngestOptions(
            progress=False, writer=served_writer("none"), on_progress=operator_writes_meanwhile
        ),
    )
    assert report.added == ["otters"]
    assert [source for source, _ in report.failed] == ["wikipedia:Mona Lisa"]
    assert "already stored by the operator" in report.failed[0][1]
    assert stored(served_store, "wikipedia:Mona Lisa") == ([OPERATOR_TEXT], {"operator"})


def test_a_source_the_operator_writes_between_two_batches_of_a_served_run_stays_the_operators(
    chroma: ChromaServer, collection: str
) -> None:
    """The served document spans several batches; the operator writes it after the first."""
    served_store, operator_store = on_server(chroma, collection), on_server(chroma, collection)
    long_poison = inline_document(" ".join([POISON] * 6), source="wikipedia:Mona Lisa")

    def operator_writes_after_the_first_batch(done: int, total: int) -> None:
        if done == 1:
            mona = inline_document(OPERATOR_TEXT, source="wikipedia:Mona Lisa")
            ingest_documents(
                [mona], operator_store, IngestOptions(progress=False, writer=OPERATOR_WRITER)
            )

    report = ingest_documents(
        [long_poison],
        served_store,
        IngestOptions(
            progress=False,
            writer=served_writer("none"),
            chunk_size=100,
            chunk_overlap=0,
            batch_size=1,
            on_progress=operator_writes_after_the_first_batch,
        ),
    )
    assert report.added == [] and [s for s, _ in report.failed] == ["wikipedia:Mona Lisa"]
    assert stored(served_store, "wikipedia:Mona Lisa") == ([OPERATOR_TEXT], {"operator"})
