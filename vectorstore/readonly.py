"""Read-only stores on disk: detect them, and copy them so that Chroma can answer from them.

Chroma 1.5 cannot open a persistent store it cannot write, not even to read it: opening
``PersistentClient`` on a directory (or a ``chroma.sqlite3``) without write permission fails
with ``attempt to write a readonly database``. A store on a read-only volume, or owned by
another user, is healthy nonetheless. To answer questions from it, crag opens a private copy
taken when the store is first opened in the process (SQLite's backup API, which gives a
consistent snapshot of the database even while its owner writes to it); writing is refused.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)

SQLITE_FILE = "chroma.sqlite3"
"""The file every Chroma persistent store holds at its root."""

_READ_ONLY_WORDS = ("readonly", "read-only", "read only", "permission denied")


class SnapshotError(OSError):
    """A read-only store could not be copied (the message says why)."""


def is_read_only(path: Path) -> bool:
    """Whether this process lacks write permission on the store ``path`` or its files.

    Only the store's own entries are checked (the directory, ``chroma.sqlite3`` and the
    segment directories): that is what Chroma writes when it opens a store.
    """
    if not os.access(path, os.W_OK):
        return True
    sqlite = path / SQLITE_FILE
    if sqlite.exists() and not os.access(sqlite, os.W_OK):
        return True
    try:
        entries = list(path.iterdir())
    except OSError:
        return False
    return any(entry.is_dir() and not os.access(entry, os.W_OK) for entry in entries)


def looks_read_only(exc: BaseException) -> bool:
    """Whether a store error says that the store could not be written."""
    text = str(exc).lower()
    return any(word in text for word in _READ_ONLY_WORDS)


def read_only_message(path: Path) -> str:
    """The explanation shared by every error about a read-only store."""
    return (
        f"the vector store at '{path}' is read-only (this user may not write to it; the "
        "store itself is fine)"
    )


def _size(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += (Path(root) / name).stat().st_size
            except OSError:
                continue
    return total


def _make_writable(path: Path) -> None:
    for root, dirs, files in os.walk(path):
        os.chmod(root, 0o700)
        for name in dirs:
            os.chmod(Path(root) / name, 0o700)
        for name in files:
            os.chmod(Path(root) / name, 0o600)


def snapshot(path: Path) -> Path:
    """Copy the read-only store ``path`` into a private temporary directory; return the copy.

    The copy is removed when the process exits (or by :func:`remove_snapshot`).

    Raises:
        SnapshotError: Not enough free space, or the store cannot be read.
    """
    needed = _size(path)
    scratch = Path(tempfile.gettempdir())
    free = shutil.disk_usage(scratch).free
    if needed * 1.1 > free:
        raise SnapshotError(
            f"answering from a copy needs {needed / 1e6:,.0f} MB in {scratch}, which has "
            f"{free / 1e6:,.0f} MB free"
        )
    root = Path(tempfile.mkdtemp(prefix="crag-read-only-store-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    copy = root / "store"
    try:
        shutil.copytree(path, copy, ignore=shutil.ignore_patterns(f"{SQLITE_FILE}*", "*.lock"))
        _make_writable(copy)
        source = sqlite3.connect(f"{(path / SQLITE_FILE).as_uri()}?mode=ro", uri=True)
        try:
            target = sqlite3.connect(copy / SQLITE_FILE)
            try:
                source.backup(target)
            finally:
                target.close()
        finally:
            source.close()
    except (OSError, sqlite3.Error) as exc:
        shutil.rmtree(root, ignore_errors=True)
        raise SnapshotError(f"copying it failed: {exc}") from exc
    logger.warning(
        "%s; answering from a copy taken now (%s); ingestion into it is refused",
        read_only_message(path),
        copy,
    )
    return copy


def remove_snapshot(copy: Path) -> None:
    """Delete a copy made by :func:`snapshot`."""
    shutil.rmtree(copy.parent, ignore_errors=True)
