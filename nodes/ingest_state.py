"""The ingestion graph's typed state: what a caller sends, and the report it gets back.

A thread keeps its state between runs, and a run's input is merged into it: a field the run
does not send would keep the previous run's value. So each input field lasts one run only
(LangGraph's :class:`~langgraph.channels.EphemeralValue`: written by the run's input, read by
the ``ingest`` node, cleared after it, and cleared by the next run's input whether that run
fails or not): a second run on a thread that sends ``paths`` alone ingests no documents of the
first, and tags nothing with its ``tags``. The report's fields are all written by every run.
"""

from __future__ import annotations

from typing import Annotated

from langgraph.channels import EphemeralValue
from typing_extensions import TypedDict


class InlineDocument(TypedDict, total=False):
    """A document given as text."""

    text: str
    """The document text (required)."""
    source: str
    """Its identifier in the store (default: ``inline:`` and a hash of the text)."""
    title: str
    """Its title, put on the first line unless the text starts with it."""


class IngestInput(TypedDict, total=False):
    """What a caller sends: file paths, inline documents, or both."""

    paths: Annotated[list[str], EphemeralValue(list[str])]
    """Files or directories on the server's machine (.txt .md .html .jsonl)."""
    documents: Annotated[list[InlineDocument], EphemeralValue(list[InlineDocument])]
    """Documents given as text."""
    tags: Annotated[list[str], EphemeralValue(list[str])]
    """Tags for every document of this run, for scoped search (setting ``scope_tags``); an
    unchanged document this run may replace is relabelled with them (nothing embedded)."""


class FailedDocument(TypedDict):
    """A document or file that could not be ingested."""

    source: str
    """The file path or document source."""
    error: str
    """Why."""


class IngestOutput(TypedDict, total=False):
    """The ingestion report."""

    added: list[str]
    """Sources stored for the first time."""
    skipped: list[str]
    """Sources already stored with the same content (nothing embedded)."""
    replaced: list[str]
    """Sources whose content changed; their old chunks were replaced."""
    removed: list[str]
    """Sources removed because they vanished from a re-ingested JSON Lines file."""
    relabelled: list[str]
    """Unchanged sources whose tags (or other scope labels) were updated, nothing embedded."""
    failed: list[FailedDocument]
    """What could not be ingested, or was the operator's and not this run's to change, and why."""
    chunks: int
    """Chunks embedded and written."""
    summary: str
    """One line, e.g. ``2 added, 0 replaced, 1 unchanged, 0 failed (5 chunks embedded)``."""


class IngestState(IngestInput, IngestOutput, total=False):
    """The ingestion graph's state."""
