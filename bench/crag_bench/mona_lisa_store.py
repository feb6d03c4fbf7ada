"""The small store the server tests and ``make agent-chat-ui`` ask the README's question on.

The Mona Lisa summary of the bundled corpus and :data:`OTHER_DOCUMENTS` unrelated ones, with
real embeddings: one passage answers the question, the rest compete with it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["MONA_LISA", "OFF_TOPIC_WORDS", "OTHER_DOCUMENTS", "ingest_mona_lisa_store"]

MONA_LISA = "wikipedia:Mona Lisa"
OTHER_DOCUMENTS = 40
OFF_TOPIC_WORDS = ("paint", "leonardo", "nitrogen")
"""Other summaries mentioning these are left out, so that the store holds exactly one passage
about the painting (the 135M generator is easily led astray by another painter) and nothing
about nitrogen (the unanswerable question must stay unanswerable)."""


def ingest_mona_lisa_store(path: Path) -> tuple[Any, int]:
    """Ingest the store into a new one at ``path``.

    Returns the ingestion report, and how many Mona Lisa summaries the corpus holds (1).
    """
    from crag.vectorstore.corpus import load_corpus
    from crag.vectorstore.embeddings import load_embeddings
    from crag.vectorstore.ingest import QUIET, ingest_documents
    from crag.vectorstore.store import open_store

    docs = load_corpus()
    mona = [d for d in docs if d.source == MONA_LISA]
    unrelated = [
        d
        for d in docs
        if d.source != MONA_LISA and not any(w in d.text.lower() for w in OFF_TOPIC_WORDS)
    ]
    others = unrelated[:: len(unrelated) // OTHER_DOCUMENTS][:OTHER_DOCUMENTS]
    store = open_store(str(path), "crag", load_embeddings("all-MiniLM-L6-v2"), create=True)
    return ingest_documents(mona + others, store, QUIET), len(mona)
