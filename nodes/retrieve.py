"""Retrieve: the top-k passages for the question from the store (dense, lexical or hybrid)."""

from __future__ import annotations

import logging

from langchain_core.documents import Document
from langgraph.runtime import Runtime
from langgraph.types import Overwrite

from crag.core.public_names import ServedFolders, public_name, server_path
from crag.core.state import RetrievedPassage, State, StateUpdate, run_reset
from crag.core.validation import validate_question
from crag.nodes.caller import run_caller
from crag.nodes.components import Components
from crag.nodes.progress import emit
from crag.settings.run_settings import RunSettings
from crag.settings.scope_settings import SERVED_SCHEMES
from crag.settings.setting_checks import InvalidSettingError
from crag.vectorstore.hybrid import search
from crag.vectorstore.index_health import watch_index
from crag.vectorstore.scope import describe_scope, scope_filter, visible_to, with_clause
from crag.vectorstore.sources import OPERATOR, writer_of
from crag.vectorstore.vector_memo import vector_memo

logger = logging.getLogger(__name__)


def _with_server_folder(settings: RunSettings, folders: ServedFolders | None) -> RunSettings:
    """``settings`` with a served run's folder name (``shared:docs``) read back into its path.

    Raises:
        InvalidSettingError: the name stands for no folder of this server's.
    """
    folder = settings.scope_folder
    if folders is None or not folder.startswith(SERVED_SCHEMES):
        return settings
    path = server_path(folder, folders)
    if path is None:
        raise InvalidSettingError(
            f"setting scope_folder: {folder!r} names no folder of this server's (upload:... "
            "names one in its upload folder, shared:... one under its ingest_root)"
        )
    return settings.replaced(scope_folder=path)


def _passages(
    hits: list[Document], folders: ServedFolders | None, member: str | None
) -> list[RetrievedPassage]:
    """The hits as the state's passages; a served run's (``folders``) named, never located."""
    documents: list[RetrievedPassage] = [
        {
            "text": doc.page_content,
            "source": str(doc.metadata.get("source", "unknown")),
            "chunk": int(doc.metadata.get("chunk", 0)),
            "score": None,
        }
        for doc in hits
    ]
    for passage, doc in zip(documents, hits, strict=True):
        location = doc.metadata.get("location")  # page, slide, rows...: cited with the source
        if isinstance(location, str) and location:
            passage["location"] = location
        if writer_of(doc.metadata) != OPERATOR:  # a served run's passage: cited as such
            passage["writer"] = writer_of(doc.metadata)
    if folders is not None:  # a served run names the server's files, never its folders
        for passage in documents:
            passage["source"] = public_name(passage["source"], folders, member)
    return documents


def retrieve(state: State, runtime: Runtime[RunSettings], components: Components) -> StateUpdate:
    """Validate the question, reset the per-run fields and fetch the top-k passages.

    A thread keeps its state between runs on the server, so everything a run produces is
    cleared here, at the start of each run: every field of the state but those
    :data:`~crag.core.state.NOT_RESET` names (:func:`~crag.core.state.run_reset`).

    Raises:
        NoCallerError: A served run that carries no caller (nothing is searched).
    """
    caller = run_caller()  # first: a served run without its caller opens nothing (it raises)
    settings = runtime.context
    question = validate_question(state.get("question"), settings.deployment.max_question_chars)
    store = components.vectorstore(settings)
    # the passages' stored vectors go to the embedding evaluator, which then need not embed them
    memo = vector_memo(settings.deployment.embedder)
    folders = (
        ServedFolders.of(
            settings.deployment.upload_dir,
            settings.deployment.ingest_root,
            settings.deployment.store_path,
        )
        if caller is not None
        else None
    )
    # the run's scope: tags, folder, file types (or None)
    where = scope_filter(_with_server_folder(settings, folders))
    if caller is not None and caller.member is not None:  # a member: shared + their own
        where = with_clause(where, visible_to(caller.member))
    with watch_index() as index_notes:  # a damaged vector index met and rebuilt, said so
        hits = search(
            store, question, settings.top_k, mode=settings.retrieval, memo=memo, where=where
        )
    documents = _passages(hits, folders, caller.member if caller is not None else None)
    logger.info("retrieved %d passages", len(documents))
    emit(runtime, "retrieve", "retrieved", passages=len(documents), top_k=settings.top_k)
    update: StateUpdate = {**run_reset(), "question": question, "documents": documents}
    notes = list(index_notes)
    if describe_scope(settings) and not documents:
        note = f"no stored passage matches the scope ({describe_scope(settings)})"
        logger.info("%s", note)
        notes.append(note)
    if notes:
        update["notes"] = Overwrite(notes)
    return update
