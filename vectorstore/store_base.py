"""What every module that touches a store needs, below the store itself: its error, its place.

:class:`StoreError`, the directory of a store on disk (:func:`store_directory`), and the refusal
to write a store opened read-only from a private copy (:func:`ensure_writable`). Apart from
:mod:`crag.vectorstore.store`, so that the write lock, the records and the index repair, which
:mod:`~crag.vectorstore.store` itself calls on, need not import it back.
"""

from __future__ import annotations

from pathlib import Path

from langchain_chroma import Chroma

from crag.vectorstore.readonly import read_only_message

SNAPSHOTS: dict[str, Path] = {}
"""Directory of a private copy -> the read-only store it was copied from (filled by
:mod:`crag.vectorstore.store` when it opens a store this user may not write)."""

WRITE_HINT = (
    "give this user write permission on the directory and its files, or copy the store to a "
    "writable directory and point store_path at the copy"
)


class StoreError(RuntimeError):
    """The vector store is missing, unreadable, corrupt or lacks the requested collection."""


def persist_directory(store: Chroma) -> Path | None:
    """The directory the store's client reads (a private copy's, for a read-only store)."""
    settings = store._client.get_settings()
    if not settings.is_persistent:
        return None
    return Path(str(settings.persist_directory))


def server_address(store: Chroma) -> str | None:
    """The address of the Chroma server holding the store (``None`` for a store on disk)."""
    settings = store._client.get_settings()
    host = str(settings.chroma_server_host or "").strip()
    if not host:
        return None
    scheme = "https" if settings.chroma_server_ssl_enabled else "http"
    return f"{scheme}://{host}:{settings.chroma_server_http_port}"


def store_directory(store: Chroma) -> Path | None:
    """The directory of a store on disk (``None`` for a store on a Chroma server).

    For a read-only store opened from a copy, the directory of the store itself.
    """
    directory = persist_directory(store)
    if directory is None:
        return None
    return SNAPSHOTS.get(str(directory), directory)


def ensure_writable(store: Chroma) -> None:
    """Refuse to write to a store opened read-only.

    Raises:
        StoreError: The store is read-only (opened from a copy).
    """
    directory = persist_directory(store)
    original = SNAPSHOTS.get(str(directory)) if directory is not None else None
    if original is not None:
        raise StoreError(f"{read_only_message(original)}: cannot write to it; {WRITE_HINT}")
