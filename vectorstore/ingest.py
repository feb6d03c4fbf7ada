"""Chunk, embed and store documents, idempotently, one writer at a time.

Each chunk's id is ``"{sha1(source)}:{index}"`` and its metadata records the document's SHA-256,
so ingesting the same document twice embeds nothing, and a changed document replaces its old
chunks. A file that cannot be loaded is reported and skipped; the others are still ingested.
How a call chunks, labels and writes (and, for files, which it reads) is one
:class:`~crag.vectorstore.ingest_options.IngestOptions`, passed down whole.

Every write holds the store's write lock (:mod:`crag.vectorstore.locking`), so a second ingestion of
the same files waits for the first and then finds them unchanged. The documents being written
are recorded in the collection (:mod:`crag.vectorstore.pending`): a run interrupted by Ctrl-C
removes its unfinished documents on the way out, and one killed outright is repaired by the next
writer; until then retrieval does not return their chunks
(:func:`~crag.vectorstore.pending.hide_unfinished`).
A cancelled run (its :class:`~crag.core.cancellation.CancelToken`: a served run cancelled, the
warm server's client gone) stops at the next file, document or batch of chunks and is undone as
after Ctrl-C.

**What one run may cost.** Every ingestion reads at most the operator's pages, paragraphs and
characters from one file (:mod:`crag.documents.limits`); a served run may also embed at most
``ingest_max_chunks`` chunks, counted before anything is embedded (a ``budget``).

**Who may change what.** Every chunk records its ``writer`` (:mod:`crag.vectorstore.records`): the
operator (``crag ingest``, the Python API, the bundled corpus) or a served run (the ``ingest``
graph, whose callers are whoever can reach the server). The operator may replace and remove
anything. A served run may add documents; what already stored it may replace or remove is the
operator's choice (setting ``ingest_run_replace``): by default nothing, since the server has no
notion of who its callers are and one caller must not change what another stored; ``"served"``
lets it replace what served runs stored (never the operator's documents, nor those stored
before writers were recorded), ``"all"`` anything. A document out of its reach is listed in
``failed`` and left as it is, and so is a line gone from a re-ingested JSON Lines file. A
document a served run stored that the operator ingests, even unchanged, becomes the operator's.
Whatever ``ingest_run_replace`` says, a served run changes only documents of its own caller's
kind (:meth:`~crag.vectorstore.sources.Writer.refuses`): a member's run only that member's
private documents, a shared run only shared ones; another's is listed in ``failed`` as
"already stored by someone else", naming no one.
Text that is not text (NUL characters, a high share of control characters) is refused.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from langchain_chroma import Chroma
from langchain_text_splitters import RecursiveCharacterTextSplitter
from tqdm import tqdm

from crag.core.cancellation import raise_if_cancelled
from crag.documents.confined import read_inside
from crag.documents.document import MetadataValue
from crag.documents.limits import ChunkBudget, FileLimits
from crag.documents.loaders import (
    LoadedDocument,
    LoaderError,
    iter_paths,
    load_file,
    not_text_reason,
    shown_path,
)
from crag.vectorstore.chunk_writer import ChunkBatches, ChunkWriter, Recheck
from crag.vectorstore.ingest_options import (
    DEFAULT_OPTIONS,
    EMBED_BATCH_SIZE,
    QUIET,
    ChunkProgress,
    IngestOptions,
)
from crag.vectorstore.lexical_store import refresh_lexical_index
from crag.vectorstore.locking import store_write_lock
from crag.vectorstore.pending import repair_interrupted
from crag.vectorstore.records import (
    StoredRecord,
    chunk_id,
    delete_sources,
    set_writer,
    stored_records,
)
from crag.vectorstore.removal import prune_missing, remove_sources
from crag.vectorstore.report import IngestReport
from crag.vectorstore.scope import NO_LABELS, ScopeLabels, relabel_unchanged
from crag.vectorstore.sources import (
    OPERATOR,
    REPLACE_SETTING,
    Writer,
    normalise_path,
    normalise_source,
    owner_of,
    unlocked_writer,
    writer_of,
)
from crag.vectorstore.store import StoreError, store_directory

__all__ = [
    "DEFAULT_OPTIONS",
    "EMBED_BATCH_SIZE",
    "QUIET",
    "ChunkProgress",
    "IngestOptions",
    "IngestReport",
    "chunk_id",
    "ingest_documents",
    "ingest_paths",
    "prune_missing",
    "remove_sources",
    "split_document",
    "split_text",
]

logger = logging.getLogger(__name__)


def _stored_by(writer: str) -> str:
    """Who stored a document, in words."""
    return "the operator" if writer == OPERATOR else "a run of the ingest graph"


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


def split_document(
    doc: LoadedDocument, splitter: RecursiveCharacterTextSplitter
) -> tuple[list[str], list[dict[str, MetadataValue]]]:
    """The document's non-blank chunks, and each chunk's location metadata.

    Each section is split on its own (no chunk spans two pages, slides or sheets), and its
    chunks carry its location fields (:meth:`~crag.documents.document.Section.metadata`); a
    document without sections is split whole, without location.
    """
    chunks: list[str] = []
    locations: list[dict[str, MetadataValue]] = []
    for section in doc.parts():
        if not section.text.strip():
            continue
        fields = section.metadata()
        for chunk in splitter.split_text(section.text):
            if chunk.strip():
                chunks.append(chunk)
                locations.append(fields)
    return chunks, locations


@dataclass(frozen=True)
class _Run:
    """One call's :class:`IngestOptions`, with what is made of them before anything is loaded."""

    options: IngestOptions
    splitter: RecursiveCharacterTextSplitter
    writer: Writer
    """``options.writer``; on a store without a lock across processes, its unlocked variant."""
    scope: ScopeLabels = NO_LABELS
    budget: ChunkBudget | None = None
    """The chunks a served run may still embed (``None``: no limit, the operator's runs)."""


def _run_of(
    store: Chroma, options: IngestOptions, budget: ChunkBudget | None, *, files: bool
) -> _Run:
    """Check the chunking and tags (``ValueError``), and resolve the writer and the budget.

    ``files``: the documents are files (their labels say so, see :mod:`crag.vectorstore.scope`).
    """
    splitter = _splitter(options.chunk_size, options.chunk_overlap)
    writer = options.writer
    scope = ScopeLabels.given(options.tags, files=files, owner=writer.owner)
    writer = unlocked_writer(writer) if store_directory(store) is None else writer
    budget = budget if budget is not None else options.chunk_budget()
    return _Run(options, splitter, writer, scope, budget)


@dataclass(frozen=True)
class _Planned:
    """A new or changed document, its chunks, and whether an older version is stored."""

    doc: LoadedDocument
    chunks: list[str]
    exists: bool
    locations: list[dict[str, MetadataValue]]
    """Each chunk's location metadata (empty dicts for a document without sections)."""


def _unique(docs: Iterable[LoadedDocument]) -> dict[str, LoadedDocument]:
    """The documents by source; a source given twice keeps its first copy."""
    unique: dict[str, LoadedDocument] = {}
    for doc in docs:
        if doc.source in unique:
            logger.warning("%s: given more than once; ingesting the first copy", doc.source)
            continue
        unique[doc.source] = doc
    return unique


def _taken(source: str, stored_by: str, writer: Writer, stored_owner: str = "") -> str:
    """Why ``writer`` may not replace ``source``, which ``stored_by`` stored for ``stored_owner``.

    A document of another owner is said to be someone else's, naming neither who nor how.
    """
    if not writer.owns(stored_owner):
        return f"{source}: already stored by someone else; a run may change only its caller's own"
    if writer.unlocked:
        return (
            f"{source}: already stored by {_stored_by(stored_by)}; runs may not replace "
            "documents in a store on a Chroma server (no lock holds there between the check "
            "and the write)"
        )
    return (
        f"{source}: already stored by {_stored_by(stored_by)}; this server does not let runs "
        f"replace it ({REPLACE_SETTING})"
    )


def _recheck(store: Chroma, writer: Writer) -> Recheck | None:
    """The look-up just before each batch of a new document's chunks is written, or ``None``.

    Only for a writer on a store without a lock across processes (a Chroma server): it refuses
    a source someone else stored since the plan (see
    :class:`~crag.vectorstore.chunk_writer.ChunkWriter`).
    """
    if not writer.unlocked:
        return None

    def taken(sources: list[str]) -> dict[str, str]:
        now = stored_records(store, sources)
        return {
            s: _taken(s, r.writer, writer, owner_of(r.metadata))
            for s, r in now.items()
            if writer.refuses(r.writer, owner_of(r.metadata))
        }

    return taken


def _refusal(doc: LoadedDocument, previous: StoredRecord | None, writer: Writer) -> str | None:
    """Why ``doc`` may not be written (another writer's document, not text), or ``None``."""
    if previous is not None:
        owner = owner_of(previous.metadata)
        if writer.refuses(previous.writer, owner):
            return _taken(doc.source, previous.writer, writer, owner)
    reason = not_text_reason(doc.text)
    return f"{doc.source}: {reason}" if reason is not None else None


def _plan(
    report: IngestReport,
    docs: Iterable[LoadedDocument],
    stored: dict[str, StoredRecord],
    run: _Run,
) -> list[_Planned]:
    """The documents to write with their chunks; the others go to the report."""
    plan: list[_Planned] = []
    for doc in docs:
        raise_if_cancelled()
        previous = stored.get(doc.source)
        if previous is not None and previous.sha256 == doc.sha256:
            report.skipped.append(doc.source)
            continue
        refusal = _refusal(doc, previous, run.writer)
        if refusal is not None:
            logger.info("%s", refusal)  # listed in report.failed, for the caller to show
            report.failed.append((doc.source, refusal))
            continue
        chunks, locations = split_document(doc, run.splitter)
        if not chunks:
            report.failed.append((doc.source, f"{doc.source}: no text to index (empty document)"))
            continue
        if run.budget is not None:
            run.budget.take(len(chunks))  # refused here: nothing embedded or written yet
        plan.append(_Planned(doc, chunks, previous is not None, locations))
    return plan


def _take_over(
    store: Chroma, unchanged: list[str], stored: dict[str, StoredRecord], writer: Writer
) -> None:
    """The operator ingesting, unchanged, documents a served run stored makes them its own.

    Else a caller could plant a file's exact text before the operator ingests the file, and
    replace it with anything later. Only the ``writer`` field changes: nothing is embedded.
    """
    if writer.name != OPERATOR:
        return
    theirs = [s for s in unchanged if s in stored and stored[s].writer != OPERATOR]
    if theirs:
        set_writer(store, theirs, OPERATOR)
        logger.info("now recorded as the operator's: %s", ", ".join(theirs[:5]))


def _write_documents(
    report: IngestReport,
    docs: Iterable[LoadedDocument],
    store: Chroma,
    run: _Run,
) -> None:
    """Plan and write the documents that are new or changed; the caller holds the lock."""
    batch_size, on_progress = run.options.batch_size, run.options.on_progress
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    unique = _unique(docs)
    stored = stored_records(store, list(unique))
    # Plan first so the progress bar knows how many chunks will be embedded.
    plan = _plan(report, unique.values(), stored, run)
    _take_over(store, report.skipped, stored, run.writer)
    unchanged = [unique[source] for source in report.skipped if source in unique]
    relabel_unchanged(report, store, unchanged, run.scope, run.writer, stored)
    total = sum(len(planned.chunks) for planned in plan)
    writer = ChunkWriter(store, _recheck(store, run.writer))
    if on_progress is not None:
        on_progress(0, total)
    with tqdm(
        total=total,
        desc="embedding",
        unit="chunk",
        file=sys.stderr,
        disable=not run.options.progress or total == 0,
        leave=False,
    ) as bar:

        def flushed(count: int, written: int) -> None:
            bar.update(count)
            report.chunks_added += count
            if on_progress is not None:
                on_progress(written, total)

        batches = ChunkBatches(writer, batch_size, flushed, run.writer.name, run.scope)
        try:
            for planned in plan:
                (report.replaced if planned.exists else report.added).append(planned.doc.source)
                batches.add(planned.doc, planned.chunks, planned.locations)
            batches.flush()
        except BaseException:
            writer.abandon()
            raise
    writer.finish()
    for source, why in writer.refused.items():
        logger.warning("%s", why)
        (report.added if source in report.added else report.replaced).remove(source)
        report.failed.append((source, why))


def _write_under_lock(
    report: IngestReport,
    docs: Iterable[LoadedDocument],
    store: Chroma,
    run: _Run,
    then: Callable[[], None] | None = None,
) -> IngestReport:
    """Write ``docs`` under the store's write lock; ``then`` runs before it is released.

    What interrupted ingestions left behind is repaired first.
    """
    with store_write_lock(store) as directory:
        repair_interrupted(store, exclusive=directory is not None)
        _write_documents(report, docs, store, run)
        if then is not None:
            then()
        if report.added or report.replaced or report.removed:
            refresh_lexical_index(store)
    logger.info("ingestion: %s", report.summary())
    return report


def _stale_lines(store: Chroma, file: str, keep: set[str]) -> dict[str, tuple[str, str]]:
    """``source -> (writer, owner)`` of the stored documents of ``file`` no longer in it.

    A document any of whose chunks the operator wrote counts as the operator's.
    """
    try:
        result = store.get(where={"file": file}, include=["metadatas"])
    except Exception as exc:
        raise StoreError(f"cannot read the vector store: {exc}") from exc
    stale: dict[str, tuple[str, str]] = {}
    for meta in result.get("metadatas") or []:
        if meta and meta.get("source") not in keep:
            source = str(meta["source"])
            if stale.get(source, ("", ""))[0] != OPERATOR:
                stale[source] = (writer_of(meta), owner_of(meta))
    return stale


def _prune_file(
    report: IngestReport, store: Chroma, file: str, keep: set[str], writer: Writer
) -> None:
    """Delete the documents that came from ``file`` but are no longer in it.

    Those ``writer`` may not remove are kept and listed in ``report.failed``.
    """
    stale = _stale_lines(store, file, keep)
    gone = sorted(source for source, (by, owner) in stale.items() if not writer.refuses(by, owner))
    for source in sorted(set(stale) - set(gone)):
        by, owner = stale[source]
        message = (
            f"{source}: no longer in {file}, but stored by {_stored_by(by)}; this "
            f"server does not let runs remove it ({REPLACE_SETTING})"
            if writer.owns(owner)
            else f"{source}: no longer in {file}, but stored by someone else; a run may "
            "remove only its caller's own documents"
        )
        logger.warning("%s", message)
        report.failed.append((source, message))
    if gone:
        delete_sources(store, gone, f"documents no longer in {file}")
        logger.info("%s: removed %d documents no longer in the file", file, len(gone))
    report.removed.extend(gone)


def ingest_documents(
    docs: Iterable[LoadedDocument],
    store: Chroma,
    options: IngestOptions = DEFAULT_OPTIONS,
    *,
    budget: ChunkBudget | None = None,
) -> IngestReport:
    """Chunk, embed and store documents; unchanged documents are skipped.

    Holds the store's write lock throughout, and first repairs what interrupted ingestions
    left behind.

    Args:
        docs: The documents; each source is stored in its one spelling
            (:func:`~crag.vectorstore.sources.normalise_source`: a name in NFC with its
            whitespace collapsed, a path with its characters kept).
        store: The vector store to write to.
        options: The chunking, progress, writer, tags and chunk limit (see
            :class:`~crag.vectorstore.ingest_options.IngestOptions`); those for files only
            (``root``, ``prune``, ``limits``) do not apply to documents given as text.
        budget: The run's chunk count when it spans several calls (files, then documents);
            ``None``: a fresh one from ``options.max_chunks``.

    Returns:
        What was added, skipped, replaced, relabelled or failed.

    Raises:
        StoreError: The store cannot be read or written (or is read-only).
        ValueError: Invalid chunking parameters or tags.
        ChunkLimitError: The documents would take more chunks than the budget has left
            (nothing is written).
        RunCancelledError: The run was cancelled; its unfinished documents were removed.
    """
    run = _run_of(store, options, budget, files=False)
    named = (replace(doc, source=normalise_source(doc.source)) for doc in docs)
    return _write_under_lock(IngestReport(), named, store, run)


def _load_paths(
    paths: Sequence[str | Path], root: Path | None, report: IngestReport, limits: FileLimits
) -> tuple[list[LoadedDocument], dict[str, set[str]]]:
    """Load the files; return the documents and, per JSON Lines file, its sources."""
    docs: list[LoadedDocument] = []
    multi_files: dict[str, set[str]] = {}
    for named in iter_paths(paths):
        raise_if_cancelled()
        path = Path(normalise_path(named))  # one source per file, however it is named
        try:
            # under a root: opened first, what was opened checked, then read (no swap between)
            data = read_inside(path, root) if root is not None else None
            loaded = load_file(path, limits, data=data)
        except LoaderError as exc:
            # the caller lists report.failed (crag ingest prints each once): info, not warning
            logger.info("skipping %s", exc)
            report.failed.append((shown_path(path), str(exc)))
            continue
        if not loaded:
            report.failed.append((str(path), f"{path}: no documents in file (it is empty)"))
            continue
        for doc in loaded:
            if doc.file:
                multi_files.setdefault(doc.file, set()).add(doc.source)
        docs.extend(loaded)
    return docs, multi_files


def _remove_stale(
    report: IngestReport,
    store: Chroma,
    multi_files: dict[str, set[str]],
    writer: Writer,
    pruned: Sequence[str | Path] | None,
) -> None:
    """Remove lines gone from re-ingested JSON Lines files, and vanished files' documents.

    ``pruned``: the paths given to ``--prune`` (``None``: no pruning).
    """
    for file, keep in multi_files.items():
        _prune_file(report, store, file, keep, writer)
    if pruned is not None:
        report.removed.extend(prune_missing(store, pruned))


def ingest_paths(
    paths: Sequence[str | Path],
    store: Chroma,
    options: IngestOptions = DEFAULT_OPTIONS,
    *,
    budget: ChunkBudget | None = None,
) -> IngestReport:
    """Ingest files and directories (searched recursively) into the store.

    A file that cannot be loaded (unreadable, not UTF-8, unsupported type, malformed JSON
    line, not a regular file, past a limit) is listed in ``report.failed``; the others go on.

    Args:
        paths: Files and/or directories.
        store: The vector store to write to.
        options: As for :func:`ingest_documents`, and for files: ``root`` (only files whose
            real path lies in it are read), ``prune`` (also remove the stored documents under
            ``paths`` whose files no longer exist, see :func:`prune_missing`; the operator's
            alone) and ``limits`` (most pages, paragraphs, characters read per file).
        budget: As for :func:`ingest_documents`.

    Returns:
        What was added, skipped, replaced, removed or failed.

    Raises:
        StoreError: The store cannot be read or written (or is read-only).
        ValueError: Invalid chunking parameters or tags, or ``prune`` asked of a writer other
            than the operator.
        ChunkLimitError, RunCancelledError: As for :func:`ingest_documents`.
    """
    if options.prune and options.writer.name != OPERATOR:
        raise ValueError("pruning is for the operator only (crag ingest --prune)")
    # Bad chunking parameters or tags fail fast, before loading.
    run = _run_of(store, options, budget, files=True)
    root = options.root
    base = Path(root).expanduser().resolve() if root is not None else None
    report = IngestReport()
    limits = options.limits or FileLimits.configured()
    docs, multi_files = _load_paths(paths, base, report, limits)
    pruned = paths if options.prune else None
    then = functools.partial(_remove_stale, report, store, multi_files, run.writer, pruned)
    return _write_under_lock(report, docs, store, run, then=then)
