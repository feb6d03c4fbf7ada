"""Stop an ingestion before the disk holding a local store fills up.

Chroma does not survive a full disk gracefully: a write that meets ``ENOSPC`` fails with
"Error in compaction: Failed to apply logs to the metadata segment", and until space is freed
the store cannot even be read, nor can the interrupted run's partial chunks be removed. So
before each batch, :func:`check_room` compares the free space of the store's filesystem with
what the batch will take, and refuses it, in one sentence, while there is still room left for
the cleanup. After the fact, :func:`full_disk_problem` names a full disk as the cause of a
failed write.

The estimate is measured, not derived: 3,236 chunks of about 830 characters with 64-float
vectors took 22.5 MB on disk (6.9 KB a chunk, about 6 bytes for each byte of text and
metadata: the text, its full-text index, the metadata, the write-ahead log, the HNSW index).
:data:`BYTES_PER_TEXT_BYTE` and :data:`BYTES_PER_VECTOR` cover that with room to spare, for
vectors of up to 1,024 floats.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from langchain_chroma import Chroma

__all__ = [
    "BYTES_PER_TEXT_BYTE",
    "BYTES_PER_VECTOR",
    "RESERVE_BYTES",
    "batch_bytes",
    "check_room",
    "full_disk_problem",
    "store_directory",
]

BYTES_PER_TEXT_BYTE = 8
"""Disk bytes a chunk's text and metadata take per byte, at most (measured: about 6)."""
BYTES_PER_VECTOR = 2 * 1024 * 4
"""Disk bytes one vector takes, at most: 1,024 float32s, in the log and in the index."""
RESERVE_BYTES = 4 * 1024 * 1024
"""Left free for the cleanup of an interrupted run and for SQLite's journal."""


def store_directory(store: Chroma) -> Path | None:
    """The folder a local (persistent) store lives in; ``None`` for a Chroma server's."""
    settings = store._client.get_settings()
    if settings.chroma_server_host or not settings.is_persistent:
        return None
    return Path(settings.persist_directory) if settings.persist_directory else None


def batch_bytes(texts: Sequence[str], metadatas: Sequence[Mapping[str, Any]]) -> int:
    """About the most disk space writing these chunks takes."""
    text = sum(len(t.encode("utf-8", "replace")) for t in texts)
    meta = sum(len(json.dumps(m, default=str)) for m in metadatas)
    return (text + meta) * BYTES_PER_TEXT_BYTE + len(texts) * BYTES_PER_VECTOR


def _megabytes(count: int) -> str:
    return f"{count / 1_000_000:.1f} MB"


def check_room(
    store: Chroma, texts: Sequence[str], metadatas: Sequence[Mapping[str, Any]]
) -> str | None:
    """Why the disk has no room for these chunks, or ``None`` when it has (or is not local)."""
    directory = store_directory(store)
    if directory is None:
        return None
    free = shutil.disk_usage(directory).free
    needed = batch_bytes(texts, metadatas) + RESERVE_BYTES
    if free >= needed:
        return None
    return (
        f"the disk holding the vector store {directory} has {_megabytes(free)} free and the "
        f"next {len(texts)} chunks need about {_megabytes(needed)}; free some space and "
        "ingest again (what this run wrote is removed, the documents stored before are kept)"
    )


def full_disk_problem(store: Chroma) -> str | None:
    """A sentence naming a full disk as the cause of a failed write, if the disk is full."""
    directory = store_directory(store)
    if directory is None:
        return None
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        return None
    if free >= RESERVE_BYTES:
        return None
    return (
        f"the disk holding the vector store {directory} is full ({_megabytes(free)} free); "
        "free some space: the next ingestion removes what this one left unfinished"
    )
