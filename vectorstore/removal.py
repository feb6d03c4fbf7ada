"""Remove documents from the store: by source, or because their files are gone (pruning).

Both hold the store's write lock and first repair what interrupted ingestions left behind,
like ingestion itself.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

from langchain_chroma import Chroma

from crag.vectorstore.lexical_store import refresh_lexical_index
from crag.vectorstore.locking import store_write_lock
from crag.vectorstore.pending import repair_interrupted, shorten
from crag.vectorstore.records import delete_sources, scan_pages
from crag.vectorstore.report import IngestReport
from crag.vectorstore.sources import lookalike_key, normalise_path, normalise_source

logger = logging.getLogger(__name__)


def _stored_files(store: Chroma) -> dict[str, str]:
    """``source -> file it came from`` for every source of every stored chunk."""
    files: dict[str, str] = {}
    for page in scan_pages(store, ["metadatas"], "the vector store"):
        for meta in page.get("metadatas") or []:
            if meta and isinstance(meta.get("source"), str):
                source = meta["source"]
                files[source] = str(meta.get("file") or source)
    return files


def _gone(file: str) -> bool:
    """Whether ``file`` no longer exists (a broken link counts; a permission error does not)."""
    try:
        os.stat(file)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        return False
    return False


def _under(file: str, folder: str) -> bool:
    return file == folder or file.startswith(folder.rstrip(os.sep) + os.sep)


def prune_missing(store: Chroma, paths: Sequence[str | Path]) -> list[str]:
    """Remove the stored documents under ``paths`` whose file no longer exists.

    A document is under a path when its file is that path or lies in that directory (a path
    that no longer exists itself counts too, so a deleted folder can be pruned). Documents
    whose source is not an absolute path (the bundled corpus, inline documents) are never
    pruned.

    Returns:
        The sources removed, sorted.

    Raises:
        StoreError: The store cannot be read or written (or is read-only).
    """
    folders = [str(Path(p).expanduser().absolute()) for p in paths]
    with store_write_lock(store) as directory:
        repair_interrupted(store, exclusive=directory is not None)
        gone = sorted(
            source
            for source, file in _stored_files(store).items()
            if os.path.isabs(file)
            and any(_under(file, folder) for folder in folders)
            and _gone(file)
        )
        delete_sources(store, gone, "documents whose files are gone")
        if gone:
            refresh_lexical_index(store)
    if gone:
        logger.info("pruned %d documents whose files are gone: %s", len(gone), shorten(gone))
    return gone


def _names(item: str) -> set[str]:
    """The names ``item`` may be stored under: as given, as a source, as a file's path.

    A path keeps its characters (:func:`~crag.vectorstore.sources.normalise_source`): it
    finds the file it names, never a look-alike file whose name differs in Unicode form.
    """
    if not item.strip():
        return set()
    names = {item, normalise_source(item)}
    if "\0" not in item:
        names |= {str(Path(item).expanduser().absolute()), normalise_path(item)}
    return names


def _by_name(stored: dict[str, str]) -> dict[str, set[str]]:
    """Each stored ``source -> file`` under every name that finds it.

    The source and the file, each as stored and in its one spelling: stores written before
    sources had one spelling keep their names.
    """
    found: dict[str, set[str]] = {}
    for source, file in stored.items():
        for name in {source, file, normalise_source(source), normalise_source(file)}:
            found.setdefault(name, set()).add(source)
    return found


def _lookalikes(item: str, stored: dict[str, str]) -> list[str]:
    """The stored files (or sources) that look like ``item`` without being it."""
    keys = {lookalike_key(name) for name in _names(item)}
    return sorted(
        {
            file
            for source, file in stored.items()
            if lookalike_key(source) in keys or lookalike_key(file) in keys
        }
    )


def _not_found(item: str, stored: dict[str, str]) -> str:
    """Why ``item`` removes nothing; a look-alike it may have meant is named, and logged."""
    lookalikes = _lookalikes(item, stored)
    if not lookalikes:
        return f"{item}: not in the store"
    reason = (
        f"{item}: not in the store under this exact name; a look-alike name (other Unicode "
        f"characters) is: {shorten(lookalikes)} (nothing removed; give that name exactly to "
        "remove it)"
    )
    logger.warning("%s", reason)
    return reason


def remove_sources(store: Chroma, sources: Sequence[str]) -> IngestReport:
    """Remove documents from the store by source.

    Each item is a stored source (``wikipedia:Title``, ``inline:...``, a file's absolute
    path, ``FILE#lineN``) or a file path (made absolute, ``..`` resolved); a JSON Lines file
    removes all its lines. A name with no file behind it matches in its one spelling (Unicode
    NFC, whitespace: :mod:`crag.vectorstore.sources`), as stored and as given; a path matches
    the file it names, by its characters: ``café.md`` in NFC never removes ``café.md`` in NFD,
    another file. An item that matches nothing but a look-alike removes nothing, and its
    ``failed`` message (also logged as a warning) names the look-alike.

    Returns:
        A report whose ``removed`` lists the sources removed and whose ``failed`` lists the
        items that matched nothing in the store.

    Raises:
        StoreError: The store cannot be read or written (or is read-only).
    """
    report = IngestReport()
    with store_write_lock(store) as directory:
        repair_interrupted(store, exclusive=directory is not None)
        stored = _stored_files(store)
        by_name = _by_name(stored)
        chosen: set[str] = set()
        for item in sources:
            matched = {source for key in _names(item) for source in by_name.get(key, ())}
            if not matched:
                report.failed.append((item, _not_found(item, stored)))
            chosen |= matched
        report.removed = sorted(chosen)
        delete_sources(store, report.removed, "the documents to remove")
        if report.removed:
            refresh_lexical_index(store)
    logger.info("removed %d documents", len(report.removed))
    return report
