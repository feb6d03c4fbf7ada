"""The ingestion graph's one node: documents in, store updated, the ingestion report out.

The graph (:mod:`crag.graph.ingest_graph`) is served next to the CRAG graph, so that a
LangGraph server, and Studio, can fill the store the questions are answered from. Input: file
paths on the server's machine and/or inline documents ``{"text", "source", "title"}``, and
optional ``tags`` for every document (for scoped search); output: what was added, skipped
(unchanged), replaced (changed), relabelled (unchanged, tags updated), removed and failed, and
how many chunks were embedded.
Ingestion is idempotent, as with ``crag ingest``. The node reports progress on the ``custom``
stream (``{"node": "ingest", "event": "embedding", "done": 512, "total": 1800}``).

The deployment setting ``ingest_root`` (``CRAG_INGEST_ROOT`` in the server's environment)
confines the paths a caller may ingest to that directory; unset, to the chat page's upload
folder (``upload_dir``, ``.crag/uploads`` by default), so that no served run reads any other
file of the server's machine. A member's run reads only their own part of the upload folder,
``members/NAME``, whether ``ingest_root`` is set or not: the shared root is the operator's and
the admins' to ingest (a member's copy of a shared file, stored private under the file's own
name, would hide it from everyone else). Any other run leaves the members' uploads out (a path
named in ``members/`` is an input error, a directory holding it is read without it): stored as a
shared document, a member's private upload would be everyone's. A named path outside is an input
error, judged first by its name alone, so that it reads the same whether a file is there or not;
a file found in a named directory whose real path leaves it (a symbolic link pointing outside)
is refused and listed in ``failed``. Each file is then opened first and what was opened checked
before it is read (:mod:`crag.documents.confined`), so a link swapped in between is refused too.
The root binds served runs only: ``crag ingest`` and the Python API are the operator's, and read
any path they are given.

A thread keeps its state between runs, but not a run's input: ``paths``, ``documents`` and
``tags`` last one run only (:mod:`crag.nodes.ingest_state`), so a second run on a thread that
sends paths alone does not ingest the first run's documents again, nor with its tags.

**Members.** What a member's run stores is that member's (chunk metadata ``owner`` and
``private``): only their own runs search it (:func:`crag.vectorstore.scope.visible_to`), so no
other caller's answers can be poisoned by it. Their inline documents are stored under their own
names (:func:`~crag.core.public_names.member_source`), so no member's source name meets
another's or the operator's. An admin's run, the operator's, stores shared
documents, as ``crag ingest`` does.

**Trust model.** Whoever holds a credential may run this graph, so by default a run may only
*add* documents: no caller may change or poison
what other callers, or the operator (``crag ingest``, the Python API, the bundled corpus;
chunks stored before writers were recorded count as the operator's), stored. Every chunk
records its ``writer`` (``"operator"`` or ``"served"``), and a run that names a stored
document's source with changed content (an inline document's ``source``, or a file ingested
before whose content changed) gets it in ``failed`` ("already stored by the operator; this
server does not let runs replace it (setting ingest_run_replace ...)", or "by a run of the
ingest graph") with the store unchanged; lines gone from a re-ingested JSON Lines file are kept
and listed in ``failed`` too. Unchanged documents are ``skipped`` as usual. The operator may
allow more with the deployment setting ``ingest_run_replace`` (``CRAG_INGEST_RUN_REPLACE``):
``"none"`` (the default), ``"served"`` (runs may replace and remove what runs stored, never
the operator's documents) or ``"all"`` (anything). Runs never prune. Whatever it says, a
served run changes only its own caller's documents: a member's run only that member's, an
admin's only shared ones (:meth:`~crag.vectorstore.sources.Writer.refuses`).
Inline documents sent without a source get an ``inline:`` source from a hash of their text.
Sources have one spelling (:mod:`crag.vectorstore.sources`): a name with no file behind it in
Unicode NFC with its whitespace collapsed, so a look-alike of a stored name is that name; a
path with its ``.``, ``..`` and repeated slashes dropped and its characters kept, since the file
system tells ``café.md`` composed and decomposed apart. On a Chroma server, where no lock
spans the check and the write, runs replace nothing whatever ``ingest_run_replace`` says
(:func:`~crag.vectorstore.sources.unlocked_writer`).

**What a run may cost.** A ``chunk_size`` below the operator's ``ingest_min_chunk_size`` is an
input error, and a run whose documents split into more than ``ingest_max_chunks`` chunks is
refused before those are embedded (:class:`~crag.documents.limits.ChunkBudget`); the per-file
limits (``max_file_pages`` ...) bind every ingestion. The node is cancellable
(:func:`~crag.core.cancellation.cancellable_node`): a cancelled run stops before its next batch
of chunks and removes the documents it left unfinished.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from crag.core.public_names import (
    MEMBERS_FOLDER,
    ServedFolders,
    member_source,
    public_name,
    public_text,
    server_path,
    uploads_folder,
)
from crag.documents.document import LoadedDocument
from crag.documents.limits import ChunkLimitError
from crag.documents.loaders import LoaderError, iter_paths, real_path
from crag.nodes.caller import run_caller
from crag.nodes.ingest_state import IngestState
from crag.nodes.progress import emit
from crag.settings.context import IngestContext, resolve_ingest_context
from crag.settings.deployment import DeploymentSettings
from crag.settings.run_settings import IngestSettings
from crag.settings.scope_settings import check_tags
from crag.vectorstore.configured_store import ingest_into_store, inline_document
from crag.vectorstore.ingest_options import IngestOptions
from crag.vectorstore.report import IngestReport
from crag.vectorstore.sources import served_writer

logger = logging.getLogger(__name__)

DOCUMENT_FIELDS = ("text", "source", "title")
"""The fields an inline document may have (``text`` is required)."""


class InvalidIngestInputError(ValueError):
    """The ingestion input is malformed (the message names the field and the problem)."""


def _path_strings(value: Any) -> list[str]:
    """The paths sent, each a string (the error names the first element that is not)."""
    if not isinstance(value, list):
        raise InvalidIngestInputError(
            f"paths must be a list of strings, not {type(value).__name__}: {str(value)[:80]!r}"
        )
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise InvalidIngestInputError(
                f"paths[{index}] must be a string, not {type(item).__name__} ({str(item)[:60]})"
            )
    return [p for p in value if p.strip()]


@dataclass(frozen=True)
class _Confinement:
    """The one directory a run reads files from, and whose run it is (``member``: a member's).

    ``members``: the members' part of the upload folder, which a run that is not a member's
    leaves out (:func:`_leaving_members_out`); ``None`` for a member's run, confined inside it.
    """

    root: Path
    member: str | None = None
    members: Path | None = None

    def spellings(self) -> tuple[Path, ...]:
        """The directory as configured (absolute) and as its real path: a name may use either."""
        named = Path(os.path.abspath(self.root.expanduser()))
        real = named.resolve()
        return (named,) if real == named else (named, real)

    def outside(self, named: str) -> InvalidIngestInputError:
        """The error for a path sent (``named``) that is not this run's to read."""
        if self.member is not None:
            return InvalidIngestInputError(
                f"path {named!r} is not one of your uploads: a member's run ingests only the "
                f"files in their own part of the upload folder (upload:members/{self.member}/...)"
            )
        return InvalidIngestInputError(
            f"path {named!r} is outside the only directory this server ingests from "
            "(setting ingest_root; when it is unset, the chat page's upload folder: upload "
            "the file instead, and send the name the upload answered, upload:...)"
        )


def _within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _check_inside(path: str, confinement: _Confinement, named: str) -> None:
    """Refuse a path that leaves the run's directory, by its name first, then by its real path.

    The name is judged by its text alone (``..`` collapsed), before anything on disk is looked
    at, so a name outside is refused the same way whether a file is there or not: no run
    learns which of another member's names exist. Then its real path, symbolic links
    followed, must lie inside too. A path that cannot be resolved (a symbolic link loop, a NUL
    character) is let through: ingestion lists it in ``failed`` with the reason, and the other
    paths are still ingested.
    """
    lexical = Path(os.path.normpath(os.path.abspath(os.path.expanduser(path))))
    spellings = confinement.spellings()
    if not any(_within(lexical, spelling) for spelling in spellings):
        raise confinement.outside(named)
    try:
        resolved = real_path(Path(path).expanduser())
    except LoaderError:
        return
    if not _within(resolved, spellings[-1]):
        raise confinement.outside(named)


def _paths(
    value: Any, confinement: _Confinement | None, folders: ServedFolders | None = None
) -> list[str]:
    """The paths to read: names a served caller was given (``upload:...``) read back first."""
    if value is None:
        return []
    named = _path_strings(value)
    paths = [
        (server_path(path, folders) if folders is not None else None) or path for path in named
    ]
    if confinement is None:
        return paths
    for path, name in zip(paths, named, strict=True):
        _check_inside(path, confinement, name)
    if confinement.members is None:
        return paths
    return _leaving_members_out(paths, named, confinement.members)


def _leaving_members_out(paths: list[str], named: list[str], members: Path) -> list[str]:
    """A run's paths (not a member's) with the members' uploads left out.

    A member's uploads are private to them; an admin's or the operator's run stores shared
    documents, so ingesting one would publish it to everyone (and then refuse its owner's own
    ingest of it). A path named inside ``members/`` is an input error; a directory holding it
    (the upload folder, the ingest root) is read without it.
    """
    spellings = {Path(os.path.abspath(members)), members.resolve()}
    kept: list[str] = []
    for path, name in zip(paths, named, strict=True):
        lexical = Path(os.path.normpath(os.path.abspath(os.path.expanduser(path))))
        if any(_within(lexical, folder) for folder in spellings):
            raise InvalidIngestInputError(
                f"path {name!r} is a member's upload: a member's uploads are theirs to ingest "
                "(their runs store them private); a run of an admin or the operator stores "
                "shared documents"
            )
        if lexical.is_dir() and any(_within(folder, lexical) for folder in spellings):
            kept += [
                str(found)
                for found in iter_paths([lexical])
                if not any(_within(found.absolute(), folder) for folder in spellings)
            ]
        else:
            kept.append(path)
    return kept


def _confinement(deployment: DeploymentSettings, member: str | None) -> _Confinement:
    """Where a run reads files from: a member's own uploads; else the root or upload folder.

    A member's run reads only ``members/NAME`` in the upload folder, with ``ingest_root`` set
    or not: the shared root is the operator's and the admins' to ingest, as shared documents.
    A member who ingested a shared file would store it private to them under the file's own
    name, and so hide it from everyone else, or take it over once the operator had.
    """
    folder = uploads_folder(
        deployment.upload_dir, deployment.ingest_root, deployment.store_path, member=member
    )
    if member is not None:
        return _Confinement(folder, member)
    members = folder / MEMBERS_FOLDER
    if not deployment.ingest_root.strip():
        return _Confinement(folder, members=members)
    return _Confinement(Path(deployment.ingest_root).expanduser().resolve(), members=members)


def _documents(value: Any, max_chars: int) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidIngestInputError(
            f"documents must be a list of objects {{text, source, title}}, not "
            f"{type(value).__name__}"
        )
    checked: list[dict[str, Any]] = []
    for index, doc in enumerate(value):
        where = f"documents[{index}]"
        if not isinstance(doc, dict):
            raise InvalidIngestInputError(
                f"{where} must be an object {{text, source, title}}, not {type(doc).__name__}"
            )
        unknown = sorted(set(doc) - set(DOCUMENT_FIELDS))
        if unknown:
            raise InvalidIngestInputError(
                f"{where} has unknown field(s) {', '.join(unknown)}; allowed: "
                f"{', '.join(DOCUMENT_FIELDS)}"
            )
        text = doc.get("text")
        if not isinstance(text, str) or not text.strip():
            raise InvalidIngestInputError(f"{where}.text must be a non-empty string")
        if len(text) > max_chars:
            raise InvalidIngestInputError(
                f"{where}.text is {len(text):,} characters long; the limit is {max_chars:,} "
                "(setting max_document_chars)"
            )
        for name in ("source", "title"):
            if doc.get(name) is not None and not isinstance(doc[name], str):
                raise InvalidIngestInputError(f"{where}.{name} must be a string")
        checked.append(doc)
    return checked


def _tags(value: Any) -> list[str]:
    """The tags sent, checked (:func:`crag.settings.scope_settings.check_tags`)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidIngestInputError(
            f"tags must be a list of strings, not {type(value).__name__}: {str(value)[:80]!r}"
        )
    try:
        return check_tags(value)
    except ValueError as exc:
        raise InvalidIngestInputError(str(exc)) from None


def _check_run_cost(settings: IngestSettings) -> None:
    """Refuse a chunk size below the operator's minimum for served runs (``ingest_min_chunk_size``).

    The other bound on a run's cost, ``ingest_max_chunks``, is applied as documents are split
    (:class:`~crag.documents.limits.ChunkBudget`).
    """
    if settings.chunk_size < settings.deployment.ingest_min_chunk_size:
        raise InvalidIngestInputError(
            f"chunk_size {settings.chunk_size} is below "
            f"{settings.deployment.ingest_min_chunk_size}, the smallest this server ingests with "
            "(setting ingest_min_chunk_size)"
        )


def _counts(report: IngestReport) -> dict[str, int]:
    """The numbers of the ``done`` progress event."""
    return {
        "added": len(report.added),
        "skipped": len(report.skipped),
        "replaced": len(report.replaced),
        "failed": len(report.failed),
        "chunks": report.chunks_added,
    }


def ingest_node(
    state: IngestState,
    runtime: Runtime[IngestContext],
    deployment: DeploymentSettings | None = None,
) -> dict[str, Any]:
    """The ``ingest`` node: validate the input, load files and inline documents, store chunks.

    Every file read (named or found in a named directory) must have its real path, symbolic
    links followed, inside ``CRAG_INGEST_ROOT``, or inside the upload folder when that is
    unset. Chunks are written as a served run's, which may not replace the operator's
    documents (see the module).
    """
    settings = IngestSettings.combine(resolve_ingest_context(runtime.context), deployment)
    _check_run_cost(settings)
    caller = run_caller()
    member = caller.member if caller is not None else None
    confinement = _confinement(settings.deployment, member)
    folders = _served_folders(settings.deployment) if caller is not None else None
    paths = _paths(state.get("paths"), confinement, folders)
    docs = _documents(state.get("documents"), settings.deployment.max_document_chars)
    tags = _tags(state.get("tags"))
    if not paths and not docs:
        raise InvalidIngestInputError(
            "nothing to ingest: send {'paths': ['file or directory', ...]} and/or "
            "{'documents': [{'text': '...', 'source': '...', 'title': '...'}]}"
        )
    emit(runtime, "ingest", "started", paths=len(paths), documents=len(docs))
    report = _served_ingestion(runtime, settings, paths, docs, tags, confinement.root, member)
    emit(runtime, "ingest", "done", **_counts(report))
    return _output(report, folders, member)


def _served_folders(deployment: DeploymentSettings) -> ServedFolders:
    """The server's folders, which a served run's output never names (:func:`_output`)."""
    return ServedFolders.of(deployment.upload_dir, deployment.ingest_root, deployment.store_path)


def _served_ingestion(
    runtime: Runtime[IngestContext],
    settings: IngestSettings,
    paths: list[str],
    docs: list[dict[str, Any]],
    tags: list[str],
    root: Path,
    member: str | None,
) -> IngestReport:
    """Store the files and documents as a served run's, its progress emitted as it goes.

    Raises:
        InvalidIngestInputError: They would take more chunks than ``ingest_max_chunks``.
    """

    def on_progress(done: int, total: int) -> None:
        emit(runtime, "ingest", "embedding", done=done, total=total)

    options = IngestOptions(
        root=root,
        progress=False,
        on_progress=on_progress,
        writer=served_writer(settings.deployment.ingest_run_replace, owner=member or ""),
        tags=tags,
        max_chunks=settings.deployment.ingest_max_chunks,
    )
    documents = _inline_documents(docs, member)
    try:
        return ingest_into_store(paths, settings, options, documents=documents)
    except ChunkLimitError as exc:
        raise InvalidIngestInputError(str(exc)) from None


def _inline_documents(docs: list[dict[str, Any]], member: str | None) -> list[LoadedDocument]:
    """The documents sent as text; a member's stored under their own names (``member:NAME/``)."""
    loaded = [inline_document(d["text"], d.get("source"), d.get("title")) for d in docs]
    if member is None:
        return loaded
    return [dataclasses.replace(doc, source=member_source(doc.source, member)) for doc in loaded]


def _output(
    report: IngestReport, folders: ServedFolders | None, member: str | None
) -> dict[str, Any]:
    """The report as the run's output: a served run's with names, never the server's folders."""

    def name(source: str) -> str:
        return source if folders is None else public_name(source, folders, member)

    def sentence(text: str) -> str:
        return text if folders is None else public_text(text, folders)

    return {
        "added": [name(s) for s in report.added],
        "skipped": [name(s) for s in report.skipped],
        "replaced": [name(s) for s in report.replaced],
        "removed": [name(s) for s in report.removed],
        "relabelled": [name(s) for s in report.relabelled],
        "failed": [
            {"source": name(source), "error": sentence(error)} for source, error in report.failed
        ],
        "chunks": report.chunks_added,
        "summary": report.summary(),
    }


def ingest_under(deployment: DeploymentSettings | None) -> Any:
    """The ``ingest`` node bound to the graph's ``deployment`` (LangGraph's two-argument form)."""

    def ingest(state: IngestState, runtime: Runtime[IngestContext]) -> dict[str, Any]:
        return ingest_node(state, runtime, deployment)

    ingest.__doc__ = ingest_node.__doc__
    return ingest
