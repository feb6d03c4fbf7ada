"""What one ingestion may cost, and what a cancelled or killed one leaves.

Real files on disk, real Chroma, the real ``ingest`` graph (in process, and cancelled through
``ainvoke``), ``crag ingest`` in process and in a subprocess killed with SIGKILL; the hash embedder
stands in for MiniLM (retrieval quality is not what these tests check). Limits are set the way an
operator sets them: ``CRAG_*`` environment variables.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_chroma import Chroma
from langgraph.graph.state import CompiledStateGraph

from crag.app.cli.commands import main
from crag.core.cancellation import RunCancelledError, cancellation_scope
from crag.graph.ingest_graph import build_ingest_graph
from crag.nodes.ingest import InvalidIngestInputError
from crag.nodes.ingest_state import IngestInput, IngestOutput, IngestState
from crag.settings.context import IngestContext
from crag.settings.deployment import deployment_with
from crag.settings.run_settings import IngestSettings
from crag.vectorstore.configured_store import ingest_into_store, inline_document
from crag.vectorstore.hybrid import search
from crag.vectorstore.ingest_options import QUIET
from crag.vectorstore.locking import store_write_lock
from crag.vectorstore.pending import PENDING_PREFIX, mark_pending
from crag.vectorstore.records import chunk_id
from crag.vectorstore.store import close_stores, open_store
from crag.vectorstore.vector_memo import VectorMemo
from tests.document_factory import write_csv, write_pptx
from tests.hash_embeddings import HashEmbeddings
from tests.hostile_documents import write_many_paragraphs_docx, write_repeated_page_pdf

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
COLLECTION = "limits"
OTTERS = "Otters hold hands while they sleep so that they do not drift apart."
LIMIT_VARIABLES = (
    "CRAG_INGEST_MIN_CHUNK_SIZE",
    "CRAG_INGEST_MAX_CHUNKS",
    "CRAG_MAX_FILE_PAGES",
    "CRAG_MAX_FILE_PARAGRAPHS",
    "CRAG_MAX_FILE_CHARS",
    "CRAG_INGEST_ROOT",
    "CRAG_INGEST_RUN_REPLACE",
)

IngestGraph = CompiledStateGraph[IngestState, IngestContext, IngestInput, IngestOutput]


class SlowEmbeddings(HashEmbeddings):
    """The hash embedder, ``delay`` seconds per batch, counting calls thread-safely."""

    def __init__(self, delay: float = 0.0) -> None:
        super().__init__(delay=delay)
        self.guard = threading.Lock()
        self.call_times: list[float] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        with self.guard:
            self.call_times.append(time.monotonic())
        return super().embed_documents(texts)


@pytest.fixture
def embedder(monkeypatch: pytest.MonkeyPatch) -> SlowEmbeddings:
    """Every store the settings name is opened with this embedder; no limit variable set."""
    import crag.vectorstore.embeddings

    shared = SlowEmbeddings()
    monkeypatch.setattr(crag.vectorstore.embeddings, "locked_embeddings", lambda name: shared)
    for name in LIMIT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return shared


@pytest.fixture
def settings(tmp_path: Path) -> IngestSettings:
    return settings_for(tmp_path)


def settings_for(
    tmp_path: Path, chunk_size: int = 1000, chunk_overlap: int = 100
) -> IngestSettings:
    """The test store's settings, deployment settings read from the environment now."""
    return IngestSettings(
        chunk_size=chunk_size,
        chunk_overlap=chunk_overlap,
        deployment=deployment_with(store_path=str(tmp_path / "store"), collection=COLLECTION),
    )


def served(settings: IngestSettings) -> IngestGraph:
    """The ``ingest`` graph as the server builds it, on the test's store (the operator's other
    settings read from the environment now)."""
    # The test's folder stands for the upload folder: with no ingest root, the only place a
    # served run reads files from.
    deployment = deployment_with(
        store_path=settings.deployment.store_path,
        collection=settings.deployment.collection,
        upload_dir=str(Path(settings.deployment.store_path).parent),
    )
    return build_ingest_graph(deployment=deployment)


def chunking(settings: IngestSettings) -> IngestContext:
    """What a run of the ``ingest`` graph sends: its chunking only."""
    return IngestContext(chunk_size=settings.chunk_size, chunk_overlap=settings.chunk_overlap)


def stored(settings: IngestSettings) -> Chroma:
    return open_store(settings.deployment.store_path, COLLECTION, HashEmbeddings(), create=False)


def sources_in(settings: IngestSettings) -> set[str]:
    metadatas = stored(settings).get(include=["metadatas"])["metadatas"]
    return {str(meta["source"]) for meta in metadatas}


def words(count: int) -> str:
    """``count`` distinct words in sentences: many chunks at a small chunk size."""
    return " ".join(f"word{i}." if i % 12 == 11 else f"word{i}" for i in range(count))


# -- small files that stand for huge documents: every ingestion, the operator's too --------


def test_a_pdf_naming_one_page_thousands_of_times_is_refused_quickly(
    tmp_path: Path,
    embedder: SlowEmbeddings,
    settings: IngestSettings,
    capsys: pytest.CaptureFixture[str],
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    pdf = write_repeated_page_pdf(docs / "pages.pdf", 20_000)  # 120 KB; the default is 5,000
    assert pdf.stat().st_size < 200_000
    (docs / "otters.md").write_text(OTTERS)

    started = time.monotonic()
    code = main(
        ["ingest", "--store", settings.deployment.store_path, "--collection", COLLECTION, str(docs)]
    )
    elapsed = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 0  # the other file is stored
    assert f"failed: {pdf}: refused: 20,000 pages, more than the 5,000 read from one file " in err
    assert "(setting max_file_pages, environment variable CRAG_MAX_FILE_PAGES)" in err
    assert elapsed < 30, f"took {elapsed:.0f} s: the pages were read before being counted"
    assert sources_in(settings) == {str((docs / "otters.md").absolute())}


def test_a_word_file_of_too_many_paragraphs_is_refused_before_they_are_read(
    tmp_path: Path,
    embedder: SlowEmbeddings,
    settings: IngestSettings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CRAG_MAX_FILE_PARAGRAPHS", "10000")
    docs = tmp_path / "docs"
    docs.mkdir()
    big = write_many_paragraphs_docx(docs / "many.docx", 60_000)
    fine = write_many_paragraphs_docx(docs / "fine.docx", 3, text="Beavers build dams.")

    started = time.monotonic()
    payload: Any = {"paths": [str(docs)]}
    settings = settings_for(tmp_path)
    report = served(settings).invoke(payload, context=chunking(settings))
    elapsed = time.monotonic() - started
    failed = {f["source"]: f["error"] for f in report["failed"]}
    assert failed == {
        str(big): f"{big}: refused: more than 10,000 paragraphs, the most read from one file "
        "(setting max_file_paragraphs, environment variable CRAG_MAX_FILE_PARAGRAPHS)"
    }
    assert report["added"] == [str(fine.absolute())]
    assert elapsed < 20, f"took {elapsed:.0f} s"


def test_too_many_characters_rows_or_slides_are_refused_one_file_at_a_time(
    tmp_path: Path,
    embedder: SlowEmbeddings,
    settings: IngestSettings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CRAG_MAX_FILE_CHARS", "5000")
    monkeypatch.setenv("CRAG_MAX_FILE_PARAGRAPHS", "3")
    monkeypatch.setenv("CRAG_MAX_FILE_PAGES", "2")
    docs = tmp_path / "docs"
    docs.mkdir()
    long_text = docs / "long.txt"
    long_text.write_text(words(2000))  # about 15,000 characters
    huge_text = docs / "huge.md"
    huge_text.write_text("x" * 30_000)  # more bytes than 5,000 characters can take: unread
    rows = write_csv(docs / "cities.csv")  # four rows and a header
    slides = write_pptx(docs / "deck.pptx")  # three slides
    (docs / "otters.md").write_text(OTTERS)

    report = ingest_into_store([docs], settings_for(tmp_path), QUIET)
    failed = dict(report.failed)
    assert set(failed) == {str(p) for p in (long_text, huge_text, rows, slides)}
    assert "more than 5,000 characters of text" in failed[str(long_text)]
    assert "30,000 bytes of text, more than the 5,000 characters" in failed[str(huge_text)]
    assert "more than 3 rows" in failed[str(rows)]
    assert "3 slides, more than the 2 read from one file" in failed[str(slides)]
    for error in failed.values():
        assert "\n" not in error and "environment variable CRAG_MAX_FILE_" in error
    assert report.added == [str((docs / "otters.md").absolute())]


# -- what one served run may cost ------------------------------------------------------------


def test_a_served_run_below_the_minimum_chunk_size_is_refused(
    tmp_path: Path, embedder: SlowEmbeddings
) -> None:
    payload: Any = {"documents": [{"text": words(500), "source": "mem:tiny"}]}
    graph = served(settings_for(tmp_path))
    with pytest.raises(InvalidIngestInputError) as refused:
        graph.invoke(payload, context=IngestContext(chunk_size=1, chunk_overlap=0))
    assert str(refused.value) == (
        "chunk_size 1 is below 100, the smallest this server ingests with "
        "(setting ingest_min_chunk_size)"
    )
    assert embedder.calls == 0
    report = graph.invoke(payload, context=IngestContext(chunk_size=100, chunk_overlap=0))
    assert report["added"] == ["mem:tiny"]


def test_a_served_run_past_the_chunk_limit_is_refused_before_embedding(
    tmp_path: Path,
    embedder: SlowEmbeddings,
    settings: IngestSettings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CRAG_INGEST_MAX_CHUNKS", "40")
    settings = settings_for(tmp_path, chunk_size=100, chunk_overlap=0)
    graph, run = served(settings), chunking(settings)
    (tmp_path / "otters.md").write_text(OTTERS)
    # 30 chunks of files and 30 of inline documents: 60 in the run, past 40
    notes = tmp_path / "notes.txt"
    notes.write_text(words(400))
    payload: Any = {
        "paths": [str(tmp_path / "notes.txt")],
        "documents": [{"text": words(400).replace("word", "term"), "source": "mem:terms"}],
    }
    with pytest.raises(InvalidIngestInputError, match="ingest_max_chunks") as refused:
        graph.invoke(payload, context=run)
    message = str(refused.value)
    assert message.startswith("refused: this run would embed more than 40 chunks")
    assert "environment variable CRAG_INGEST_MAX_CHUNKS" in message and "\n" not in message
    # the files come first: refused at the inline document, the run keeps its file
    assert sources_in(settings) == {str(notes)}

    # One document alone past the limit: nothing embedded at all.
    before = embedder.documents
    with pytest.raises(InvalidIngestInputError, match="ingest_max_chunks"):
        graph.invoke({"documents": [{"text": words(2000)}]}, context=run)
    assert embedder.documents == before

    # The operator (crag ingest, the Python API) is not bound by it.
    report = ingest_into_store(
        [], settings, QUIET, documents=[inline_document(words(2000), source="mem:big")]
    )
    assert report.added == ["mem:big"] and report.chunks_added > 40


# -- a cancelled run stops and leaves nothing -------------------------------------------------


def pending_records(settings: IngestSettings) -> list[str]:
    metadata = stored(settings)._collection.metadata or {}
    return [key for key in metadata if key.startswith(PENDING_PREFIX)]


def test_a_cancelled_served_run_stops_at_once_and_leaves_nothing(
    embedder: SlowEmbeddings, settings: IngestSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The served graph run through ``ainvoke`` (as the LangGraph server runs it), cancelled."""
    monkeypatch.setenv("CRAG_INGEST_MAX_CHUNKS", "100000")
    embedder.delay = 1.0  # per batch of 512 chunks: about 10 s for the whole document
    graph, run = served(settings), IngestContext(chunk_size=100, chunk_overlap=0)
    text = words(90_000)  # about 5,000 chunks of 100 characters: ten batches
    payload: Any = {"documents": [{"text": text, "source": "mem:long"}]}
    # the store exists (an earlier run), so the lock below names the same store
    first: Any = {"documents": [{"text": OTTERS, "source": "mem:otters"}]}
    assert graph.invoke(first, context=run)["added"] == ["mem:otters"]
    embedder.call_times.clear()

    async def cancel_after_two_batches() -> float:
        task = asyncio.create_task(graph.ainvoke(payload, context=run))
        while len(embedder.call_times) < 2:
            await asyncio.sleep(0.01)
        task.cancel()
        cancelled_at = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await task
        return cancelled_at

    cancelled_at = asyncio.run(cancel_after_two_batches())
    # The worker thread holds the store's write lock until it has stopped and cleaned up.
    with store_write_lock(stored(settings)):
        stopped_after = time.monotonic() - cancelled_at
    # Uncancelled, the eight batches left would take 8 s; stopped, the batch in flight and the
    # removal of the partial chunks are all that is left (about 1.3 s, 2.3 s on a loaded machine).
    assert stopped_after < 4.0, f"the run went on for {stopped_after:.1f} s after its cancel"
    assert len(embedder.call_times) <= 3, "batches were embedded after the cancel"
    time.sleep(0.5)
    assert len(embedder.call_times) <= 3
    assert sources_in(settings) == {"mem:otters"}, "the cancelled document's chunks stayed"
    assert pending_records(settings) == []


def test_a_run_cancelled_through_its_token_stops_and_leaves_nothing(
    tmp_path: Path, embedder: SlowEmbeddings, settings: IngestSettings
) -> None:
    """What the warm server and ``crag ask``'s Ctrl-C do: cancel the run's token."""
    embedder.delay = 0.2
    big = tmp_path / "big.txt"
    big.write_text(words(60_000))
    settings = settings_for(tmp_path, chunk_size=100, chunk_overlap=0)
    outcome: list[BaseException] = []

    def ingest() -> None:
        with cancellation_scope() as token:
            tokens.append(token)
            try:
                ingest_into_store([big], settings, QUIET)
            except BaseException as exc:  # noqa: BLE001 - what the run ended with is the point
                outcome.append(exc)

    tokens: list[Any] = []
    worker = threading.Thread(target=ingest)
    worker.start()
    while len(embedder.call_times) < 2:
        time.sleep(0.01)
    tokens[0].cancel()
    worker.join(timeout=5)
    assert not worker.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], RunCancelledError)
    assert len(embedder.call_times) <= 3
    assert sources_in(settings) == set() and pending_records(settings) == []


# -- a killed run: its half-written document is never searched --------------------------------

KILLED_CRAG_INGEST = """
import os, sys, time
from pathlib import Path
import crag.vectorstore.embeddings
from tests.hash_embeddings import HashEmbeddings

class Stalling(HashEmbeddings):
    def embed_documents(self, texts):
        if self.calls == 1:  # the first batch is written: say so, and wait to be killed
            Path(sys.argv[3]).write_text("written")
            time.sleep(120)
        return super().embed_documents(texts)

shared = Stalling()
crag.vectorstore.embeddings.locked_embeddings = lambda name: shared
from crag.app.cli.commands import main
sys.exit(main(["ingest", "--store", sys.argv[1], "--collection", "limits", sys.argv[2]]))
"""


def crag_ingest(settings: IngestSettings, path: Path) -> int:
    """``crag ingest PATH`` into the test's store, in process."""
    return main(
        ["ingest", "--store", settings.deployment.store_path, "--collection", COLLECTION, str(path)]
    )


@pytest.fixture
def killed_ingest(
    tmp_path: Path, settings: IngestSettings, embedder: SlowEmbeddings
) -> Iterator[Path]:
    """``crag ingest`` of a big file killed with SIGKILL once its first batch is written.

    Before, the operator stored one complete document, ``otters.md``. Yields the big file.
    """
    otters = tmp_path / "otters.md"
    otters.write_text(OTTERS + " Zorblax are the otters of the moon.")
    assert (
        main(
            [
                "ingest",
                "--store",
                settings.deployment.store_path,
                "--collection",
                COLLECTION,
                str(otters),
            ]
        )
        == 0
    )
    big = tmp_path / "zorblax.txt"
    # about 1,300 chunks of the default 1,000 characters: three batches
    facts = (f"Zorblax fact {i}: the zorblax sleeps {i % 20} hours." for i in range(30_000))
    big.write_text("\n\n".join(facts))
    marker = tmp_path / "written"
    close_stores()
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            KILLED_CRAG_INGEST,
            settings.deployment.store_path,
            str(big),
            str(marker),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), child.communicate(timeout=5)[0].decode()[-2000:]
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    assert child.returncode == -signal.SIGKILL
    yield big
    close_stores()


MODES = ("dense", "lexical", "hybrid")
ZORBLAX = "How many hours does the zorblax sleep?"


def test_a_killed_ingest_leaves_chunks_that_no_search_returns(
    killed_ingest: Path, settings: IngestSettings
) -> None:
    store = stored(settings)
    big = str(killed_ingest.absolute())
    left = store.get(where={"source": big}, include=[])["ids"]
    assert len(left) == 512 and chunk_id(big, 0) not in left  # half-written: no chunk 0
    otters = str(killed_ingest.parent / "otters.md")
    for mode in MODES:
        hits = search(store, ZORBLAX, 10, mode=mode, memo=VectorMemo())
        assert [hit.metadata["source"] for hit in hits] == [otters], mode

    # The next ingestion repairs the store; the file, ingested whole, is searched again.
    assert crag_ingest(settings, Path(big)) == 0
    for mode in MODES:
        hits = search(store, ZORBLAX, 10, mode=mode, memo=VectorMemo())
        assert big in {hit.metadata["source"] for hit in hits}, mode


def test_a_recorded_document_is_searched_once_its_chunk_zero_is_stored(
    embedder: SlowEmbeddings, settings: IngestSettings
) -> None:
    """A record names the documents of a batch; those the batch completed are not hidden."""
    ingest_into_store(
        [],
        settings,
        QUIET,
        documents=[
            inline_document("Zorblax sleep all day.", source="mem:done"),
            inline_document("Zorblax hum at night.", source="mem:half"),
        ],
    )
    store = stored(settings)
    store.delete(ids=[chunk_id("mem:half", 0)])
    store.add_texts(["Zorblax hum at night, loudly."], [{"source": "mem:half", "chunk": 1}])
    mark_pending(store, "killed-run", ["mem:done", "mem:half"])
    hits = search(store, "zorblax", 10, memo=VectorMemo())
    assert [hit.metadata["source"] for hit in hits] == ["mem:done"]
