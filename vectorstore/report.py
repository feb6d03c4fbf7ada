"""The ingestion report: what an ingestion (or a removal) did, per document source."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class IngestReport:
    """What an ingestion did, per document source.

    Attributes:
        added: Sources stored for the first time.
        skipped: Sources already stored with the same content (nothing embedded).
        replaced: Sources whose content changed; their old chunks were replaced.
        failed: ``(source, error message)`` for documents that could not be ingested, or that
            a served run may not replace or remove (the operator's; see
            :mod:`crag.vectorstore.ingest`).
        chunks_added: Chunks embedded and written.
        removed: Sources deleted: gone from a re-ingested JSON Lines file, their file gone
            (pruning), or removed on request.
        relabelled: Unchanged sources (also in ``skipped``) whose scope labels (tags, file
            type, folders) were updated in place, nothing embedded (see
            :mod:`crag.vectorstore.scope`).
    """

    added: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    chunks_added: int = 0
    removed: list[str] = field(default_factory=list)
    relabelled: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether every document was ingested (nothing failed)."""
        return not self.failed

    def extend(self, other: IngestReport) -> None:
        """Add what ``other`` did to this report (one report for several ingestions)."""
        self.added += other.added
        self.skipped += other.skipped
        self.replaced += other.replaced
        self.failed += other.failed
        self.removed += other.removed
        self.relabelled += other.relabelled
        self.chunks_added += other.chunks_added

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
        if self.relabelled:
            parts.append(f"{len(self.relabelled)} relabelled")
        chunks = "chunk" if self.chunks_added == 1 else "chunks"
        return f"{', '.join(parts)} ({self.chunks_added} {chunks} embedded)"
