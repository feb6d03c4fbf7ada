"""Documents being written, recorded in the collection so an interrupted ingest can be undone.

A document's chunks are written in batches, chunk 0 last: chunk 0 is the document's record (its
SHA-256 says which version is stored), so a document without chunk 0 is incomplete. Before each
batch, the writer records in the collection's metadata (key ``crag:pending:RUN``) the sources
whose chunks it is writing and has not finished. When a run is interrupted (Ctrl-C, a crash,
the machine going down) that record stays behind, and the next writer removes every chunk of
those sources that never got their chunk 0: the store is left as it was before those documents,
except that a changed document whose old chunks were already deleted is now absent (and is
added again by the next ingest of its file).

Records of runs that may still be writing are left alone: for a store on disk the write lock
(:mod:`crag.vectorstore.locking`) guarantees there is none; on a Chroma server a record is repaired
only once it has not been refreshed for :data:`STALE_AFTER` seconds.

Until then, searches never return their chunks: :func:`hide_unfinished` gives the filter that
leaves out every source a record names that has no chunk 0 (a document being written now, or
one a killed run left half-written); a recorded document whose chunk 0 is stored is complete
(chunk 0 is written last, after the old version's chunks were deleted) and is searched as usual.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from langchain_chroma import Chroma

from crag.vectorstore.lexical_store import refresh_lexical_index
from crag.vectorstore.records import delete_sources, stored_hashes
from crag.vectorstore.store import StoreError
from crag.vectorstore.store_base import server_address

logger = logging.getLogger(__name__)

PENDING_PREFIX = "crag:pending:"
"""Collection metadata keys recording a run's unfinished documents."""

_INDEX_PREFIX = "hnsw:"

STALE_AFTER = 900.0
"""Seconds after which an unrefreshed record of a run on a Chroma server counts as abandoned."""


def new_run_id() -> str:
    """A fresh identifier for one writer's record."""
    return uuid.uuid4().hex


def _metadata(store: Chroma) -> dict[str, Any]:
    """The collection's metadata as stored now (not as cached when the store was opened)."""
    try:
        fresh = store._client.get_collection(store._collection.name, embedding_function=None)
    except Exception as exc:
        where = server_address(store)
        place = f" on the Chroma server at {where}" if where else ""
        reason = (str(exc).strip() or type(exc).__name__).splitlines()[0]
        raise StoreError(f"cannot read the vector store's collection{place}: {reason}") from exc
    return dict(fresh.metadata or {})


def _write(store: Chroma, changes: Mapping[str, str | None]) -> None:
    """Set (or, with ``None``, delete) keys of the collection metadata, keeping the others.

    Chroma replaces the whole metadata (a ``None`` value deletes its key), and refuses any
    metadata that names ``hnsw:`` index settings, even unchanged. Those keys are left out: in
    Chroma 1.x the index settings live in the collection's configuration, which keeps them
    (the distance function of a ``hnsw:space`` collection is unchanged).
    """
    current = {k: v for k, v in _metadata(store).items() if not k.startswith(_INDEX_PREFIX)}
    metadata: dict[str, Any] = {**current, **changes}
    try:
        store._collection.modify(metadata=metadata)
    except Exception as exc:
        raise StoreError(f"cannot record the ingestion's progress in the store: {exc}") from exc


def mark_pending(store: Chroma, run_id: str, sources: Iterable[str]) -> None:
    """Record ``sources`` as being written by ``run_id`` (replacing its previous record)."""
    record = json.dumps({"time": time.time(), "sources": sorted(set(sources))})
    _write(store, {PENDING_PREFIX + run_id: record})


def clear_pending(store: Chroma, run_id: str) -> None:
    """Forget the record of ``run_id`` (its documents are complete)."""
    _write(store, {PENDING_PREFIX + run_id: None})


def remove_incomplete(store: Chroma, sources: Iterable[str]) -> list[str]:
    """Delete every chunk of the given sources that lack chunk 0; return those sources."""
    wanted = sorted(set(sources))
    incomplete = sorted(set(wanted) - set(stored_hashes(store, wanted)))
    delete_sources(store, incomplete, "an interrupted ingestion")
    return incomplete


def _parse(value: Any) -> tuple[float, list[str]] | None:
    try:
        record = json.loads(str(value))
        sources = [str(s) for s in record["sources"]]
        return float(record["time"]), sources
    except (ValueError, TypeError, KeyError):
        return None


def repair_interrupted(store: Chroma, *, exclusive: bool) -> list[str]:
    """Undo the unfinished documents of interrupted runs; return their sources.

    Args:
        store: The store.
        exclusive: The caller holds a lock no other writer can hold at the same time (a store
            on disk): every record is abandoned. Otherwise only stale records are.

    Raises:
        StoreError: The store cannot be read or written.
    """
    now = time.time()
    abandoned: list[str] = []
    sources: list[str] = []
    for key, value in _metadata(store).items():
        if not key.startswith(PENDING_PREFIX):
            continue
        parsed = _parse(value)
        if parsed is not None and not exclusive and now - parsed[0] < STALE_AFTER:
            continue
        abandoned.append(key)
        if parsed is not None:
            sources.extend(parsed[1])
    if not abandoned:
        return []
    removed = remove_incomplete(store, sources)
    _write(store, dict.fromkeys(abandoned))
    if removed:
        refresh_lexical_index(store)
        logger.warning(
            "removed the partial chunks of %d document(s) an interrupted ingestion left: %s",
            len(removed),
            shorten(removed),
        )
    return removed


def unfinished_sources(store: Chroma) -> list[str]:
    """The sources the records name whose chunk 0 is not stored: their writes are pending.

    Raises:
        StoreError: The store cannot be read.
    """
    recorded: set[str] = set()
    for key, value in _metadata(store).items():
        parsed = _parse(value) if key.startswith(PENDING_PREFIX) else None
        if parsed is not None:
            recorded.update(parsed[1])
    if not recorded:
        return []
    return sorted(recorded - set(stored_hashes(store, sorted(recorded))))


def hide_unfinished(store: Any) -> dict[str, Any] | None:
    """The Chroma ``where`` that leaves out the chunks of pending writes; ``None``: none are.

    One read of the collection's metadata per search (and a look-up of chunk 0 of the sources
    recorded, when there are any). A store that is not a Chroma collection (a test's stand-in,
    a benchmark's view) has no records: ``None``.

    Raises:
        StoreError: The store cannot be read.
    """
    if not isinstance(store, Chroma):
        return None
    unfinished = unfinished_sources(store)
    if unfinished:
        logger.info(
            "%d document(s) are being written or were left half-written; not searched: %s",
            len(unfinished),
            shorten(unfinished),
        )
    return {"source": {"$nin": unfinished}} if unfinished else None


def shorten(sources: list[str], shown: int = 5) -> str:
    """The first few sources, and how many more, for a log line."""
    more = f" and {len(sources) - shown} more" if len(sources) > shown else ""
    return ", ".join(sources[:shown]) + more


def abandon_run(store: Chroma, run_id: str) -> list[str]:
    """Undo the unfinished documents of this process's own interrupted run.

    Raises:
        StoreError: The store cannot be read or written.
    """
    value = _metadata(store).get(PENDING_PREFIX + run_id)
    if value is None:
        return []
    parsed = _parse(value)
    removed = remove_incomplete(store, parsed[1]) if parsed is not None else []
    clear_pending(store, run_id)
    if removed:
        refresh_lexical_index(store)
    return removed
