"""Chunk ids and document records: how the store says which documents it holds, and whose.

Each chunk's id is ``"{sha1(source)}:{index}"``. Chunk 0 is written last and is the document's
record: its metadata holds the document's ``source``, ``sha256`` and ``writer``, so a document
whose chunk 0 is stored is complete, in the version that hash names.

``writer`` says who stored the document: ``"operator"`` (``crag ingest``, the Python API, the
bundled corpus) or ``"served"`` (a run of the served ``ingest`` graph). A served run may
replace or remove only what served runs wrote, unless the operator allows more (see
:class:`~vectorstore.sources.Writer`). Chunks stored before the field existed have none: they
count as the operator's, so upgrading never hands an operator document to the server's clients.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_chroma import Chroma

from vectorstore.sources import writer_of
from vectorstore.store import StoreError

LOOKUP_BATCH_SIZE = 500
"""Ids or sources per Chroma call when looking documents up or deleting them."""


@dataclass(frozen=True)
class StoredRecord:
    """What a stored document's chunk 0 says: its version and who wrote it."""

    sha256: str
    writer: str


def chunk_id(source: str, index: int) -> str:
    """Return the deterministic id of chunk ``index`` of ``source``."""
    return f"{hashlib.sha1(source.encode('utf-8')).hexdigest()}:{index}"


def stored_records(store: Chroma, sources: Sequence[str]) -> dict[str, StoredRecord]:
    """Return ``source -> record`` for the sources stored complete (via their chunk 0)."""
    found: dict[str, StoredRecord] = {}
    for start in range(0, len(sources), LOOKUP_BATCH_SIZE):
        batch = sources[start : start + LOOKUP_BATCH_SIZE]
        try:
            result = store.get(ids=[chunk_id(s, 0) for s in batch], include=["metadatas"])
        except Exception as exc:
            raise StoreError(f"cannot read the vector store: {exc}") from exc
        for meta in result.get("metadatas") or []:
            if meta and isinstance(meta.get("source"), str):
                found[meta["source"]] = StoredRecord(str(meta.get("sha256", "")), writer_of(meta))
    return found


def stored_hashes(store: Chroma, sources: Sequence[str]) -> dict[str, str]:
    """Return ``source -> sha256`` for the sources stored complete (via their chunk 0)."""
    return {source: record.sha256 for source, record in stored_records(store, sources).items()}


def delete_sources(store: Chroma, sources: Sequence[str], what: str) -> None:
    """Delete every chunk of ``sources``; ``what`` names them in the error message."""
    for start in range(0, len(sources), LOOKUP_BATCH_SIZE):
        batch = list(sources[start : start + LOOKUP_BATCH_SIZE])
        try:
            store.delete(where={"source": {"$in": batch}})
        except Exception as exc:
            raise StoreError(f"cannot delete the chunks of {what}: {exc}") from exc


def set_writer(store: Chroma, sources: Sequence[str], writer: str) -> None:
    """Record ``writer`` on every chunk of ``sources``; their text and vectors stay as they are."""
    for start in range(0, len(sources), LOOKUP_BATCH_SIZE):
        batch = list(sources[start : start + LOOKUP_BATCH_SIZE])
        where: dict[str, Any] = {"source": {"$in": batch}}
        try:
            found = store.get(where=where, include=["metadatas"])
            metadatas: list[Mapping[str, Any]] = [
                {**(meta or {}), "writer": writer} for meta in found["metadatas"] or []
            ]
            if found["ids"]:
                store._collection.update(ids=found["ids"], metadatas=metadatas)
        except Exception as exc:
            raise StoreError(f"cannot record who stored {len(batch)} documents: {exc}") from exc
