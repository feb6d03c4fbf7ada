"""Open the Chroma vector store, on disk or on a Chroma server, and search it.

Two modes: a persistent store in a directory (``chromadb.PersistentClient``, the default) or a
Chroma server started with ``chroma run`` (``chromadb.HttpClient``) when a host is given, so
that several crag processes on several machines share one store.

Every failure of the store (missing, not a Chroma store, corrupt, read-only, server unreachable,
missing collection) surfaces as a :class:`StoreError` whose message names the path or server and
says what to do, never as a raw SQLite, HTTP or Chroma traceback.

A store on disk this process may not write is opened from a private copy (Chroma cannot open it
otherwise, see :mod:`crag.vectorstore.readonly`): questions are answered, writes are refused.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import struct
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import chromadb
import httpx
from chromadb.api import ClientAPI
from chromadb.config import Settings
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from crag.core.state import RetrievedPassage
from crag.vectorstore.lexical import Token, state_token
from crag.vectorstore.readonly import (
    SQLITE_FILE,
    SnapshotError,
    is_read_only,
    looks_read_only,
    read_only_message,
    remove_snapshot,
    snapshot,
)
from crag.vectorstore.store_base import SNAPSHOTS, WRITE_HINT
from crag.vectorstore.store_base import StoreError as StoreError
from crag.vectorstore.store_base import ensure_writable as ensure_writable
from crag.vectorstore.store_base import store_directory as store_directory

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
_S = TypeVar("_S", bound=list[Any])

HEARTBEAT_PATH = "/api/v2/heartbeat"
"""The Chroma server's liveness endpoint (Chroma 1.x)."""

CONNECT_TIMEOUT = 5.0
"""Seconds to wait for a Chroma server's first answer."""

_clients: dict[str, ClientAPI] = {}
_clients_lock = threading.Lock()

_opened_state: dict[str, Token | None] = {}
"""The state token (:func:`~crag.vectorstore.lexical.state_token`) of each store on disk
whose client is cached, taken right after the client opened it (opening touches the file)."""


_REBUILD_HINT = "delete the directory and run `crag ingest` again to rebuild it"

HNSW_HEADER = "header.bin"
"""The file of a Chroma HNSW segment directory that says how many vectors the index holds."""

_HNSW_VERSION = 1
"""The header layout read below: int32 version, then size_t offset, max and current
element count and bytes per element (Chroma's hnswlib fork, Chroma 1.x)."""

_HNSW_FIELDS = struct.Struct("<iQQQQ")


def _index_shortfall(segment: Path) -> str | None:
    """What is missing from the HNSW index files in ``segment``, or ``None`` if nothing is.

    Chroma reads ``data_level0.bin`` (the vectors and their neighbour lists) and
    ``length.bin`` at the size the header promises; a shorter file makes searches fail with an
    internal error, or silently return wrong passages. A header of an unknown layout is
    not judged.
    """
    header = (segment / HNSW_HEADER).read_bytes()
    if len(header) < _HNSW_FIELDS.size:
        return f"{HNSW_HEADER} holds {len(header)} bytes"
    version, _, _, elements, per_element = _HNSW_FIELDS.unpack_from(header)
    if version != _HNSW_VERSION:
        logger.debug("HNSW header version %d in %s: not checked", version, segment)
        return None
    for name, needed in (("data_level0.bin", elements * per_element), ("length.bin", 4 * elements)):
        file = segment / name
        size = file.stat().st_size if file.is_file() else 0
        if size < needed:
            return f"{name} holds {size:,} bytes where its {elements:,} vectors need {needed:,}"
    return None


def _damaged_index(path: Path) -> str | None:
    """The first damaged HNSW segment of the store ``path``, described; ``None`` if none."""
    try:
        segments = sorted(h.parent for h in path.glob(f"*/{HNSW_HEADER}"))
        for segment in segments:
            problem = _index_shortfall(segment)
            if problem is not None:
                return f"{segment.name}/{problem}"
    except OSError as exc:
        logger.debug("could not check the index files of %s: %s", path, exc)
    return None


def check_index_files(path: Path) -> None:
    """Refuse a store whose vector index files are cut short (a truncated copy, a full disk).

    Another process writing the store could be caught between writing the header and the
    files: a shortfall is only reported when it is still there a moment later.

    Raises:
        StoreError: An index file is shorter than its header says.
    """
    if _damaged_index(path) is None:
        return
    time.sleep(0.2)
    problem = _damaged_index(path)
    if problem is not None:
        raise StoreError(
            f"the vector index of the store at '{path}' is damaged ({problem}); {_REBUILD_HINT}"
        )


def _forget_failed_system(identifier: str) -> None:
    """Drop the half-started system Chroma caches when a client fails to open.

    Without this, every later attempt on the same path in this process fails with an
    unrelated error, even after the store has been repaired.
    """
    try:
        from chromadb.api.shared_system_client import SharedSystemClient

        SharedSystemClient._identifier_to_system.pop(identifier, None)
        SharedSystemClient._identifier_to_refcount.pop(identifier, None)
    except Exception:  # pragma: no cover - private API moved; nothing more we can do
        logger.debug("could not reset Chroma's system cache for %s", identifier, exc_info=True)


def _close_client(client: ClientAPI) -> None:
    close = getattr(client, "close", None)
    if callable(close):
        try:
            close()
        except Exception:  # pragma: no cover - best effort
            logger.debug("closing a Chroma client failed", exc_info=True)


def _cached_client(path: Path, *, writable: bool) -> ClientAPI | None:
    """The open client of ``path``, if any and the store is still there; hold the lock."""
    key = str(path)
    cached = _clients.get(key)
    if cached is None:
        return None
    if (path / SQLITE_FILE).is_file():
        if writable and path in SNAPSHOTS.values():
            raise StoreError(f"{read_only_message(path)}: cannot write to it; {WRITE_HINT}")
        return cached
    # The store was deleted under us: drop the stale client before reopening.
    del _clients[key]
    _opened_state.pop(key, None)
    _close_client(cached)
    _forget_failed_system(key)
    _drop_snapshot_of(path)
    return None


SQLITE_HEADER = b"SQLite format 3\x00"
"""The 16 bytes every SQLite database file starts with."""


def check_sqlite_file(path: Path) -> None:
    """Refuse a store whose ``chroma.sqlite3`` is not a readable SQLite database.

    Chroma would open such a file and write into it without a word. The check is cheap (no
    ``PRAGMA quick_check``, slow on a big store): the header, then the schema read through a
    read-only connection, so that nothing is written to a damaged file.

    Raises:
        StoreError: The file does not start with SQLite's header, or SQLite cannot read it.
    """
    sqlite = path / SQLITE_FILE
    try:
        with sqlite.open("rb") as file:
            header = file.read(len(SQLITE_HEADER))
    except FileNotFoundError:
        return  # a store about to be created
    except OSError as exc:
        raise StoreError(f"cannot read the vector store file '{sqlite}': {exc.strerror}") from exc
    if not header:
        return  # an empty file: SQLite makes a new database of it
    problem = "it is not a SQLite database" if header != SQLITE_HEADER else _unreadable(sqlite)
    if problem:
        raise StoreError(
            f"the vector store file '{sqlite}' is damaged ({problem}); nothing was written to "
            "it: restore it from a backup, or delete the directory and run `crag ingest` again"
        )


def _unreadable(sqlite: Path) -> str:
    """Why SQLite cannot read ``sqlite``'s schema (opened read-only); empty when it can."""
    try:
        connection = sqlite3.connect(f"{sqlite.as_uri()}?mode=ro&immutable=1", uri=True)
    except sqlite3.Error as exc:
        return str(exc)
    try:
        connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as exc:
        return str(exc)
    finally:
        connection.close()
    return ""


def _check_directory(path: Path, *, create: bool) -> None:
    """Make sure ``path`` is a readable store directory (created if ``create``)."""
    if path.exists() and not path.is_dir():
        raise StoreError(f"vector store path '{path}' is a file, not a directory")
    if not create:
        if not path.exists():
            raise StoreError(
                f"no vector store at '{path}'; run `crag ingest PATH...` first to build it "
                "(or check the store path setting)"
            )
        if not (path / SQLITE_FILE).is_file():
            raise StoreError(
                f"'{path}' is not a Chroma vector store (it has no {SQLITE_FILE}); "
                "point the store path at a store built by `crag ingest`, or ingest into "
                "this directory first"
            )
    else:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"cannot create the vector store directory '{path}': {exc.strerror or exc}"
            ) from exc
    if not os.access(path, os.R_OK | os.X_OK):
        raise StoreError(f"cannot read the vector store directory '{path}': permission denied")


def _directory_to_open(path: Path, *, writable: bool) -> Path:
    """``path``, or a private copy of it when this process may not write it."""
    if not ((path / SQLITE_FILE).is_file() and is_read_only(path)):
        return path
    if writable:
        raise StoreError(f"{read_only_message(path)}: cannot write to it; {WRITE_HINT}")
    try:
        return snapshot(path)
    except SnapshotError as exc:
        raise StoreError(
            f"{read_only_message(path)}, and Chroma cannot open a store it may not "
            f"write, even to read it; {exc}. To use it, {WRITE_HINT}"
        ) from exc


def _persistent_client(path: Path, opened: Path) -> ClientAPI:
    """Open ``opened`` (``path`` or its copy) with Chroma; failures name ``path``."""
    try:
        return chromadb.PersistentClient(
            path=str(opened), settings=Settings(anonymized_telemetry=False)
        )
    except Exception as exc:
        _forget_failed_system(str(opened))
        if opened != path:
            remove_snapshot(opened)
        if looks_read_only(exc) or is_read_only(path):
            raise StoreError(
                f"cannot write to the vector store directory '{path}' "
                f"({_describe(exc)}); it is read-only for this user: {WRITE_HINT}"
            ) from exc
        raise StoreError(
            f"cannot open the vector store at '{path}': {_describe(exc)}. The store may be "
            "corrupt or written by an incompatible Chroma version; delete the directory "
            "and run `crag ingest` again"
        ) from exc


def _client(path: Path, *, create: bool, writable: bool) -> ClientAPI:
    """Return the process-wide client for ``path`` (one per store; Chroma dislikes several).

    A store this process may not write is opened from a private copy unless ``writable``.
    """
    with _clients_lock:
        cached = _cached_client(path, writable=writable)
        if cached is not None:
            return cached
        _check_directory(path, create=create)
        check_sqlite_file(path)
        check_index_files(path)
        opened = _directory_to_open(path, writable=writable)
        client = _persistent_client(path, opened)
        if opened != path:
            SNAPSHOTS[str(opened)] = path
        _clients[str(path)] = client
        _opened_state[str(path)] = state_token(path)
        return client


def stores_changed_since_opened() -> list[Path]:
    """The stores on disk this process has open whose files changed since it opened them.

    A Chroma client keeps the vector index it loaded in memory: chunks another process
    writes to the store afterwards (``crag ingest --no-server`` beside ``crag serve``) are
    not searched by it, and a large write makes its searches come back short (read as a
    damaged index). Reopening the client reads the store as it is now. Reads leave the files
    untouched; a write by this process changes them too (it is reported as well: whether
    its client saw every write cannot be told apart from here).
    """
    with _clients_lock:
        recorded = {key: _opened_state.get(key) for key in _clients if key in _opened_state}
    return [Path(key) for key, token in recorded.items() if state_token(Path(key)) != token]


def _drop_snapshot_of(path: Path) -> None:
    for copy, original in list(SNAPSHOTS.items()):
        if original == path:
            del SNAPSHOTS[copy]
            _forget_failed_system(copy)
            remove_snapshot(Path(copy))


def server_url(host: str, port: int, ssl: bool = False) -> str:
    """The URL of a Chroma server, as messages show it."""
    return f"{'https' if ssl else 'http'}://{host}:{port}"


def _server_client(host: str, port: int, ssl: bool) -> ClientAPI:
    """Return the process-wide client for the Chroma server at ``host:port``.

    Raises:
        StoreError: The server cannot be reached (or is not a Chroma server).
    """
    url = server_url(host, port, ssl)
    with _clients_lock:
        cached = _clients.get(url)
        if cached is not None:
            return cached
        hint = (
            f"Start it with `chroma run --host {host} --port {port} --path DIR`, or check the "
            "chroma_host and chroma_port settings (empty chroma_host: the store on disk)"
        )
        # Chroma's HTTP client waits forever on a silent host: ask for a heartbeat first.
        try:
            reply = httpx.get(f"{url}{HEARTBEAT_PATH}", timeout=CONNECT_TIMEOUT)
        except httpx.HTTPError as exc:
            raise StoreError(
                f"cannot reach the Chroma server at {url}: {_describe(exc)}. {hint}"
            ) from exc
        if reply.status_code != 200:
            raise StoreError(
                f"{url} does not answer like a Chroma server (HTTP {reply.status_code} for "
                f"{HEARTBEAT_PATH}). {hint}"
            )
        try:
            client = chromadb.HttpClient(
                host=host, port=port, ssl=ssl, settings=Settings(anonymized_telemetry=False)
            )
        except Exception as exc:
            raise StoreError(
                f"cannot connect to the Chroma server at {url}: {_describe(exc)}. {hint}"
            ) from exc
        _clients[url] = client
        return client


def _collection_gone(exc: BaseException) -> bool:
    """Whether a Chroma error says the collection no longer exists (rebuilt under its name)."""
    return "does not exist" in str(exc).lower() or type(exc).__name__ == "NotFoundError"


def _describe(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def _collection_names(client: ClientAPI) -> list[str]:
    names: list[str] = []
    for item in client.list_collections():
        names.append(item if isinstance(item, str) else str(item.name))
    return sorted(names)


def _connect(
    path: str | Path, *, host: str, port: int, ssl: bool, create: bool, writable: bool
) -> tuple[ClientAPI, str, str]:
    """The client of the server or of the store on disk, with where it is and a hint.

    ``where`` names the store in messages; the hint says what to do when it cannot be read.
    """
    if host.strip():
        client = _server_client(host.strip(), port, ssl)
        return (
            client,
            f"the Chroma server at {server_url(host.strip(), port, ssl)}",
            "Check the server's log",
        )
    if not str(path).strip():
        raise StoreError(
            "the vector store path is empty: name a directory (--store, setting store_path "
            "or CRAG_STORE_PATH)"
        )
    resolved = Path(path).expanduser().resolve()
    client = _client(resolved, create=create, writable=writable)
    return (
        client,
        f"the vector store at '{resolved}'",
        "The store may be corrupt; delete the directory and run `crag ingest` again",
    )


def _existing_collections(client: ClientAPI, where: str, corrupt_hint: str) -> list[str]:
    try:
        return _collection_names(client)
    except Exception as exc:
        if looks_read_only(exc):
            corrupt_hint = f"It looks read-only for this user: {WRITE_HINT}"
        raise StoreError(f"cannot read {where}: {_describe(exc)}. {corrupt_hint}") from exc


class CheckedChroma(Chroma):
    """LangChain's Chroma whose searches fail with a :class:`StoreError` naming the store.

    The retrieve node searches the store directly; without this a damaged index reached the
    user as Chroma's ``InternalError`` traceback. A search that comes back short of chunks the
    collection holds is a vector index blocked by deleted chunks: it is rebuilt and the search
    run again (:mod:`crag.vectorstore.index_health`). A collection rebuilt by another process
    is found again by name.
    """

    def __init__(self, *, where: str, hint: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.where = where
        self.hint = hint

    def _search(self, search: Callable[[], _T]) -> _T:
        """Run ``search``; any failure but a :class:`StoreError` becomes one naming the store."""
        try:
            return search()
        except StoreError:
            raise
        except Exception as exc:
            if not _collection_gone(exc):
                raise StoreError(
                    f"cannot search {self.where}: {_describe(exc)}. {self.hint}"
                ) from exc
        # another process rebuilt the collection (a new id under the same name): reopen it
        try:
            self._chroma_collection = self._client.get_collection(self._collection_name)
            return search()
        except Exception as exc:
            raise StoreError(f"cannot search {self.where}: {_describe(exc)}. {self.hint}") from exc

    def _checked_search(
        self, search: Callable[[], _S], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> _S:
        """:meth:`_search`, then repair a damaged vector index and search again.

        A search of ``k`` that returns fewer than the collection holds (matching its metadata
        filter) met deleted chunks that block the index: see
        :mod:`crag.vectorstore.index_health`. ``args``/``kwargs``: the search's own, which
        say ``k`` and the filter (LangChain's order: query, k, filter, where_document).
        """
        found = self._search(search)
        k = kwargs.get("k", args[1] if len(args) > 1 else 4)
        where = kwargs.get("filter", args[2] if len(args) > 2 else None)
        if len(found) >= k or kwargs.get("where_document") or len(args) > 3:
            return found
        # imported here: index_health takes the write lock, whose module imports this one
        from crag.vectorstore.index_health import matching_chunks, repair_search

        expected = self._search(partial(matching_chunks, self._collection, k, where))
        if len(found) >= expected:
            return found
        repaired = repair_search(self, partial(self._search, search), len(found), expected)
        return found if repaired is None else repaired

    def similarity_search_with_score(
        self, *args: Any, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """Chroma's, failing with :class:`StoreError`; a damaged index is repaired."""
        search = partial(super().similarity_search_with_score, *args, **kwargs)
        return self._checked_search(search, args, kwargs)

    def similarity_search_with_vectors(
        self, *args: Any, **kwargs: Any
    ) -> list[tuple[Document, Any]]:
        """Chroma's, failing with :class:`StoreError`; a damaged index is repaired."""
        search = partial(super().similarity_search_with_vectors, *args, **kwargs)
        return self._checked_search(search, args, kwargs)

    def similarity_search_by_vector(self, *args: Any, **kwargs: Any) -> list[Document]:
        """Chroma's, failing with :class:`StoreError`; a damaged index is repaired."""
        search = partial(super().similarity_search_by_vector, *args, **kwargs)
        return self._checked_search(search, args, kwargs)

    def similarity_search_by_vector_with_relevance_scores(
        self, *args: Any, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """Chroma's, failing with :class:`StoreError`; a damaged index is repaired."""
        search = partial(super().similarity_search_by_vector_with_relevance_scores, *args, **kwargs)
        return self._checked_search(search, args, kwargs)

    def max_marginal_relevance_search_by_vector(self, *args: Any, **kwargs: Any) -> list[Document]:
        """Chroma's, failing with :class:`StoreError`."""
        search = super().max_marginal_relevance_search_by_vector
        return self._search(partial(search, *args, **kwargs))


def _finish_rebuild(client: ClientAPI, collection: str, where: str, hint: str) -> list[str]:
    """Complete or undo a rebuild of the collection's index that a crash interrupted.

    Returns:
        The collections of the store afterwards.
    """
    # imported here: index_health takes the write lock, whose module imports this one
    from crag.vectorstore.index_health import finish_interrupted_rebuild

    try:
        finish_interrupted_rebuild(client, collection)
    except Exception as exc:
        raise StoreError(
            f"cannot finish an interrupted rebuild of collection {collection!r} in {where}: "
            f"{_describe(exc)}"
        ) from exc
    return _existing_collections(client, where, hint)


def _collections_after_rebuilds(
    client: ClientAPI, collection: str, where: str, hint: str, directory: Path | None
) -> list[str]:
    """The store's collections, once an interrupted rebuild of ``collection`` is tidied up.

    Not while another process holds the write lock of the store on disk (``directory``): then
    the leftovers may be a rebuild in progress (its copy still filling, or the swap half done),
    not a crash's; that process finishes it, and this one opens what is there.
    """
    existing = _existing_collections(client, where, hint)
    if not any(name.startswith(f"{collection}-crag-") for name in existing):
        return existing
    if directory is None:  # a Chroma server: no lock across processes (see locking)
        return _finish_rebuild(client, collection, where, hint)
    # imported here: locking imports this module
    from crag.vectorstore.locking import unless_locked

    with unless_locked(directory) as free:
        if free:
            return _finish_rebuild(client, collection, where, hint)
    logger.info("another process is writing %s; its rebuild of the index is left to it", where)
    return existing


def open_store(
    path: str | Path,
    collection: str,
    embeddings: Embeddings,
    *,
    create: bool,
    host: str = "",
    port: int = 8000,
    ssl: bool = False,
    writable: bool = False,
) -> Chroma:
    """Open (or create) a collection of the Chroma store at ``path`` or on a Chroma server.

    Args:
        path: Directory of the persistent store (ignored when ``host`` is given).
        collection: Collection name (3-512 characters of ``[a-zA-Z0-9._-]``).
        embeddings: Embedder used for documents and queries.
        create: Create the directory and the collection when missing; when ``False`` a missing
            store or collection is an error.
        host: Host of a Chroma server (``chroma run``); empty: the store on disk at ``path``.
        port: Port of the Chroma server.
        ssl: Use HTTPS to reach the Chroma server.
        writable: The caller will write: refuse a read-only store on disk at once, rather
            than opening it from a copy (as for answering questions).

    Returns:
        The LangChain Chroma vector store; its searches raise :class:`StoreError`.

    Raises:
        StoreError: The store is missing, not a Chroma store, corrupt (its vector index cut
            short included), read-only (with ``writable``), unreachable, or lacks the
            collection.
    """
    client, where, corrupt_hint = _connect(
        path, host=host, port=port, ssl=ssl, create=create, writable=writable
    )
    directory = None if host.strip() else Path(path)
    existing = _collections_after_rebuilds(client, collection, where, corrupt_hint, directory)
    if not create and collection not in existing:
        listing = ", ".join(repr(n) for n in existing) if existing else "none"
        raise StoreError(
            f"no collection {collection!r} in {where} (collections there: {listing}); ingest "
            "documents into it first or pick an existing collection"
        )
    try:
        store = CheckedChroma(
            where=where,
            hint=corrupt_hint,
            client=client,
            collection_name=collection,
            embedding_function=embeddings,
            create_collection_if_not_exists=create,
        )
    except Exception as exc:
        raise StoreError(
            f"cannot open collection {collection!r} in {where}: {_describe(exc)}"
        ) from exc
    logger.debug("opened collection %r in %s", collection, where)
    return store


def count(store: Chroma) -> int:
    """Return the number of chunks in the store's collection.

    Raises:
        StoreError: The store cannot be read.
    """
    try:
        return int(store._collection.count())
    except Exception as exc:
        raise StoreError(f"cannot count the vector store's chunks: {_describe(exc)}") from exc


def retrieve(store: Chroma, question: str, k: int) -> list[RetrievedPassage]:
    """Return the ``k`` chunks most similar to ``question``, best first.

    Args:
        store: The vector store.
        question: The query text.
        k: How many passages to return (fewer when the store holds fewer).

    Returns:
        Passages with their text, source and chunk index; ``score`` is ``None`` (ungraded).

    Raises:
        StoreError: The search fails.
    """
    if k <= 0:
        return []
    try:
        docs = store.similarity_search(question, k=k)
    except StoreError:
        raise
    except Exception as exc:
        raise StoreError(f"vector store search failed: {_describe(exc)}") from exc
    passages: list[RetrievedPassage] = []
    for doc in docs:
        meta: dict[str, Any] = doc.metadata or {}
        passages.append(
            RetrievedPassage(
                text=doc.page_content,
                source=str(meta.get("source", "")),
                chunk=_as_int(meta.get("chunk", 0)),
                score=None,
            )
        )
    return passages


def _as_int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def close_stores() -> None:
    """Close every cached Chroma client (``crag serve`` reopening changed stores, or tests)."""
    with _clients_lock:
        for key, client in list(_clients.items()):
            _close_client(client)
            _forget_failed_system(key)
        _clients.clear()
        _opened_state.clear()
        for copy in list(SNAPSHOTS):
            _forget_failed_system(copy)
            remove_snapshot(Path(copy))
        SNAPSHOTS.clear()
