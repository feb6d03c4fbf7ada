"""Ingestion and removal on the store that the settings name (what ``crag ingest`` runs).

:mod:`crag.vectorstore.ingest` and :mod:`crag.vectorstore.removal` work on an opened store; the
functions here open the store a :class:`~crag.settings.run_settings.RunSettings` or
:class:`~crag.settings.run_settings.IngestSettings` names (on disk, or on a Chroma server), with the
process-wide embedder whose calls are serialised with every run's, and then ingest or remove. The
CLI, the Python API (:mod:`crag.app.api`) and the served ingestion graph
(:mod:`crag.graph.ingest_graph`) all go through them; the CLI and the Python API write as the
operator, the served graph as a served run (see :mod:`crag.vectorstore.ingest` for what each may
replace).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from langchain_core.embeddings import Embeddings

from crag.settings.run_settings import IngestSettings, RunSettings
from crag.settings.scope_settings import check_tags
from crag.vectorstore.ingest_options import DEFAULT_OPTIONS, IngestOptions

if TYPE_CHECKING:
    from langchain_chroma import Chroma

    from crag.documents.loaders import LoadedDocument
    from crag.vectorstore.ingest import IngestReport

INLINE_SOURCE_PREFIX = "inline:"
"""Source of an inline document given without one: ``inline:`` and a hash of its text."""


def inline_document(
    text: str, source: str | None = None, title: str | None = None
) -> LoadedDocument:
    """A document given as text rather than a file.

    Args:
        text: The document text.
        source: Its identifier in the store (re-ingesting the same source replaces or skips
            it); default ``inline:`` and the first 16 hex digits of the text's SHA-1.
        title: Its title, put on the first line (as for the bundled corpus) unless the text
            already starts with it.
    """
    from crag.documents.loaders import LoadedDocument

    body = text.strip()
    clean_title = title.strip() if title and title.strip() else None
    if clean_title and not body.startswith(clean_title):
        body = f"{clean_title}\n{body}"
    name = source.strip() if source and source.strip() else ""
    if not name:
        name = INLINE_SOURCE_PREFIX + hashlib.sha1(body.encode("utf-8")).hexdigest()[:16]
    return LoadedDocument(
        source=name,
        text=body,
        sha256=hashlib.sha256(body.encode("utf-8")).hexdigest(),
        title=clean_title,
    )


def open_configured_store(
    settings: RunSettings | IngestSettings, *, create: bool, writable: bool = False
) -> Chroma:
    """Open the store the settings name: on disk, or on a Chroma server when ``chroma_host``.

    The embedder is the process-wide one, its calls serialised with every run's. With
    ``writable`` a read-only store on disk is refused at once (see ``open_store``).
    """
    from crag.vectorstore.embeddings import locked_embeddings
    from crag.vectorstore.store import open_store

    return open_store(
        settings.deployment.store_path,
        settings.deployment.collection,
        locked_embeddings(settings.deployment.embedder),
        create=create,
        host=settings.deployment.chroma_host,
        port=settings.deployment.chroma_port,
        ssl=settings.deployment.chroma_ssl,
        writable=writable,
    )


def _chunked_as(options: IngestOptions, settings: RunSettings | IngestSettings) -> IngestOptions:
    """``options`` with the chunking an :class:`IngestSettings` sets (a plain context sets none)."""
    if isinstance(settings, IngestSettings):
        return replace(
            options, chunk_size=settings.chunk_size, chunk_overlap=settings.chunk_overlap
        )
    return options


def ingest_into_store(
    paths: Sequence[str | Path],
    settings: RunSettings | IngestSettings | None = None,
    options: IngestOptions = DEFAULT_OPTIONS,
    *,
    documents: Sequence[LoadedDocument] = (),
) -> IngestReport:
    """Ingest files, directories and inline documents into the configured store.

    One ingestion at a time per store: a second one waits for the first, then finds its
    documents unchanged. A read-only store is refused with an error that says so.

    Args:
        paths: Files and/or directories (searched recursively).
        settings: Which store (``store_path`` or ``chroma_host``/``chroma_port``, and
            ``collection``) and embedder, and the per-file limits; an :class:`IngestSettings`
            also sets the chunking (its ``chunk_size`` and ``chunk_overlap`` replace the
            options').
        options: How to ingest (see :class:`~crag.vectorstore.ingest_options.IngestOptions`):
            ``prune``, ``root``, the progress bar and ``on_progress`` (files first, then inline
            documents), the writer (the operator by default: anything may be replaced), the
            tags (a document's tags are those of its latest ingestion) and ``max_chunks`` (files
            and documents together). Files: its ``limits``, else the settings' per-file limits.
        documents: Documents given as text (see :func:`inline_document`).

    Returns:
        One report for files and documents: added, skipped, replaced, relabelled, removed,
        failed, chunks.

    Raises:
        StoreError: The store cannot be opened, read or written, or is read-only.
        ValueError: Invalid chunking parameters or tags.
        ChunkLimitError, RunCancelledError: See :func:`~crag.vectorstore.ingest.ingest_paths`.
    """
    from crag.documents.limits import FileLimits
    from crag.vectorstore.ingest import IngestReport, ingest_documents, ingest_paths

    settings = settings or RunSettings()
    options = replace(_chunked_as(options, settings), tags=check_tags(options.tags))
    budget = options.chunk_budget()  # one count for the files and the documents
    store = open_configured_store(settings, create=True, writable=True)
    report = IngestReport()
    if paths:
        limits = options.limits or FileLimits.configured(settings.deployment)
        report = ingest_paths(list(paths), store, replace(options, limits=limits), budget=budget)
    if documents:
        report.extend(ingest_documents(documents, store, options, budget=budget))
    return report


def remove_from_store(
    sources: Sequence[str], settings: RunSettings | IngestSettings | None = None
) -> IngestReport:
    """Remove documents from the configured store (it must exist).

    Args:
        sources: Stored sources (``wikipedia:Title``, ``inline:...``, ``FILE#lineN``) or file
            paths; a JSON Lines file removes all its lines.
        settings: Which store and collection.

    Returns:
        A report: ``removed`` lists the sources removed, ``failed`` the items not in the store.

    Raises:
        StoreError: The store is missing, cannot be read or written, or is read-only.
    """
    from crag.vectorstore.removal import remove_sources
    from crag.vectorstore.store import open_store

    settings = settings or RunSettings()
    store = open_store(
        settings.deployment.store_path,
        settings.deployment.collection,
        _NoEmbeddings(),  # removing embeds nothing: do not load the embedder
        create=False,
        host=settings.deployment.chroma_host,
        port=settings.deployment.chroma_port,
        ssl=settings.deployment.chroma_ssl,
        writable=True,
    )
    return remove_sources(store, sources)


class _NoEmbeddings(Embeddings):
    """The embedder of a store opened only to delete from it: any embedding is a bug."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise RuntimeError("this store was opened for removal only; it cannot embed")

    def embed_query(self, text: str) -> list[float]:
        raise RuntimeError("this store was opened for removal only; it cannot embed")
