"""Chunk, embed and store documents, idempotently.

Each chunk's id is ``"{sha1(source)}:{index}"`` and its metadata records the document's SHA-256,
so ingesting the same document twice embeds nothing, and a changed document replaces its old
chunks. A file that cannot be loaded is reported and skipped; the others are still ingested.
"""

from __future__ import annotations

import hashlib
import logging
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_chroma import Chroma
from langchain_text_splitters import RecursiveCharacterTextSplitter
from tqdm import tqdm

from vectorstore.loaders import LoadedDocument, LoaderError, iter_paths, load_file
from vectorstore.store import StoreError

logger = logging.getLogger(__name__)

EMBED_BATCH_SIZE = 512
"""Chunks embedded and written per batch.

Large batches matter on CPU: sentence-transformers sorts each call's texts by length before
padding, so one call of 512 chunks pads far less than eight calls of 64 (about twice the
throughput measured on the bundled corpus).
"""

_LOOKUP_BATCH_SIZE = 500

ChunkProgress = Callable[[int, int], None]
"""Called as chunks are written: ``(chunks_written, chunks_to_write)``, first with 0."""


@dataclass
class IngestReport:
    """What an ingestion did, per document source.

    Attributes:
        added: Sources stored for the first time.
        skipped: Sources already stored with the same content (nothing embedded).
        replaced: Sources whose content changed; their old chunks were replaced.
        failed: ``(source, error message)`` for documents that could not be ingested.
        chunks_added: Chunks embedded and written.
        removed: Sources deleted because they vanished from a re-ingested JSON Lines file.
    """

    added: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    chunks_added: int = 0
    removed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether every document was ingested (nothing failed)."""
        return not self.failed

    def summary(self) -> str:
        """Return a one-line human summary, e.g. ``2 added, 1 replaced, ... (12 chunks)``."""
        parts = [
            f"{len(self.added)} added",
            f"{len(self.replaced)} replaced",
            f"{len(self.skipped)} unchanged",
            f"{len(self.failed)} failed",
        ]
        if self.removed:
            parts.append(f"{len(self.removed)} removed")
        chunks = "chunk" if self.chunks_added == 1 else "chunks"
        return f"{', '.join(parts)} ({self.chunks_added} {chunks} embedded)"


def chunk_id(source: str, index: int) -> str:
    """Return the deterministic id of chunk ``index`` of ``source``."""
    return f"{hashlib.sha1(source.encode('utf-8')).hexdigest()}:{index}"


def _splitter(chunk_size: int, chunk_overlap: int) -> RecursiveCharacterTextSplitter:
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    if not 0 <= chunk_overlap < chunk_size:
        raise ValueError(
            f"chunk_overlap must be at least 0 and below chunk_size ({chunk_size}), "
            f"got {chunk_overlap}"
        )
    return RecursiveCharacterTextSplitter(chunk_size=chunk_size, chunk_overlap=chunk_overlap)


def split_text(text: str, chunk_size: int = 1000, chunk_overlap: int = 100) -> list[str]:
    """The non-blank chunks ingestion stores for ``text``."""
    return [c for c in _splitter(chunk_size, chunk_overlap).split_text(text) if c.strip()]


def _stored_hashes(store: Chroma, sources: Sequence[str]) -> dict[str, str]:
    """Return ``source -> sha256`` for the sources already in the store (via their chunk 0)."""
    found: dict[str, str] = {}
    for start in range(0, len(sources), _LOOKUP_BATCH_SIZE):
        batch = sources[start : start + _LOOKUP_BATCH_SIZE]
        try:
            result = store.get(ids=[chunk_id(s, 0) for s in batch], include=["metadatas"])
        except Exception as exc:
            raise StoreError(f"cannot read the vector store: {exc}") from exc
        for meta in result.get("metadatas") or []:
            if meta and isinstance(meta.get("source"), str):
                found[meta["source"]] = str(meta.get("sha256", ""))
    return found


@dataclass
class _Pending:
    ids: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    metadatas: list[dict[str, Any]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)


def _flush(store: Chroma, pending: _Pending, bar: tqdm[Any]) -> int:
    if not pending:
        return 0
    try:
        store.add_texts(pending.texts, metadatas=pending.metadatas, ids=pending.ids)
    except Exception as exc:
        raise StoreError(f"writing chunks to the vector store failed: {exc}") from exc
    written = len(pending)
    bar.update(written)
    pending.ids.clear()
    pending.texts.clear()
    pending.metadatas.clear()
    return written


def _ingest_into(
    report: IngestReport,
    docs: Iterable[LoadedDocument],
    store: Chroma,
    *,
    chunk_size: int,
    chunk_overlap: int,
    progress: bool,
    batch_size: int,
    on_progress: ChunkProgress | None = None,
) -> None:
    splitter = _splitter(chunk_size, chunk_overlap)
    unique: dict[str, LoadedDocument] = {}
    for doc in docs:
        if doc.source in unique:
            logger.warning("%s: given more than once; ingesting the first copy", doc.source)
            continue
        unique[doc.source] = doc
    stored = _stored_hashes(store, list(unique))

    # Plan first so the progress bar knows how many chunks will be embedded.
    plan: list[tuple[LoadedDocument, list[str], bool]] = []
    for doc in unique.values():
        previous = stored.get(doc.source)
        if previous == doc.sha256:
            report.skipped.append(doc.source)
            continue
        if not doc.text.strip():
            report.failed.append((doc.source, f"{doc.source}: no text to index (empty document)"))
            continue
        chunks = [c for c in splitter.split_text(doc.text) if c.strip()]
        if not chunks:
            report.failed.append((doc.source, f"{doc.source}: no text to index (empty document)"))
            continue
        plan.append((doc, chunks, previous is not None))

    total = sum(len(chunks) for _, chunks, _ in plan)
    pending = _Pending()
    written = 0

    def flush() -> None:
        nonlocal written
        flushed = _flush(store, pending, bar)
        if flushed:
            written += flushed
            report.chunks_added += flushed
            if on_progress is not None:
                on_progress(written, total)

    if on_progress is not None:
        on_progress(0, total)
    with tqdm(
        total=total,
        desc="embedding",
        unit="chunk",
        file=sys.stderr,
        disable=not progress or total == 0,
        leave=False,
    ) as bar:
        for doc, chunks, exists in plan:
            if exists:
                # Delete first: Chroma's upsert would merge old and new metadata.
                try:
                    store.delete(where={"source": doc.source})
                except Exception as exc:
                    raise StoreError(
                        f"cannot delete the old chunks of {doc.source}: {exc}"
                    ) from exc
                report.replaced.append(doc.source)
            else:
                report.added.append(doc.source)
            base: dict[str, Any] = {"source": doc.source, "sha256": doc.sha256}
            if doc.title:
                base["title"] = doc.title
            if doc.file:
                base["file"] = doc.file
            # Chunk 0 goes last: it marks the document as stored (see _stored_hashes), so an
            # interrupted run never leaves a document that looks complete but is not.
            for index in [*range(1, len(chunks)), 0]:
                pending.ids.append(chunk_id(doc.source, index))
                pending.texts.append(chunks[index])
                pending.metadatas.append({**base, "chunk": index})
                if len(pending) >= batch_size:
                    flush()
        flush()


def _prune_file(store: Chroma, file: str, keep: set[str]) -> list[str]:
    """Delete chunks of documents that came from ``file`` but are no longer in it."""
    try:
        result = store.get(where={"file": file}, include=["metadatas"])
    except Exception as exc:
        raise StoreError(f"cannot read the vector store: {exc}") from exc
    stale = sorted(
        {
            str(meta["source"])
            for meta in result.get("metadatas") or []
            if meta and meta.get("source") not in keep
        }
    )
    if stale:
        try:
            store.delete(where={"source": {"$in": stale}})
        except Exception as exc:
            raise StoreError(f"cannot delete stale chunks of {file}: {exc}") from exc
        logger.info("%s: removed %d documents no longer in the file", file, len(stale))
    return stale


def ingest_documents(
    docs: Iterable[LoadedDocument],
    store: Chroma,
    *,
    chunk_size: int = 1000,
    chunk_overlap: int = 100,
    progress: bool = True,
    batch_size: int = EMBED_BATCH_SIZE,
    on_progress: ChunkProgress | None = None,
) -> IngestReport:
    """Chunk, embed and store documents; unchanged documents are skipped.

    Args:
        docs: The documents.
        store: The vector store to write to.
        chunk_size: Largest chunk, in characters.
        chunk_overlap: Characters shared by consecutive chunks.
        progress: Show a progress bar over chunks on stderr.
        batch_size: Chunks embedded per batch.
        on_progress: Called with ``(chunks_written, chunks_to_write)`` after each batch.

    Returns:
        What was added, skipped, replaced or failed.

    Raises:
        StoreError: The store cannot be read or written.
        ValueError: Invalid chunking parameters.
    """
    report = IngestReport()
    _ingest_into(
        report,
        docs,
        store,
        chunk_size=chunk_size,
        chunk_overlap=chunk_overlap,
        progress=progress,
        batch_size=batch_size,
        on_progress=on_progress,
    )
    logger.info("ingestion: %s", report.summary())
    return report


def ingest(
    paths: Sequence[str | Path],
    store: Chroma,
    *,
    chunk_size: int = 1000,
    chunk_overlap: int = 100,
    progress: bool = True,
    on_progress: ChunkProgress | None = None,
) -> IngestReport:
    """Ingest files and directories (searched recursively) into the store.

    A file that cannot be loaded (unreadable, not UTF-8, unsupported type, malformed JSON
    line) is listed in ``report.failed`` and the other files are still ingested.

    Args:
        paths: Files and/or directories.
        store: The vector store to write to.
        chunk_size: Largest chunk, in characters.
        chunk_overlap: Characters shared by consecutive chunks.
        progress: Show a progress bar over chunks on stderr.
        on_progress: Called with ``(chunks_written, chunks_to_write)`` after each batch.

    Returns:
        What was added, skipped, replaced or failed.

    Raises:
        StoreError: The store cannot be read or written.
        ValueError: Invalid chunking parameters.
    """
    _splitter(chunk_size, chunk_overlap)  # fail fast on bad parameters, before loading
    report = IngestReport()
    docs: list[LoadedDocument] = []
    multi_files: dict[str, set[str]] = {}
    for path in iter_paths(paths):
        try:
            loaded = load_file(path)
        except LoaderError as exc:
            logger.warning("skipping %s", exc)
            report.failed.append((str(path), str(exc)))
            continue
        if not loaded:
            report.failed.append((str(path), f"{path}: no documents in file (it is empty)"))
            continue
        for doc in loaded:
            if doc.file:
                multi_files.setdefault(doc.file, set()).add(doc.source)
        docs.extend(loaded)
    _ingest_into(
        report,
        docs,
        store,
        chunk_size=chunk_size,
        chunk_overlap=chunk_overlap,
        progress=progress,
        batch_size=EMBED_BATCH_SIZE,
        on_progress=on_progress,
    )
    for file, keep in multi_files.items():
        report.removed.extend(_prune_file(store, file, keep))
    logger.info("ingestion: %s", report.summary())
    return report
