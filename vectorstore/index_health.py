"""A vector index that stops finding stored chunks: detect it, rebuild it, and say so.

**The cause.** Chroma's HNSW index (its hnswlib fork, ``hnswlib/hnswalg.h`` in
chroma-core/hnswlib) deletes by *marking*: ``markDelete`` "does NOT really change the current
graph". A search still enters at the graph's entry point and walks the deleted nodes, and only
leaves them out of the results. Many identical chunks (a PDF whose pages repeat, tiny chunks
of the same words) are linked almost only to each other by the neighbour-selection heuristic:
once deleted (``crag remove``, the cleanup of an interrupted ingest) they can form a region
whose links lead nowhere but to other deleted nodes. A search that enters it (the entry point
is often one of them) finds fewer than ``k`` live chunks, or none, from a collection that holds
thousands; reopening the store does not help, nor does a larger ``ef_search`` (measured:
``ef_search`` 1,000 left about as many searches short as the default 100). Chroma 1.5.9's own
report of it is chroma-core/chroma#7758 (live records unreachable by ``query()`` after
deletes); for hnswlib, nmslib/hnswlib#220 and #344. Chroma offers no in-place compaction of a
local HNSW index: ``chroma vacuum`` purges the log and VACUUMs SQLite
(``rust/cli/src/commands/vacuum.rs``), so the index cannot be replayed from the log either.
Its cookbook gives "performance of HNSW index after a large number of updates" as a reason to
rebuild a collection (https://cookbook.chromadb.dev/strategies/rebuilding);
:func:`rebuild_collection` rebuilds it through Chroma's public API.

**Detection.** A search that returns fewer than ``k`` chunks while the collection holds more
matching chunks than it returned (``count()``, or, with a metadata filter, a ``get`` of the
filter's first ``k`` ids) is a damaged index: :func:`matching_chunks`.

**Repair.** :func:`rebuild_collection` copies every chunk (ids, vectors, texts, metadata) into
a fresh collection, checks the copy's count, and swaps the names; a crash at any step leaves
either the old collection or the complete copy under the collection's name, and
:func:`finish_interrupted_rebuild` (run when a store is opened) completes or undoes the swap.

**Saying so.** :func:`watch_index` collects one note per repair made during a run's search; the
retrieve node adds them to the run's ``notes``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from crag.vectorstore.locking import store_write_lock
from crag.vectorstore.records import scan_pages
from crag.vectorstore.store_base import StoreError

logger = logging.getLogger(__name__)

_T = TypeVar("_T", bound=Sequence[Any])

SPARE_SUFFIX = "-crag-rebuild"
"""The name of a collection's copy while it is being rebuilt: ``<name>-crag-rebuild``."""

RETIRED_SUFFIX = "-crag-retired"
"""The name of the damaged collection between the swap and its deletion."""

MAX_NAME = 512
"""Chroma's longest collection name."""

_notes: ContextVar[list[str] | None] = ContextVar("crag_index_notes", default=None)

_futile: set[tuple[str, str]] = set()
"""``(store, collection)`` pairs whose rebuild did not help, in this process."""


class RebuildError(StoreError):
    """The collection could not be rebuilt (the message says why); nothing was lost."""


def forget_futile_rebuilds() -> None:
    """Forget which rebuilds did not help: the stores were reopened, their indexes read anew."""
    _futile.clear()


@contextmanager
def watch_index() -> Iterator[list[str]]:
    """Collect the notes of the index repairs made in this context (one run's search)."""
    notes: list[str] = []
    token = _notes.set(notes)
    try:
        yield notes
    finally:
        _notes.reset(token)


def _report(note: str) -> None:
    logger.warning("%s", note)
    notes = _notes.get()
    if notes is not None and note not in notes:
        notes.append(note)


def matching_chunks(collection: Any, k: int, where: dict[str, Any] | None) -> int:
    """How many of the ``k`` chunks a search asked for the collection holds (at most ``k``).

    Without a filter this is ``count()``; with a metadata filter, the ids of the filter's
    first ``k`` matches (a ``get`` of ids only: SQLite, not the vector index).
    """
    if where is None:
        return min(k, int(collection.count()))
    found = collection.get(where=where, limit=k, include=[])
    return min(k, len(found["ids"]))


def _names(client: Any) -> set[str]:
    return {item if isinstance(item, str) else str(item.name) for item in client.list_collections()}


def finish_interrupted_rebuild(client: Any, name: str) -> str | None:
    """Complete or undo a rebuild of collection ``name`` that a crash interrupted.

    The copy is renamed into place only after its count was checked, so a copy found beside a
    retired collection is complete; a copy found beside the collection itself may be partial.

    Returns:
        What was done, or ``None`` when there was nothing to do.
    """
    names = _names(client)
    spare, retired = name + SPARE_SUFFIX, name + RETIRED_SUFFIX
    done: list[str] = []
    if name not in names and spare in names and retired in names:
        client.get_collection(spare).modify(name=name)
        names = (names - {spare}) | {name}
        done.append("completed an interrupted rebuild of the vector index")
    elif name not in names and retired in names:
        client.get_collection(retired).modify(name=name)
        names = (names - {retired}) | {name}
        done.append("restored the collection an interrupted rebuild had set aside")
    if name in names and retired in names:
        client.delete_collection(retired)
        done.append("deleted the damaged copy an interrupted rebuild left")
    if name in names and spare in names:
        client.delete_collection(spare)
        done.append("deleted the partial copy an interrupted rebuild left")
    if not done:
        return None
    message = f"collection {name!r}: {'; '.join(done)}"
    logger.warning("%s", message)
    return message


def _hnsw_configuration(collection: Any) -> dict[str, Any] | None:
    """The collection's HNSW settings, to give its copy (``None``: Chroma's defaults)."""
    hnsw = (getattr(collection, "configuration", None) or {}).get("hnsw")
    return {"hnsw": dict(hnsw)} if hnsw else None


def _copy_chunks(client: Any, source: Any, target: Any) -> int:
    """Add every chunk of ``source`` to ``target`` (ids, vectors, texts, metadata)."""
    batch = max(1, int(client.get_max_batch_size()))
    copied = 0
    for page in scan_pages(
        source, ["embeddings", "documents", "metadatas"], "the chunks to rebuild the index from"
    ):
        ids = list(page["ids"])
        for start in range(0, len(ids), batch):
            end = start + batch
            metadatas = page["metadatas"][start:end] if page["metadatas"] is not None else None
            target.add(
                ids=ids[start:end],
                embeddings=page["embeddings"][start:end],
                documents=page["documents"][start:end],
                metadatas=metadatas,
            )
        copied += len(ids)
    return copied


def rebuild_collection(store: Any) -> int:
    """Rebuild the vector index of ``store``'s collection: copy it whole, then swap the names.

    Call with the store's write lock held. ``store`` (LangChain's Chroma) is pointed at the
    new collection.

    Returns:
        The number of chunks copied.

    Raises:
        RebuildError: The copy failed or came out short; the damaged collection is left in
            place and the partial copy deleted.
    """
    client = store._client
    old = store._collection
    name = str(old.name)
    spare, retired = name + SPARE_SUFFIX, name + RETIRED_SUFFIX
    if len(retired) > MAX_NAME:
        raise RebuildError(f"the collection name {name!r} is too long to rebuild it beside itself")
    finish_interrupted_rebuild(client, name)
    expected = int(old.count())
    copy = client.create_collection(
        name=spare, metadata=old.metadata or None, configuration=_hnsw_configuration(old)
    )
    try:
        copied = _copy_chunks(client, old, copy)
        if copied != expected or int(copy.count()) != expected:
            raise RebuildError(
                f"the copy of collection {name!r} holds {int(copy.count()):,} chunks where "
                f"the collection holds {expected:,}"
            )
    except Exception as exc:
        client.delete_collection(spare)
        if isinstance(exc, RebuildError):
            raise
        raise RebuildError(f"copying collection {name!r} failed: {exc}") from exc
    try:
        old.modify(name=retired)
        copy.modify(name=name)
        client.delete_collection(retired)
        store._chroma_collection = client.get_collection(name)
    except Exception as exc:
        raise RebuildError(
            f"swapping the rebuilt copy of collection {name!r} in failed: {exc}; the next "
            "opening of the store finishes the swap"
        ) from exc
    return copied


def _reopen(store: Any) -> None:
    """Point ``store`` at its collection as it is now (another writer may have rebuilt it)."""
    try:
        store._chroma_collection = store._client.get_collection(store._collection_name)
    except Exception as exc:
        raise StoreError(f"cannot reopen collection {store._collection_name!r}: {exc}") from exc


def repair_search(store: Any, search: Callable[[], _T], found: int, expected: int) -> _T | None:
    """Rebuild ``store``'s damaged index and search again; ``None`` if it could not be repaired.

    ``found`` of ``expected`` chunks came back. Under the write lock the search is tried
    again first: another search or process may have rebuilt the index meanwhile. A collection
    whose rebuild did not help is not rebuilt again by this process (each search would).
    """
    where = getattr(store, "where", "the vector store")
    damaged = (
        f"the vector index of {where} was damaged: a search for {expected} passages found "
        f"{found}, though the collection holds them (deleted chunks blocked its way)"
    )
    key = (str(where), str(store._collection_name))
    if key in _futile:
        _report(f"{damaged}; a rebuild did not help earlier, so it was not tried again")
        return None
    try:
        with store_write_lock(store):
            _reopen(store)
            again = search()
            if len(again) >= expected:
                _report(f"{damaged}; it had been rebuilt meanwhile")
                return again
            copied = rebuild_collection(store)
            again = search()
    except StoreError as exc:
        _report(f"{damaged}; it could not be rebuilt: {exc}")
        return None
    if len(again) < expected:
        _futile.add(key)
        _report(f"{damaged}; a rebuild ({copied:,} chunks) did not help: {len(again)} found")
        return again
    _report(f"{damaged}; rebuilt it ({copied:,} chunks), and the search found {len(again)}")
    return again
