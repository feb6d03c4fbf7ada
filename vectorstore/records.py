"""Chunk ids and document records: how the store says which documents it holds, and whose.

Each chunk's id is ``"{sha1(source)}:{index}"``. Chunk 0 is written last and is the document's
record: its metadata holds the document's ``source``, ``sha256`` and ``writer``, so a document
whose chunk 0 is stored is complete, in the version that hash names.

``writer`` says who stored the document: ``"operator"`` (``crag ingest``, the Python API, the
bundled corpus) or ``"served"`` (a run of the served ``ingest`` graph). A served run may
replace or remove only what served runs wrote, unless the operator allows more (see
:class:`~crag.vectorstore.sources.Writer`). Chunks stored before the field existed have none: they
count as the operator's, so upgrading never hands an operator document to the server's clients.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_chroma import Chroma

from crag.vectorstore.sources import writer_of
from crag.vectorstore.store_base import StoreError

LOOKUP_BATCH_SIZE = 500
"""Ids or sources per Chroma call when looking documents up or deleting them."""


@dataclass(frozen=True)
class StoredRecord:
    """What a stored document's chunk 0 says: its version, who wrote it, and all its metadata."""

    sha256: str
    writer: str
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """Chunk 0's metadata as stored (its scope labels, for :mod:`crag.vectorstore.scope`)."""


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
                found[meta["source"]] = StoredRecord(
                    str(meta.get("sha256", "")), writer_of(meta), dict(meta)
                )
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


def update_metadata(
    store: Chroma,
    sources: Sequence[str],
    patch: Callable[[Mapping[str, Any]], Mapping[str, Any]],
    what: str,
) -> None:
    """Give every chunk of ``sources`` the metadata ``patch`` makes of its own.

    Nothing is embedded: text and vectors stay as they are. ``what`` names the change in errors.
    """
    for start in range(0, len(sources), LOOKUP_BATCH_SIZE):
        batch = list(sources[start : start + LOOKUP_BATCH_SIZE])
        where: dict[str, Any] = {"source": {"$in": batch}}
        try:
            found = store.get(where=where, include=["metadatas"])
            if found["ids"]:
                metadatas = [patch(meta or {}) for meta in found["metadatas"] or []]
                store._collection.update(ids=found["ids"], metadatas=metadatas)
        except Exception as exc:
            raise StoreError(f"cannot {what.format(count=len(batch))}: {exc}") from exc


def set_writer(store: Chroma, sources: Sequence[str], writer: str) -> None:
    """Record ``writer`` on every chunk of ``sources``; their text and vectors stay as they are."""
    update_metadata(
        store,
        sources,
        lambda meta: {**meta, "writer": writer},
        "record who stored {count} documents",
    )


SCAN_PAGE_SIZE = 5000
"""Chunks per Chroma call when a whole collection is read."""


def scan_pages(
    collection: Any, include: list[str], what: str, page_size: int = SCAN_PAGE_SIZE
) -> Iterator[Mapping[str, Any]]:
    """Every chunk of ``collection`` (a Chroma collection or store), one ``get`` page at a time.

    Raises:
        StoreError: A page cannot be read; ``what`` says what was being read.
    """
    offset = 0
    while True:
        try:
            page = collection.get(include=include, limit=page_size, offset=offset)
        except Exception as exc:
            raise StoreError(f"cannot read {what}: {exc}") from exc
        yield page
        if len(page["ids"]) < page_size:
            return
        offset += page_size
