"""Scope labels on stored chunks, and the Chroma filter of a scoped search.

Every chunk written records where its document comes from, so that a run may search part of
the store (settings ``scope_tags``, ``scope_folder``, ``scope_file_types``):

* ``file_type``: the file's extension in lower case without the dot (``"pdf"``, ``"md"``,
  ``"jsonl"``), ``"wikipedia"`` for the bundled corpus, ``"inline"`` for documents given as
  text (the served ingest graph's ``documents``, the Python API's ``documents=``);
* ``folders``: every folder above the file, as absolute paths (the root included), so that
  ``{"folders": {"$contains": "/srv/docs"}}`` finds everything ingested from under
  ``/srv/docs``; files only;
* ``tags``: the tags given at ingestion (``crag ingest --tag NAME``); absent when none, as
  Chroma refuses an empty list.

Chunks stored before these labels existed have none, so a scoped search does not find them
(an unscoped one still does). Ingesting the same files again labels them: an unchanged
document is not embedded again, its labels are updated in place (:func:`relabel_unchanged`),
and so are its tags when they differ: a document's tags are those of its latest ingestion.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from crag.settings.scope_settings import check_tags
from crag.vectorstore.records import StoredRecord, update_metadata
from crag.vectorstore.sources import REPLACE_SETTING, SOURCE_PREFIX, Writer, owner_of

if TYPE_CHECKING:
    from langchain_chroma import Chroma

    from crag.documents.document import LoadedDocument
    from crag.settings.run_settings import RunSettings
    from crag.vectorstore.report import IngestReport

logger = logging.getLogger(__name__)

SCOPE_KEYS: tuple[str, ...] = ("file_type", "folders", "tags", "owner", "private")
"""The chunk metadata a scoped search filters on (``owner`` and ``private``: a member's own
documents, which only that member's runs search; see :func:`visible_to`)."""
WIKIPEDIA_TYPE = "wikipedia"
"""The ``file_type`` of the bundled Wikipedia summaries."""
INLINE_TYPE = "inline"
"""The ``file_type`` of a document given as text rather than read from a file."""


@dataclass(frozen=True)
class ScopeLabels:
    """What one ingestion records on its chunks besides their text: tags, and file or not.

    Attributes:
        tags: The tags given at ingestion (checked:
            :func:`crag.settings.scope_settings.check_tags`).
        files: The documents were read from files (``source`` or ``file`` is their path).
    """

    tags: tuple[str, ...] = ()
    files: bool = False
    owner: str = ""

    @classmethod
    def given(
        cls, tags: Iterable[str] = (), *, files: bool = False, owner: str = ""
    ) -> ScopeLabels:
        """Labels with ``tags`` checked; ``owner``: the member whose private documents these are.

        Raises:
            ValueError: a tag is empty, too long, not printable or has a comma.
        """
        return cls(tuple(check_tags(tags)), files, owner)

    def metadata(self, doc: LoadedDocument) -> dict[str, Any]:
        """The scope metadata of ``doc``'s chunks (:func:`scope_metadata`)."""
        labels = scope_metadata(doc, self.tags, files=self.files)
        if self.owner:
            labels.update(owner=self.owner, private=True)
        return labels


NO_LABELS = ScopeLabels()
"""No tags, not from files (documents given as text, the bundled corpus)."""


def scope_metadata(
    doc: LoadedDocument, tags: Sequence[str] = (), *, files: bool = False
) -> dict[str, Any]:
    """``file_type``, ``folders`` (files only) and ``tags`` (when any) of ``doc``'s chunks."""
    labels: dict[str, Any] = {}
    if files:
        path = PurePath(os.path.normpath(doc.file or doc.source))
        kind = path.suffix.lower().removeprefix(".")
        if kind:
            labels["file_type"] = kind
        labels["folders"] = [str(folder) for folder in path.parents]
    else:
        labels["file_type"] = (
            WIKIPEDIA_TYPE if doc.source.startswith(SOURCE_PREFIX) else INLINE_TYPE
        )
    if tags:
        labels["tags"] = list(tags)
    return labels


def scope_filter(settings: RunSettings) -> dict[str, Any] | None:
    """The Chroma ``where`` of the run's scope; ``None`` when the run searches everything.

    Tags: any of them; folder: the folder or below; file types: any of them. The scopes set
    combine (``$and``).
    """
    clauses: list[dict[str, Any]] = []
    if settings.scope_tags:
        tagged = [{"tags": {"$contains": tag}} for tag in settings.scope_tags]
        clauses.append(tagged[0] if len(tagged) == 1 else {"$or": tagged})
    if settings.scope_folder:
        clauses.append({"folders": {"$contains": settings.scope_folder}})
    if settings.scope_file_types:
        kinds = settings.scope_file_types
        clauses.append({"file_type": {"$eq": kinds[0]} if len(kinds) == 1 else {"$in": kinds}})
    if not clauses:
        return None
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


def visible_to(member: str) -> dict[str, Any]:
    """The Chroma ``where`` of what ``member``'s runs search: the shared documents and their own.

    Shared: a chunk without ``private`` (the operator's, the bundled corpus, an admin's
    uploads, and every chunk stored before members existed); their own: ``owner`` is theirs.
    Another member's private documents are never found.
    """
    return {"$or": [{"private": {"$ne": True}}, {"owner": {"$eq": member}}]}


def with_clause(where: dict[str, Any] | None, clause: dict[str, Any]) -> dict[str, Any]:
    """``where`` and ``clause`` both (``$and``); ``clause`` alone when there is no ``where``."""
    return clause if where is None else {"$and": [where, clause]}


def describe_scope(settings: RunSettings) -> str:
    """The run's scope in words (``tags a, b; folder /srv/docs``); empty when none is set."""
    parts: list[str] = []
    if settings.scope_tags:
        parts.append(f"tags {', '.join(settings.scope_tags)}")
    if settings.scope_folder:
        parts.append(f"folder {settings.scope_folder}")
    if settings.scope_file_types:
        parts.append(f"file types {', '.join(settings.scope_file_types)}")
    return "; ".join(parts)


def _labels_of(metadata: Mapping[str, Any]) -> dict[str, Any]:
    return {key: metadata[key] for key in SCOPE_KEYS if metadata.get(key) is not None}


def set_labels(store: Chroma, labels: Mapping[str, dict[str, Any]]) -> None:
    """Record ``source -> scope labels`` on every chunk of each source; nothing is embedded.

    A label key absent from a source's labels is removed from its chunks.
    """
    update_metadata(
        store,
        list(labels),
        lambda meta: {key: labels[str(meta["source"])].get(key) for key in SCOPE_KEYS},
        "update the scope labels of documents",
    )


def relabel_unchanged(
    report: IngestReport,
    store: Chroma,
    docs: Sequence[LoadedDocument],
    labels: ScopeLabels,
    writer: Writer,
    stored: Mapping[str, StoredRecord],
) -> None:
    """Update the scope labels of unchanged (skipped) ``docs`` where they differ, in place.

    ``stored`` holds what the store says of each document (:func:`~crag.vectorstore.records.
    stored_records`, read once by the ingestion for its plan).

    Those relabelled go to ``report.relabelled``. A document ``writer`` may not replace keeps
    its labels; when the tags asked for differ from its own, it moves from ``skipped`` to
    ``failed`` with the reason.
    """
    wanted = {doc.source: labels.metadata(doc) for doc in docs}
    changed: dict[str, dict[str, Any]] = {}
    for source, record in stored.items():
        meta = record.metadata
        if source not in wanted or _labels_of(meta) == wanted[source]:
            continue
        if not writer.refuses(record.writer, owner_of(meta)):
            changed[source] = wanted[source]
        elif meta.get("tags") != wanted[source].get("tags"):
            message = (
                f"{source}: unchanged, but stored with other tags; this server does not let runs "
                f"change them ({REPLACE_SETTING})"
            )
            logger.warning("%s", message)
            report.skipped.remove(source)
            report.failed.append((source, message))
    if changed:
        set_labels(store, changed)
        report.relabelled.extend(changed)
        logger.info("scope labels updated (nothing embedded): %d documents", len(changed))
