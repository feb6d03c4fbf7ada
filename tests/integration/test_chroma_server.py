"""The store in both modes: on disk and on a Chroma server (``chroma run`` on 127.0.0.1).

The key store tests (ingest and retrieve, idempotent re-ingestion, changed documents, missing
collection) run against both modes; the server mode also has its own errors (unreachable, not a
Chroma server) and is driven through the wiring (the CRAG graph),
``crag.app.api.ingest_into_store`` and ``crag ingest``. One Chroma server is started for the module,
on a free port with a temporary path, and stopped by PID at the end.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_chroma import Chroma
from langchain_core.embeddings import Embeddings

from crag.documents.loaders import LoadedDocument
from crag.settings.context import Context
from crag.settings.deployment import deployment_with
from crag.settings.run_settings import IngestSettings, RunSettings
from crag.vectorstore.embeddings import load_embeddings
from crag.vectorstore.ingest import QUIET, IngestOptions, chunk_id, ingest_documents, ingest_paths
from crag.vectorstore.pending import PENDING_PREFIX
from crag.vectorstore.store import StoreError, count, open_store, retrieve
from crag_bench.dev_server import free_port
from tests.fakes import CountingEmbeddings, InterruptingEmbeddings
from tests.server_support import ChromaServer, chroma_server
from tests.websearch_server import WebsearchServer

pytestmark = pytest.mark.integration

MODES = ["disk", "server"]

OTTERS = "Sea otters hold hands while they sleep so that they do not drift apart."
BREAD = "Bread is baked from a dough of flour and water; yeast makes the dough rise."
VOLCANO = "Mount Etna is an active volcano on the island of Sicily in Italy."


StoreOpener = Callable[..., Chroma]


@pytest.fixture(scope="module")
def chroma(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChromaServer]:
    with chroma_server(tmp_path_factory.mktemp("chroma_server") / "data") as server:
        yield server


@pytest.fixture
def counting() -> CountingEmbeddings:
    return CountingEmbeddings(load_embeddings("all-MiniLM-L6-v2"))


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def location(mode: str, tmp_path: Path, chroma: ChromaServer) -> dict[str, Any]:
    """Where a store lives in this mode: a directory, or the Chroma server."""
    if mode == "disk":
        return {"path": tmp_path / "store"}
    return {"path": "", "host": chroma.host, "port": chroma.port}


@pytest.fixture
def collection() -> str:
    """A fresh collection name (the server outlives single tests)."""
    return f"docs-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def open_in(location: dict[str, Any], counting: CountingEmbeddings) -> StoreOpener:
    def opener(name: str, *, create: bool, embeddings: Embeddings | None = None) -> Chroma:
        args = dict(location)
        path = args.pop("path")
        return open_store(path, name, embeddings or counting, create=create, **args)

    return opener


def docs(*texts: str, prefix: str = "mem") -> list[LoadedDocument]:
    return [
        LoadedDocument(source=f"{prefix}:{i}", text=text, sha256=str(hash(text)))
        for i, text in enumerate(texts)
    ]


# -- the same tests in both modes -----------------------------------------------------------------


def test_ingest_and_retrieve(open_in: StoreOpener, collection: str) -> None:
    store = open_in(collection, create=True)
    report = ingest_documents(docs(OTTERS, BREAD, VOLCANO), store, QUIET)
    assert report.added == ["mem:0", "mem:1", "mem:2"] and report.chunks_added == 3
    assert count(store) == 3
    best = retrieve(store, "Which animal holds hands when sleeping?", 2)[0]
    assert best == {"text": OTTERS, "source": "mem:0", "chunk": 0, "score": None}
    assert retrieve(store, "Where is Etna?", 1)[0]["source"] == "mem:2"
    # Reopened without create: the collection is there, with its chunks.
    assert count(open_in(collection, create=False)) == 3


def test_second_ingest_embeds_nothing(
    open_in: StoreOpener, collection: str, counting: CountingEmbeddings, tmp_path: Path
) -> None:
    store = open_in(collection, create=True)
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_text(OTTERS)
    (folder / "b.md").write_text(f"# Bread\n\n{BREAD}")
    first = ingest_paths([folder], store, QUIET)
    assert len(first.added) == 2
    embedded, chunks = counting.documents, count(store)
    second = ingest_paths([folder], store, QUIET)
    assert sorted(second.skipped) == sorted(first.added)
    assert second.added == [] and second.replaced == [] and second.chunks_added == 0
    assert counting.documents == embedded, "an unchanged document was embedded again"
    assert count(store) == chunks


def test_changed_document_replaces_its_chunks(open_in: StoreOpener, collection: str) -> None:
    store = open_in(collection, create=True)
    ingest_documents(docs(OTTERS, BREAD), store, QUIET)
    changed = [LoadedDocument(source="mem:1", text=VOLCANO, sha256="new")]
    report = ingest_documents(changed, store, QUIET)
    assert report.replaced == ["mem:1"]
    assert count(store) == 2
    stored = store.get(include=["documents"])["documents"]
    assert BREAD not in stored and VOLCANO in stored


def test_interrupted_ingestions_leave_nothing_partial(
    open_in: StoreOpener, collection: str, counting: CountingEmbeddings, mode: str
) -> None:
    interrupting = InterruptingEmbeddings(counting, interrupt_on=2)
    store = open_in(collection, create=True, embeddings=interrupting)
    long = LoadedDocument(source="mem:long", text="\n\n".join([OTTERS] * 6), sha256="l")
    small = IngestOptions(chunk_size=100, chunk_overlap=0, batch_size=2, progress=False)
    with pytest.raises(KeyboardInterrupt):  # one batch of two chunks written, then Ctrl-C
        ingest_documents([long], store, small)
    assert count(store) == 0

    # Runs killed outright leave their record and partial chunks: one long ago, one just now.
    for source in ("mem:abandoned", "mem:in-flight"):
        partial = {"source": source, "chunk": 3}
        store.add_texts(["partial"], metadatas=[partial], ids=[chunk_id(source, 3)])
    records = {
        PENDING_PREFIX + "killed": json.dumps({"time": 0, "sources": ["mem:abandoned"]}),
        PENDING_PREFIX + "running": json.dumps({"time": time.time(), "sources": ["mem:in-flight"]}),
    }
    store._collection.modify(metadata=records)
    ingest_documents(docs(BREAD), store, QUIET)
    sources = {m["source"] for m in store.get(include=["metadatas"])["metadatas"]}
    if mode == "disk":  # the store's lock rules out another writer: both records are abandoned
        assert sources == {"mem:0"}
    else:  # a recent record may be another machine's ingestion, still writing
        assert sources == {"mem:0", "mem:in-flight"}


def test_missing_collection_is_a_clear_error(
    open_in: StoreOpener, collection: str, mode: str, chroma: ChromaServer, tmp_path: Path
) -> None:
    open_in(collection, create=True)
    with pytest.raises(StoreError) as info:
        open_in("no-such-collection", create=False)
    message = str(info.value)
    assert "'no-such-collection'" in message
    assert repr(collection) in message
    assert "ingest documents into it first" in message
    where = chroma.url if mode == "server" else str((tmp_path / "store").resolve())
    assert where in message


# -- server mode only ---------------------------------------------------------------------------


def test_unreachable_server_is_a_store_error() -> None:
    port = free_port()
    with pytest.raises(StoreError) as info:
        open_store("", "crag", load_embeddings("all-MiniLM-L6-v2"), create=True,
                   host="127.0.0.1", port=port)  # fmt: skip
    message = str(info.value)
    assert f"cannot reach the Chroma server at http://127.0.0.1:{port}" in message
    assert "chroma run --host 127.0.0.1" in message
    assert "Traceback" not in message


def test_a_server_gone_after_the_store_was_opened_is_named(
    tmp_path: Path, counting: CountingEmbeddings
) -> None:
    # A replica's store stays open while its Chroma server stops (an outage): the next write's
    # error names that server, in one line.
    with chroma_server(tmp_path / "data") as gone:
        store = open_store("", "crag", counting, create=True, host="127.0.0.1", port=gone.port)
        where = f"http://127.0.0.1:{gone.port}"
    with pytest.raises(StoreError) as info:
        ingest_documents(docs(OTTERS, prefix="gone"), store, QUIET)
    message = str(info.value)
    assert f"on the Chroma server at {where}" in message, message
    assert "\n" not in message


def test_a_server_that_is_not_chroma_is_a_store_error() -> None:
    embeddings = load_embeddings("all-MiniLM-L6-v2")
    with (
        WebsearchServer() as other,
        pytest.raises(StoreError, match=r"does not answer like a Chroma server \(HTTP 404"),
    ):
        open_store("", "crag", embeddings, create=True, host="127.0.0.1", port=other.port)


def test_graph_retrieves_from_the_chroma_server(chroma: ChromaServer, collection: str) -> None:
    """The real wiring (``DefaultComponents.vectorstore``) opens the server's collection."""
    from crag.app.wiring import DefaultComponents
    from crag.graph.builder import build_graph
    from tests.fakes import FakeComponents, FixedScoreEvaluator, scripted_chat

    deployment = deployment_with(collection=collection, default_corpus=False, **chroma.settings())
    wiring = DefaultComponents()
    with pytest.raises(StoreError, match=rf"no collection '{collection}' in the Chroma server"):
        wiring.vectorstore(RunSettings.combine(Context(), deployment=deployment))

    from crag.app.api import ingest_into_store, inline_document

    report = ingest_into_store(
        [],
        IngestSettings(deployment=deployment_with(collection=collection, **chroma.settings())),
        QUIET,
        documents=[inline_document(OTTERS, source="notes:otters", title="Otters")],
    )
    assert report.added == ["notes:otters"]

    class ServerStore(FakeComponents):
        def vectorstore(self, context: Any) -> Any:
            return wiring.vectorstore(context)

    fakes = ServerStore(
        store=None, scorer=FixedScoreEvaluator({"otters": 0.9}), chat=scripted_chat()
    )
    graph = build_graph(components=fakes, deployment=deployment)
    out = graph.invoke({"question": "Why do otters hold hands?"}, context=Context())
    assert out["action"] == "correct"
    assert out["documents"][0]["source"] == "notes:otters"
    assert out["documents"][0]["text"] == f"Otters\n{OTTERS}"


def test_cli_ingests_into_the_chroma_server(
    chroma: ChromaServer, collection: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from crag.app.cli.commands import main

    (tmp_path / "bread.txt").write_text(BREAD)
    args = [
        "ingest", "--collection", collection,
        "--set", f"chroma_host={chroma.host}", "--set", f"chroma_port={chroma.port}",
        str(tmp_path / "bread.txt"),
    ]  # fmt: skip
    assert main(args) == 0
    assert "1 added" in capsys.readouterr().out
    assert main(args) == 0
    assert "1 unchanged" in capsys.readouterr().out


def test_cli_reports_an_unreachable_server(capsys: pytest.CaptureFixture[str]) -> None:
    from crag.app.cli.commands import main

    port = free_port()
    args = ["ask", "--set", "chroma_host=127.0.0.1", "--set", f"chroma_port={port}", "Who?"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("crag: error: cannot reach the Chroma server at")
