"""The lexical index of an opened store: found, checked fresh, rebuilt when stale, searched.

**Never stale.** An index (:mod:`crag.vectorstore.lexical`) records the *digest* of the chunks it
was built from and a *state token* of the store: size, inode and modification time of
``chroma.sqlite3`` (and of its write-ahead log, if any). Chroma commits every write to that
file and reads leave it untouched, so every search compares the token, one ``stat``. When it
differs the chunks are read back and digested (about 0.4 s for 10,000 chunks) and the index
is rebuilt only if the digest differs too: opening a store touches the file without changing
its chunks. A token younger than :data:`~crag.vectorstore.lexical.SETTLE_SECONDS` is not recorded,
since a second write within the same clock tick would leave it unchanged; a writer, which
holds the store's write lock, records its token at once. A process keeps the indexes it uses
in memory, keyed by index directory, and checks them the same way.

**Kept in step.** Writes (ingest, replace, prune, remove, the repair of interrupted runs) call
:func:`refresh_lexical_index` under the write lock, so the next search finds the index ready;
a store whose index was never built is left alone (it is built by the first lexical search).
Readers check for themselves all the same, so a write by another program is caught too.

**Chroma server** (``chroma_host``): not indexed yet. :func:`lexical_available` is false, and
:mod:`crag.vectorstore.hybrid` falls back to dense retrieval with a warning. The plan: keep the
index in a local directory (``.crag/lexical/<host>_<port>/<collection>``) and, as a server
has no file to ``stat``, use the digest itself as the fingerprint, read from the server at
most every few seconds.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from langchain_core.documents import Document

from crag.vectorstore.lexical import (
    INDEX_DIRECTORY,
    META_FILE,
    LexicalIndex,
    Token,
    build_index,
    digest,
    index_meta,
    load_index,
    read_chunks,
    save_index,
    settled_token,
    state_token,
    write_json,
)
from crag.vectorstore.store import StoreError, store_directory

logger = logging.getLogger(__name__)

_cache: dict[str, LexicalIndex] = {}
_locks: dict[str, threading.Lock] = {}
_guard = threading.Lock()


def _opened_directory(store: Any) -> Path | None:
    """The directory Chroma reads (a private copy for a read-only store); ``None``: a server."""
    try:
        settings = store._client.get_settings()
    except Exception:  # noqa: BLE001 - not a Chroma client: no directory
        return None
    if not settings.is_persistent or not settings.persist_directory:
        return None
    return Path(str(settings.persist_directory))


def lexical_available(store: Any) -> bool:
    """Whether ``store`` can be searched lexically: a Chroma collection on disk."""
    return hasattr(store, "_collection") and _opened_directory(store) is not None


def index_directory(store: Any) -> Path | None:
    """Where the index of ``store``'s collection lives (``None``: a store on a server)."""
    directory = store_directory(store) if _opened_directory(store) is not None else None
    if directory is None:
        return None
    return directory / INDEX_DIRECTORY / str(store._collection.name)


def _lock_of(key: str) -> threading.Lock:
    with _guard:
        return _locks.setdefault(key, threading.Lock())


def _save(directory: Path, index: LexicalIndex) -> None:
    """Save ``index``; a store that cannot be written keeps it in memory only."""
    try:
        save_index(directory, index)
    except OSError as exc:
        logger.debug("lexical index kept in memory only, %s not writable: %s", directory, exc)


def _adopt(directory: Path, index: LexicalIndex, token: Token | None, saved: bool) -> None:
    """Record ``token`` as the state ``index`` is fresh at (on disk too when ``saved``)."""
    if token is None or index.token == token:
        return
    index.token = token
    if saved:
        try:
            write_json(directory / META_FILE, index_meta(index))
        except OSError as exc:
            logger.debug("cannot record the lexical index's state in %s: %s", directory, exc)


def _fresh(store: Any, directory: Path, *, writer: bool) -> LexicalIndex:
    """The index of ``store`` checked (and if need be rebuilt) against the store's state.

    The token is taken before the chunks are read: a write meanwhile changes it again.
    """
    token = state_token(_opened_directory(store) or directory)
    cached = _cache.get(str(directory))
    if cached is not None and token is not None and cached.token == token:
        return cached
    on_disk = load_index(directory)
    if on_disk is not None and token is not None and on_disk.token == token:
        return on_disk
    ids, texts = read_chunks(store._collection)
    current = digest(ids, texts)
    recorded = token if writer else settled_token(token)
    for candidate, saved in ((on_disk, True), (cached, False)):
        if candidate is not None and candidate.digest == current:
            _adopt(directory, candidate, recorded, saved)
            return candidate
    index = build_index(ids, texts)
    index.token = recorded
    logger.info("built the lexical index of %d chunks in %s", len(ids), directory)
    _save(directory, index)
    return index


def lexical_index(store: Any, *, writer: bool = False) -> LexicalIndex | None:
    """The fresh lexical index of ``store``'s collection; ``None`` for a store on a server.

    ``writer``: the caller holds the store's write lock (its state token can be trusted).

    Raises:
        StoreError: The store cannot be read.
    """
    directory = index_directory(store)
    if directory is None:
        return None
    key = str(directory)
    with _lock_of(key):
        index = _fresh(store, directory, writer=writer)
        _cache[key] = index
        return index


def refresh_lexical_index(store: Any) -> None:
    """Bring the index of ``store`` in step after a write; call it under the write lock.

    Only an index that exists (on disk or in this process) is refreshed. Never fails the
    write: a failure is logged, and the next search checks the index anyway.
    """
    try:
        directory = index_directory(store)
        if directory is None or not (directory.exists() or str(directory) in _cache):
            return
        lexical_index(store, writer=True)
    except Exception as exc:  # noqa: BLE001 - readers rebuild it anyway
        logger.warning("could not refresh the lexical index (the next search will): %s", exc)


def _allowed(store: Any, where: dict[str, Any] | None) -> set[str] | None:
    """The ids of the chunks ``where`` lets through (``None``: no filter)."""
    if not where:
        return None
    try:
        return set(store._collection.get(where=where, include=[])["ids"])
    except Exception as exc:
        raise StoreError(f"cannot filter the vector store's chunks: {exc}") from exc


def fetch_documents(store: Any, ids: list[str]) -> list[Document]:
    """The chunks ``ids`` as documents, in that order (a chunk gone meanwhile is left out)."""
    if not ids:
        return []
    try:
        got = store._collection.get(ids=ids, include=["documents", "metadatas"])
    except Exception as exc:
        raise StoreError(f"cannot read the vector store's chunks: {exc}") from exc
    metadatas = got.get("metadatas") or [None] * len(got["ids"])
    found = {
        chunk: Document(id=chunk, page_content=text or "", metadata=dict(meta or {}))
        for chunk, text, meta in zip(got["ids"], got.get("documents") or [], metadatas, strict=True)
    }
    return [found[chunk] for chunk in ids if chunk in found]


def lexical_ids(store: Any, query: str, k: int, where: dict[str, Any] | None = None) -> list[str]:
    """The ids of the ``k`` chunks BM25 ranks best for ``query``, among those ``where`` allows.

    Raises:
        StoreError: The store cannot be read, or is on a Chroma server (not indexed).
    """
    index = lexical_index(store)
    if index is None:
        raise StoreError("lexical search is not available for a store on a Chroma server")
    return [chunk for chunk, _ in index.search(query, k, _allowed(store, where))]
