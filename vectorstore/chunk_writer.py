"""Write chunks in batches, recording the documents still unfinished before each batch.

:class:`ChunkBatches` gathers documents' chunks into batches and hands each full one to a
:class:`ChunkWriter`, which records the documents the batch leaves unfinished in the collection
(:mod:`crag.vectorstore.pending`) before writing it, so that an interrupted run can be cleaned up.
Before each batch the run's cancellation token is looked at (:mod:`crag.core.cancellation`): a
cancelled run stops there, so it embeds at most one more batch after the cancel.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_chroma import Chroma

from crag.core.cancellation import raise_if_cancelled
from crag.documents.loaders import LoadedDocument
from crag.vectorstore.disk_space import check_room, full_disk_problem
from crag.vectorstore.pending import abandon_run, clear_pending, mark_pending, new_run_id, shorten
from crag.vectorstore.records import chunk_id, delete_sources
from crag.vectorstore.scope import NO_LABELS, ScopeLabels
from crag.vectorstore.sources import OPERATOR
from crag.vectorstore.store import StoreError

logger = logging.getLogger(__name__)

Recheck = Callable[[list[str]], dict[str, str]]
"""Given the sources of a batch about to be written, ``source -> why`` for those that may no
longer be (stored by someone else meanwhile, on a store no lock guards across processes)."""


@dataclass
class ChunkBatch:
    """Chunks waiting to be embedded and written together."""

    ids: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    metadatas: list[dict[str, Any]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)

    def clear(self) -> None:
        """Empty the batch once it is written."""
        self.ids.clear()
        self.texts.clear()
        self.metadatas.clear()


class ChunkWriter:
    """Writes batches of chunks, recording the unfinished documents before each batch.

    A document's old chunks (an earlier version, or leftovers) are deleted just before its first
    batch is written, so until then the store keeps the old version whole.
    """

    def __init__(self, store: Chroma, recheck: Recheck | None = None) -> None:
        self.store = store
        self.recheck = recheck
        self.run_id = new_run_id()
        self.recorded = False
        self.started: set[str] = set()
        self.unfinished: set[str] = set()
        self.refused: dict[str, str] = {}
        """``source -> why``: documents ``recheck`` refused just before a batch of theirs."""

    def _drop_refused(self, batch: ChunkBatch) -> None:
        """Ask ``recheck`` about the documents in ``batch``; leave the refused ones out.

        Asked before every batch, not only a document's first: chunk 0 goes last, so a record
        already stored for a document this run is still writing is someone else's. What this
        run wrote of a refused document is left as it is (the other writer replaced it, or
        will); it is no longer this run's to remove on an interruption.
        """
        if self.recheck is None:
            return
        in_batch = list(dict.fromkeys(str(m["source"]) for m in batch.metadatas))
        asked = [source for source in in_batch if source not in self.refused]
        if asked:
            self.refused.update(self.recheck(asked))
        self.unfinished -= set(self.refused)
        kept = [i for i, meta in enumerate(batch.metadatas) if meta["source"] not in self.refused]
        batch.ids[:] = [batch.ids[i] for i in kept]
        batch.texts[:] = [batch.texts[i] for i in kept]
        batch.metadatas[:] = [batch.metadatas[i] for i in kept]

    def write(self, batch: ChunkBatch) -> int:
        """Record the batch's documents as unfinished, then write it; the chunks written.

        A batch the store's disk has no room for is refused before anything of it is written
        (:mod:`crag.vectorstore.disk_space`).

        With ``recheck``, the batch's documents are looked up once more just before anything
        of theirs is written or deleted; those it refuses are left out (and go to
        :attr:`refused`).
        """
        self._drop_refused(batch)
        if not batch:
            return 0
        if (no_room := check_room(self.store, batch.texts, batch.metadatas)) is not None:
            raise StoreError(no_room)
        in_batch = list(dict.fromkeys(str(m["source"]) for m in batch.metadatas))
        starting = [source for source in in_batch if source not in self.started]
        mark_pending(self.store, self.run_id, self.unfinished | set(in_batch))
        self.recorded = True
        delete_sources(self.store, starting, "the old versions of changed documents")
        self.started.update(starting)
        try:
            self.store.add_texts(batch.texts, metadatas=batch.metadatas, ids=batch.ids)
        except Exception as exc:
            why = (
                full_disk_problem(self.store) or f"writing chunks to the vector store failed: {exc}"
            )
            raise StoreError(why) from exc
        done = {str(m["source"]) for m in batch.metadatas if m["chunk"] == 0}
        self.unfinished = (self.unfinished | set(in_batch)) - done
        return len(batch)

    def finish(self) -> None:
        """Clear this run's record of unfinished documents: every document is written."""
        if self.recorded:
            clear_pending(self.store, self.run_id)

    def abandon(self) -> None:
        """Remove the unfinished documents of this run (after an interruption); best effort."""
        if not self.recorded:
            return
        try:
            removed = abandon_run(self.store, self.run_id)
        except Exception as exc:
            logger.warning(
                "could not remove the unfinished documents of the interrupted ingestion (%s); "
                "the next ingestion into this store will",
                "its disk is full" if full_disk_problem(self.store) else exc,
            )
            logger.debug("the removal failed", exc_info=True)
            return
        if removed:
            logger.warning(
                "ingestion interrupted: removed the partial chunks of %s", shorten(removed)
            )


class ChunkBatches:
    """Gathers documents' chunks into batches of ``batch_size`` and writes each full one.

    ``on_flush`` is called after each written batch as ``(chunks_in_batch, chunks_written)``;
    ``written_by`` is recorded on every chunk as its ``writer`` (see
    :mod:`crag.vectorstore.records`), and ``scope``'s labels too (see
    :mod:`crag.vectorstore.scope`).
    """

    def __init__(
        self,
        writer: ChunkWriter,
        batch_size: int,
        on_flush: Callable[[int, int], None],
        written_by: str = OPERATOR,
        scope: ScopeLabels = NO_LABELS,
    ) -> None:
        self.writer = writer
        self.batch_size = batch_size
        self.on_flush = on_flush
        self.written_by = written_by
        self.scope = scope
        self.batch = ChunkBatch()
        self.written = 0

    def add(
        self,
        doc: LoadedDocument,
        chunks: list[str],
        locations: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        """Queue the document's chunks, writing every batch that fills up.

        ``locations`` are the chunks' location metadata (page, slide, ``location``...), one
        per chunk, when the document has sections.
        """
        base: dict[str, Any] = {
            "source": doc.source,
            "sha256": doc.sha256,
            "writer": self.written_by,
        }
        if doc.title:
            base["title"] = doc.title
        if doc.file:
            base["file"] = doc.file
        base.update(self.scope.metadata(doc))
        # Chunk 0 goes last: it is the document's record (see crag.vectorstore.records).
        for index in [*range(1, len(chunks)), 0]:
            self.batch.ids.append(chunk_id(doc.source, index))
            self.batch.texts.append(chunks[index])
            where = locations[index] if index < len(locations) else {}
            self.batch.metadatas.append({**where, **base, "chunk": index})
            if len(self.batch) >= self.batch_size:
                self.flush()

    def flush(self) -> None:
        """Write the queued chunks, if any, unless the run was cancelled.

        Raises:
            RunCancelledError: The run was cancelled (the caller undoes what it wrote).
        """
        if not self.batch:
            return
        raise_if_cancelled()
        flushed = self.writer.write(self.batch)
        self.batch.clear()
        self.written += flushed
        self.on_flush(flushed, self.written)
