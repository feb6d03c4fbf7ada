"""How one ingestion chunks, labels and writes: one options object, declared once.

:func:`~crag.vectorstore.ingest.ingest_documents`, :func:`~crag.vectorstore.ingest.ingest_paths`
and :func:`~crag.vectorstore.configured_store.ingest_into_store` each take an
:class:`IngestOptions` and pass it down whole, so an option is added here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from crag.documents.limits import ChunkBudget, FileLimits
from crag.vectorstore.sources import OPERATOR_WRITER, Writer

__all__ = ["DEFAULT_OPTIONS", "EMBED_BATCH_SIZE", "QUIET", "ChunkProgress", "IngestOptions"]

EMBED_BATCH_SIZE = 512
"""Chunks embedded and written per batch.

Large batches matter on CPU: sentence-transformers sorts each call's texts by length before
padding, so one call of 512 chunks pads far less than eight calls of 64 (about twice the
throughput measured on the bundled corpus).
"""

ChunkProgress = Callable[[int, int], None]
"""Called as chunks are written: ``(chunks_written, chunks_to_write)``, first with 0."""


@dataclass(frozen=True, kw_only=True)
class IngestOptions:
    """How documents are chunked, labelled and written, and which files are read.

    The values are checked where they are used (bad chunking or tags raise ``ValueError``
    from the ingestion, before anything is loaded), so one object may be built once and
    reused for many runs: it holds no run's state (the chunk budget is made per run from
    :attr:`max_chunks`, see :meth:`chunk_budget`).
    """

    chunk_size: int = 1000
    """Largest chunk, in characters."""
    chunk_overlap: int = 100
    """Characters shared by consecutive chunks."""
    progress: bool = True
    """Show a progress bar over chunks on stderr."""
    batch_size: int = EMBED_BATCH_SIZE
    """Chunks embedded per batch."""
    on_progress: ChunkProgress | None = None
    """Called with ``(chunks_written, chunks_to_write)``, first with 0, then after each batch."""
    writer: Writer = OPERATOR_WRITER
    """Who is writing (recorded on every chunk), and what it may replace or remove (the
    replace policy: see :mod:`crag.vectorstore.ingest`)."""
    tags: Sequence[str] = ()
    """Recorded on every chunk, for scoped search (see :mod:`crag.vectorstore.scope`); an
    unchanged document gets them without being embedded again. Kept as a tuple."""
    max_chunks: int | None = None
    """Most chunks one run may embed, counted before anything is embedded (a served run's
    ``ingest_max_chunks``); ``None``: no limit, the operator's runs."""
    root: str | Path | None = None
    """Files only: read only files whose real path (symbolic links followed) lies in this
    directory; the others are refused and listed in ``report.failed``."""
    prune: bool = False
    """Files only: also remove the stored documents under the paths given whose files no longer
    exist (see :func:`~crag.vectorstore.removal.prune_missing`); the operator's alone."""
    limits: FileLimits | None = None
    """Files only: most pages, paragraphs, characters read per file (``None``: the operator's)."""

    def __post_init__(self) -> None:
        # a tuple, so that the caller's list changed later does not change these options
        object.__setattr__(self, "tags", tuple(self.tags))

    def chunk_budget(self) -> ChunkBudget | None:
        """A fresh count of the chunks one run may embed (``None`` without :attr:`max_chunks`).

        A run that ingests files and then documents shares one budget between the two calls
        (see :func:`~crag.vectorstore.configured_store.ingest_into_store`).
        """
        return ChunkBudget(self.max_chunks) if self.max_chunks is not None else None


DEFAULT_OPTIONS = IngestOptions()
"""The defaults: the operator writing, 1000-character chunks, a progress bar, no limit."""

QUIET = IngestOptions(progress=False)
"""The defaults without a progress bar (tests, benchmarks, the served graph)."""
