"""One writer at a time per store: an exclusive lock held while a store is being written.

For a store on disk the lock is ``fcntl.flock`` on ``crag-ingest.lock`` in the store's
directory, so that two processes (two ``crag ingest``, or an ingest and a server filling the
default corpus) take turns: the second waits, then finds the first one's documents stored and
unchanged. Within a process a re-entrant lock per store does the same for threads, and lets a
writer that already holds the lock call another (ingestion pruning what it ingested).

A store on a Chroma server has no lock file, and Chroma offers no lock of its own. When the replicas
share a PostgreSQL (``CRAG_THREADS_DB`` set to a ``postgresql://`` URL,
:mod:`crag.vectorstore.shared_database`), the lock across processes and machines is an advisory lock
there (:mod:`crag.vectorstore.advisory_lock`), keyed by the Chroma server's address, tenant,
database and collection: two replicas filling the default corpus, or two ingests of the same files,
take turns as on disk, and a writer that is killed frees it. Every replica must name the server the
same way (the same ``chroma_host`` and ``chroma_port``). Without a shared PostgreSQL, writers in one
process still take turns, writers in several processes do not: their writes stay consistent (each
document's chunks are deleted before being written, under deterministic ids), but both may embed the
same documents and both report them added.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from langchain_chroma import Chroma

from crag.vectorstore.advisory_lock import SharedLockError, advisory_lock
from crag.vectorstore.readonly import read_only_message
from crag.vectorstore.shared_database import shared_database
from crag.vectorstore.store_base import StoreError, ensure_writable, store_directory

logger = logging.getLogger(__name__)

LOCK_FILE = "crag-ingest.lock"
"""The lock file in the directory of a store on disk."""

_guard = threading.Lock()
_locks: dict[str, threading.RLock] = {}
_depth: dict[str, int] = {}


def _key(store: Chroma, directory: Path | None) -> str:
    """The store's name within this process: its directory, or its server and collection.

    A store on a server is named as its advisory lock is, whichever client reaches it, so that
    a writer holding the lock through one client re-enters it through another.
    """
    if directory is not None:
        return str(directory)
    if _on_server(store):
        return _server_lock_name(store)
    return f"memory:{id(store._client)}:{store._collection.name}"


def _on_server(store: Chroma) -> bool:
    """Whether the store is on a Chroma server (not on disk, nor in this process's memory)."""
    return bool(store._client.get_settings().chroma_server_host)


def _server_lock_name(store: Chroma) -> str:
    """The advisory lock's name of a store on a Chroma server: address, tenant, database, name."""
    client = store._client
    settings = client.get_settings()
    scheme = "https" if settings.chroma_server_ssl_enabled else "http"
    host = str(settings.chroma_server_host or "").strip().lower()
    where = f"{scheme}://{host}:{settings.chroma_server_http_port}"
    tenant, database = getattr(client, "tenant", ""), getattr(client, "database", "")
    return f"crag.store-write:{where}/{tenant}/{database}/{store._collection.name}"


@contextmanager
def _across_processes(store: Chroma, directory: Path | None) -> Iterator[None]:
    """The lock other processes see: the lock file on disk, or the shared database's lock."""
    if directory is not None:
        fd = _open_lock_file(directory)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                logger.warning("waiting for another process ingesting into %s to finish", directory)
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        return
    database = shared_database() if _on_server(store) else None
    if database is None:
        yield
        return
    name = _server_lock_name(store)
    waiting = (
        f"waiting for another process writing the collection {store._collection.name!r} "
        "of the Chroma server to finish"
    )
    with ExitStack() as held:
        try:
            held.enter_context(advisory_lock(database, name, waiting))
        except SharedLockError as exc:
            raise StoreError(str(exc)) from None
        yield


def _open_lock_file(directory: Path) -> int:
    path = directory / LOCK_FILE
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise StoreError(f"{read_only_message(directory)}: cannot write to it") from exc
        raise StoreError(f"cannot create the lock file {path}: {exc.strerror or exc}") from exc


@contextmanager
def store_write_lock(store: Chroma) -> Iterator[Path | None]:
    """Hold the store's write lock (waiting for another writer to finish first).

    Yields:
        The store's directory, or ``None`` for a store on a Chroma server (locked across
        processes only with a shared PostgreSQL: see the module).

    Raises:
        StoreError: The store is read-only, its lock file cannot be created, or the shared
            database cannot hold the lock.
    """
    ensure_writable(store)
    directory = store_directory(store)
    key = _key(store, directory)
    with _guard:
        lock = _locks.setdefault(key, threading.RLock())
    if not lock.acquire(blocking=False):
        logger.warning("waiting for another ingestion into the same store to finish")
        lock.acquire()
    try:
        _depth[key] = _depth.get(key, 0) + 1
        if _depth[key] > 1:
            yield directory
            return
        with _across_processes(store, directory):
            yield directory
    finally:
        _depth[key] -= 1
        lock.release()


@contextmanager
def unless_locked(directory: Path) -> Iterator[bool]:
    """Hold the write lock of the store on disk at ``directory`` if no one holds it.

    Yields ``False`` at once, holding nothing, when another process writes there (an ingest,
    or a rebuild of the vector index in the middle of swapping collections), or when the lock
    file cannot be made (a read-only store): what the caller would tidy up is that writer's.
    """
    try:
        fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
