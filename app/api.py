"""Python entry points: ask questions (sync, async, on persistent threads), ingest documents."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.embeddings import Embeddings

from graph.builder import build_graph, graph
from graph.context import Context, IngestContext
from graph.state import ChatOutputState

if TYPE_CHECKING:
    from langchain_chroma import Chroma
    from langchain_core.runnables import RunnableConfig
    from langgraph.graph.state import CompiledStateGraph

    from graph.state import ChatInputState, State
    from vectorstore.ingest import ChunkProgress, IngestReport
    from vectorstore.loaders import LoadedDocument

    CragGraph = CompiledStateGraph[State, Context, ChatInputState, ChatOutputState]

OUTPUT_KEYS = (
    "answer",
    "citations",
    "abstained",
    "action",
    "documents",
    "knowledge",
    "notes",
    "standalone_question",
)
"""What :func:`output_of` keeps; ``standalone_question`` is there only for contextualised runs
(a thread's follow-ups), and the chat ``messages`` are left to chat front-ends."""

DEFAULT_THREADS_PATH = ".crag/threads.sqlite"
"""Where :func:`persistent_graph` and ``crag ask --thread`` keep conversations."""

INLINE_SOURCE_PREFIX = "inline:"
"""Source of an inline document given without one: ``inline:`` and a hash of its text."""


def output_of(state: Mapping[str, Any]) -> ChatOutputState:
    """The output fields of a run's final state (what ``crag ask --json`` prints)."""
    return {key: state[key] for key in OUTPUT_KEYS if key in state}  # type: ignore[return-value]


def ask(question: str, context: Context | None = None) -> ChatOutputState:
    """Run the CRAG graph on one question and return its output state."""
    return output_of(graph.invoke({"question": question}, context=context or Context()))


async def aask(question: str, context: Context | None = None) -> ChatOutputState:
    """Async :func:`ask`: the models run on worker threads, never on the event loop."""
    result = await graph.ainvoke({"question": question}, context=context or Context())
    return output_of(result)


def thread_config(thread_id: str) -> RunnableConfig:
    """The run config that puts a run on the thread ``thread_id`` of a checkpointed graph."""
    return {"configurable": {"thread_id": thread_id}}


def _threads_file(path: str | Path) -> str:
    db = Path(path).expanduser()
    db.parent.mkdir(parents=True, exist_ok=True)
    return str(db)


@contextmanager
def persistent_graph(path: str | Path = DEFAULT_THREADS_PATH) -> Iterator[CragGraph]:
    """The CRAG graph with a SQLite checkpointer: threads survive the process.

    Example::

        with persistent_graph() as g:
            g.invoke({"question": "Who painted the Mona Lisa?"}, thread_config("t1"))

    Every run on a thread is checkpointed in ``path``; a later process opening the same file
    sees the thread's state and history (``g.get_state``, ``g.get_state_history``). Each run
    still starts by resetting its own fields (``retrieve``).

    Args:
        path: The SQLite file (created with its directory when missing).
    """
    from langgraph.checkpoint.sqlite import SqliteSaver

    with SqliteSaver.from_conn_string(_threads_file(path)) as saver:
        yield build_graph(checkpointer=saver)


@asynccontextmanager
async def apersistent_graph(path: str | Path = DEFAULT_THREADS_PATH) -> AsyncIterator[CragGraph]:
    """Async :func:`persistent_graph` (``aiosqlite``), for ``ainvoke`` and ``astream``."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(_threads_file(path)) as saver:
        yield build_graph(checkpointer=saver)


def thread_turns(graph_with_threads: CragGraph, thread_id: str) -> list[dict[str, str]]:
    """The finished runs of a thread, oldest first: ``{"question", "action", "answer"}``.

    Read from the thread's checkpoint history (the checkpoint written when a run ended).
    """
    turns: list[dict[str, str]] = []
    for snapshot in graph_with_threads.get_state_history(thread_config(thread_id)):
        values = snapshot.values or {}
        if snapshot.next or not values.get("answer") or "question" not in values:
            continue
        turns.append(
            {
                "question": str(values["question"]),
                "action": str(values.get("action", "")),
                "answer": str(values["answer"]),
            }
        )
    turns.reverse()
    return turns


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
    from vectorstore.loaders import LoadedDocument

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
    settings: Context | IngestContext, *, create: bool, writable: bool = False
) -> Chroma:
    """Open the store the settings name: on disk, or on a Chroma server when ``chroma_host``.

    The embedder is the process-wide one, its calls serialised with every run's. With
    ``writable`` a read-only store on disk is refused at once (see ``open_store``).
    """
    from app.wiring import locked_embeddings
    from vectorstore.store import open_store

    return open_store(
        settings.store_path,
        settings.collection,
        locked_embeddings(settings.embedder),
        create=create,
        host=settings.chroma_host,
        port=settings.chroma_port,
        ssl=settings.chroma_ssl,
        writable=writable,
    )


def ingest(
    paths: Sequence[str | Path],
    context: Context | IngestContext | None = None,
    *,
    documents: Sequence[LoadedDocument] = (),
    prune: bool = False,
    root: str | Path | None = None,
    progress: bool = True,
    on_progress: ChunkProgress | None = None,
) -> IngestReport:
    """Ingest files, directories and inline documents into the configured store.

    One ingestion at a time per store: a second one waits for the first, then finds its
    documents unchanged. A read-only store is refused with an error that says so.

    Args:
        paths: Files and/or directories (searched recursively).
        context: Which store (``store_path`` or ``chroma_host``/``chroma_port``, and
            ``collection``) and embedder; an :class:`IngestContext` also sets the chunking.
        documents: Documents given as text (see :func:`inline_document`).
        prune: Also remove the stored documents under ``paths`` whose files no longer exist.
        root: Read only files whose real path lies in this directory (symbolic links
            followed); the others are listed in ``report.failed``.
        progress: Show a progress bar on stderr.
        on_progress: Called with ``(chunks_written, chunks_to_write)`` as chunks are written
            (files first, then inline documents).

    Returns:
        One report for files and documents: added, skipped, replaced, removed, failed, chunks.

    Raises:
        StoreError: The store cannot be opened, read or written, or is read-only.
        ValueError: Invalid chunking parameters.
    """
    from vectorstore.ingest import IngestReport, ingest_documents, ingest_paths

    settings = context or Context()
    chunking: dict[str, int] = {}
    if isinstance(settings, IngestContext):
        chunking = {"chunk_size": settings.chunk_size, "chunk_overlap": settings.chunk_overlap}
    store = open_configured_store(settings, create=True, writable=True)
    report = IngestReport()
    if paths:
        report = ingest_paths(
            list(paths),
            store,
            progress=progress,
            on_progress=on_progress,
            root=root,
            prune=prune,
            **chunking,
        )
    if documents:
        inline = ingest_documents(
            documents, store, progress=progress, on_progress=on_progress, **chunking
        )
        report.added += inline.added
        report.skipped += inline.skipped
        report.replaced += inline.replaced
        report.failed += inline.failed
        report.removed += inline.removed
        report.chunks_added += inline.chunks_added
    return report


def remove_sources(
    sources: Sequence[str], context: Context | IngestContext | None = None
) -> IngestReport:
    """Remove documents from the configured store (it must exist).

    Args:
        sources: Stored sources (``wikipedia:Title``, ``inline:...``, ``FILE#lineN``) or file
            paths; a JSON Lines file removes all its lines.
        context: Which store and collection.

    Returns:
        A report: ``removed`` lists the sources removed, ``failed`` the items not in the store.

    Raises:
        StoreError: The store is missing, cannot be read or written, or is read-only.
    """
    from vectorstore.ingest import remove_sources as remove_from_store
    from vectorstore.store import open_store

    settings = context or Context()
    store = open_store(
        settings.store_path,
        settings.collection,
        _NoEmbeddings(),  # removing embeds nothing: do not load the embedder
        create=False,
        host=settings.chroma_host,
        port=settings.chroma_port,
        ssl=settings.chroma_ssl,
        writable=True,
    )
    return remove_from_store(store, sources)


class _NoEmbeddings(Embeddings):
    """The embedder of a store opened only to delete from it: any embedding is a bug."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise RuntimeError("this store was opened for removal only; it cannot embed")

    def embed_query(self, text: str) -> list[float]:
        raise RuntimeError("this store was opened for removal only; it cannot embed")
