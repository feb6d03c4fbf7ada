"""A small real store (real embedder, Chroma on disk) shared by the integration tests."""

from __future__ import annotations

from pathlib import Path

from crag.vectorstore.corpus import load_corpus
from crag.vectorstore.embeddings import load_embeddings
from crag.vectorstore.ingest import QUIET, ingest_documents
from crag.vectorstore.store import open_store
from tests.store_copies import store_copy

ANCHORS = ("Mona Lisa", "Leonardo da Vinci", "Louvre", "Paris", "Raphael", "Photosynthesis")


def build_small_store(path: Path, others: int = 60) -> Path:
    """The anchor summaries plus ``others`` more (every 150th title), in a store at ``path``.

    Built once per process for each ``others`` and copied (:mod:`tests.store_copies`): every
    caller gets a store of its own.
    """
    return store_copy(path, f"small-{others}", lambda into: _ingest_small_store(into, others))


def _ingest_small_store(path: Path, others: int) -> None:
    """Ingest the anchor summaries plus ``others`` more (every 150th title) into ``path``."""
    corpus = load_corpus()
    wanted = {f"wikipedia:{title}" for title in ANCHORS}
    chosen = [d for d in corpus if d.source in wanted]
    chosen += [d for d in corpus[::150] if d.source not in wanted][:others]
    store = open_store(path, "crag", load_embeddings(), create=True)
    report = ingest_documents(chosen, store, QUIET)
    assert not report.failed, report.failed
