"""One writer at a time per store on a Chroma server, across processes (store_write_lock).

A real Chroma server (``chroma run`` on 127.0.0.1) and a real PostgreSQL (``pgserver``, on its
Unix socket) named by ``CRAG_THREADS_DB``, as server replicas share them. Two processes
released at once write the same documents (``ingest_documents``) or fill the default corpus
(``ensure_default_corpus``, as two replicas on first use) into one collection: the store ends
with each chunk once and only one process reports the documents added; the other waited, then
found them stored and unchanged. A writer killed with SIGKILL while it holds the lock frees it,
and a waiting writer goes on. An unreachable shared database is a :class:`StoreError` that
names it without its password. The embedder is a hashing one that takes half a second per
batch, so that the writers' windows overlap.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_chroma import Chroma
from langchain_core.embeddings import Embeddings

from crag.documents.loaders import LoadedDocument
from crag.vectorstore.locking import store_write_lock
from crag.vectorstore.shared_database import THREADS_DB_ENV
from crag.vectorstore.store import StoreError, open_store
from tests.server_support import ChromaServer, chroma_server

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]

TEXTS = [
    "Sea otters hold hands while they sleep so that they do not drift apart.",
    "Bread is baked from a dough of flour and water; yeast makes the dough rise.",
    "Mount Etna is an active volcano on the island of Sicily in Italy.",
    "The Danube flows through ten countries before reaching the Black Sea.",
]


class SlowHashEmbeddings(Embeddings):
    """16 numbers from a text's SHA-256; half a second per batch of documents."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        time.sleep(0.5)
        return [self.embed_query(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        digest = hashlib.sha256(text.encode("utf-8")).digest()
        return [byte / 255.0 + 0.01 for byte in digest[:16]]


def documents() -> list[LoadedDocument]:
    return [
        LoadedDocument(
            source=f"mem:doc-{i}", text=text, sha256=hashlib.sha256(text.encode()).hexdigest()
        )
        for i, text in enumerate(TEXTS)
    ]


def open_collection(host: str, port: int, collection: str) -> Chroma:
    return open_store(
        "", collection, SlowHashEmbeddings(), create=True, host=host, port=port, writable=True
    )


CHILD = """
import json, os, pathlib, sys, time
database, host, port, collection, mode, folder = sys.argv[1:]
os.environ["CRAG_THREADS_DB"] = database
from tests.integration.test_shared_write_lock import documents, open_collection
from crag.vectorstore.corpus import ensure_default_corpus
from crag.vectorstore.ingest import QUIET, ingest_documents
from crag.vectorstore.locking import store_write_lock
store = open_collection(host, int(port), collection)
folder = pathlib.Path(folder)
(folder / f"ready-{os.getpid()}").write_text("")
while not (folder / "go").exists():
    time.sleep(0.02)
if mode == "hold":
    with store_write_lock(store):
        (folder / "held").write_text("")
        time.sleep(120)
elif mode == "corpus":
    report = ensure_default_corpus(store, limit=6, progress=False)
    found = None if report is None else {"added": report.added, "skipped": report.skipped}
    print(json.dumps(found))
else:
    report = ingest_documents(documents(), store, QUIET)
    print(json.dumps({"added": report.added, "skipped": report.skipped}))
"""


@pytest.fixture(scope="module")
def chroma(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChromaServer]:
    with chroma_server(tmp_path_factory.mktemp("chroma_server") / "data") as server:
        yield server


@pytest.fixture
def collection() -> str:
    return f"shared-{uuid.uuid4().hex[:10]}"


def start_writers(
    count: int, mode: str, postgres_uri: str, chroma: ChromaServer, collection: str, folder: Path
) -> list[subprocess.Popen[str]]:
    """``count`` writer processes, released together once each has opened the store."""
    folder.mkdir(parents=True, exist_ok=True)
    args = [postgres_uri, chroma.host, str(chroma.port), collection, mode, str(folder)]
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, *args],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO), "ANONYMIZED_TELEMETRY": "False"},
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]
    deadline = time.monotonic() + 120
    while len(list(folder.glob("ready-*"))) < count:
        assert all(writer.poll() is None for writer in writers), "a writer ended early"
        assert time.monotonic() < deadline, "the writers never opened the store"
        time.sleep(0.05)
    (folder / "go").write_text("")
    return writers


def reports(writers: list[subprocess.Popen[str]]) -> list[dict[str, list[str]] | None]:
    found = []
    for writer in writers:
        out, _ = writer.communicate(timeout=180)
        assert writer.returncode == 0
        found.append(json.loads(out.strip().splitlines()[-1]))
    return found


def stored_sources(chroma: ChromaServer, collection: str) -> tuple[list[str], list[str]]:
    """The ids of the collection's chunks and the source of each."""
    result = open_collection(chroma.host, chroma.port, collection).get(include=["metadatas"])
    return list(result["ids"]), [str(meta["source"]) for meta in result["metadatas"] if meta]


def test_two_processes_ingesting_the_same_files_store_and_report_them_once(
    postgres_uri: str, chroma: ChromaServer, collection: str, tmp_path: Path
) -> None:
    writers = start_writers(2, "ingest", postgres_uri, chroma, collection, tmp_path / "sync")
    first, second = reports(writers)
    sources = sorted(doc.source for doc in documents())
    assert first is not None and second is not None
    added = [sorted(report["added"]) for report in (first, second)]
    assert sorted(added) == [[], sources], (first, second)
    skipped = [sorted(report["skipped"]) for report in (first, second)]
    assert sorted(skipped) == [[], sources]
    ids, stored = stored_sources(chroma, collection)
    assert len(ids) == len(set(ids)) == len(TEXTS)
    assert sorted(stored) == sources


def test_two_replicas_filling_the_default_corpus_write_it_once(
    postgres_uri: str, chroma: ChromaServer, collection: str, tmp_path: Path
) -> None:
    writers = start_writers(2, "corpus", postgres_uri, chroma, collection, tmp_path / "sync")
    found = reports(writers)
    filled = [report for report in found if report is not None]
    assert len(filled) == 1, found
    assert len(filled[0]["added"]) == 6 and filled[0]["skipped"] == []
    ids, stored = stored_sources(chroma, collection)
    assert len(ids) == len(set(ids))
    assert sorted(set(stored)) == sorted(filled[0]["added"])


def test_a_killed_writer_frees_the_store_and_a_waiting_writer_goes_on(
    postgres_uri: str,
    chroma: ChromaServer,
    collection: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv(THREADS_DB_ENV, postgres_uri)
    folder = tmp_path / "sync"
    (holder,) = start_writers(1, "hold", postgres_uri, chroma, collection, folder)
    try:
        deadline = time.monotonic() + 60
        while not (folder / "held").exists():
            assert holder.poll() is None and time.monotonic() < deadline, "never held the lock"
            time.sleep(0.05)
        store = open_collection(chroma.host, chroma.port, collection)
        acquired: list[float] = []

        def write() -> None:
            with store_write_lock(store):
                acquired.append(time.monotonic())

        waiter = threading.Thread(target=write)
        with caplog.at_level(logging.INFO, logger="crag.vectorstore.advisory_lock"):
            waiter.start()
            time.sleep(1.5)
            assert acquired == [] and waiter.is_alive(), "the writer did not wait for the holder"
            killed_at = time.monotonic()
            os.kill(holder.pid, signal.SIGKILL)
            waiter.join(timeout=30)
        assert acquired and acquired[0] > killed_at, "the waiting writer never went on"
        assert any("waiting for another process writing" in r.getMessage() for r in caplog.records)
    finally:
        if holder.poll() is None:
            os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)


def test_an_unreachable_shared_database_is_a_store_error_without_its_password(
    chroma: ChromaServer, collection: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg  # noqa: F401 - missing, the test fails: it never skips

    monkeypatch.setenv(
        THREADS_DB_ENV, f"postgresql://crag:s3cret@/crag?host={tmp_path / 'nowhere'}"
    )
    store = open_collection(chroma.host, chroma.port, collection)
    with pytest.raises(StoreError) as raised, store_write_lock(store):
        pass
    assert "cannot hold crag's lock" in str(raised.value)
    assert "s3cret" not in str(raised.value)
