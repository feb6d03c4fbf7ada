"""One writer at a time per store: an exclusive lock held while a store is being written.

For a store on disk the lock is ``fcntl.flock`` on ``crag-ingest.lock`` in the store's
directory, so that two processes (two ``crag ingest``, or an ingest and a server filling the
default corpus) take turns: the second waits, then finds the first one's documents stored and
unchanged. Within a process a re-entrant lock per store does the same for threads, and lets a
writer that already holds the lock call another (ingestion pruning what it ingested).

A store on a Chroma server has no lock across processes (Chroma offers no primitive for one):
writers in one process still take turns, writers on several machines do not. Their writes stay
consistent (each document's chunks are deleted before being written, under deterministic ids),
but both may embed the same documents and both report them added.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from langchain_chroma import Chroma

from crag.vectorstore.readonly import read_only_message
from crag.vectorstore.store_base import StoreError, ensure_writable, store_directory

logger = logging.getLogger(__name__)

LOCK_FILE = "crag-ingest.lock"
"""The lock file in the directory of a store on disk."""

_guard = threading.Lock()
_locks: dict[str, threading.RLock] = {}
_depth: dict[str, int] = {}


def _key(store: Chroma, directory: Path | None) -> str:
    if directory is not None:
        return str(directory)
    return f"server:{id(store._client)}:{store._collection.name}"


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
        The store's directory, or ``None`` for a store on a Chroma server (locked only
        within this process).

    Raises:
        StoreError: The store is read-only, or its lock file cannot be created.
    """
    ensure_writable(store)
    directory = store_directory(store)
    key = _key(store, directory)
    with _guard:
        lock = _locks.setdefault(key, threading.RLock())
    if not lock.acquire(blocking=False):
        logger.warning("waiting for another ingestion into the same store to finish")
        lock.acquire()
    fd: int | None = None
    try:
        _depth[key] = _depth.get(key, 0) + 1
        if _depth[key] == 1 and directory is not None:
            fd = _open_lock_file(directory)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                logger.warning("waiting for another process ingesting into %s to finish", directory)
                fcntl.flock(fd, fcntl.LOCK_EX)
        yield directory
    finally:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
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
