"""Chunk ids and document records: how the store says which documents it holds.

Each chunk's id is ``"{sha1(source)}:{index}"``. Chunk 0 is written last and is the document's
record: its metadata holds the document's ``source`` and ``sha256``, so a document whose chunk 0
is stored is complete, in the version that hash names.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from langchain_chroma import Chroma

from vectorstore.store import StoreError

LOOKUP_BATCH_SIZE = 500
"""Ids or sources per Chroma call when looking documents up or deleting them."""


def chunk_id(source: str, index: int) -> str:
    """Return the deterministic id of chunk ``index`` of ``source``."""
    return f"{hashlib.sha1(source.encode('utf-8')).hexdigest()}:{index}"


def stored_hashes(store: Chroma, sources: Sequence[str]) -> dict[str, str]:
    """Return ``source -> sha256`` for the sources stored complete (via their chunk 0)."""
    found: dict[str, str] = {}
    for start in range(0, len(sources), LOOKUP_BATCH_SIZE):
        batch = sources[start : start + LOOKUP_BATCH_SIZE]
        try:
            result = store.get(ids=[chunk_id(s, 0) for s in batch], include=["metadatas"])
        except Exception as exc:
            raise StoreError(f"cannot read the vector store: {exc}") from exc
        for meta in result.get("metadatas") or []:
            if meta and isinstance(meta.get("source"), str):
                found[meta["source"]] = str(meta.get("sha256", ""))
    return found


def delete_sources(store: Chroma, sources: Sequence[str], what: str) -> None:
    """Delete every chunk of ``sources``; ``what`` names them in the error message."""
    for start in range(0, len(sources), LOOKUP_BATCH_SIZE):
        batch = list(sources[start : start + LOOKUP_BATCH_SIZE])
        try:
            store.delete(where={"source": {"$in": batch}})
        except Exception as exc:
            raise StoreError(f"cannot delete the chunks of {what}: {exc}") from exc
