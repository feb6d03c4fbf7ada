"""Python entry points: ask questions (sync, async, on persistent threads), ingest documents.

Ingestion and removal are :mod:`crag.vectorstore.configured_store`'s, offered here with the rest.
The graphs run here are the app's (:mod:`crag.app.graphs`, built with its real components);
the threaded ones take other components where given.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crag.app import graphs
from crag.app.feedback_store import Feedback, FeedbackError, FeedbackInput
from crag.app.threads import (
    DEFAULT_THREADS_PATH,
    ThreadsDatabaseError,
    async_checkpointer,
    checkpointer,
    configured_threads_db,
)
from crag.core.state import ChatOutputState
from crag.graph.builder import build_graph
from crag.settings.context import Context
from crag.settings.deployment import DeploymentSettings, deployment_with
from crag.settings.method import MethodConfig
from crag.vectorstore.configured_store import (
    ingest_into_store,
    inline_document,
    open_configured_store,
    remove_from_store,
)
from crag.vectorstore.ingest_options import IngestOptions

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig
    from langgraph.graph.state import CompiledStateGraph

    from crag.core.state import ChatInputState, State
    from crag.nodes.components import Components

    CragGraph = CompiledStateGraph[State, Context, ChatInputState, ChatOutputState]

__all__ = [
    "DEFAULT_THREADS_PATH",
    "OUTPUT_KEYS",
    "Context",
    "DeploymentSettings",
    "Feedback",
    "FeedbackError",
    "IngestOptions",
    "MethodConfig",
    "ThreadsDatabaseError",
    "aask",
    "apersistent_graph",
    "ask",
    "deployment_with",
    "ingest_into_store",
    "inline_document",
    "open_configured_store",
    "output_of",
    "persistent_graph",
    "record_feedback",
    "remove_from_store",
    "thread_config",
    "thread_turns",
]

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


def output_of(state: Mapping[str, Any]) -> ChatOutputState:
    """The output fields of a run's final state (what ``crag ask --json`` prints)."""
    return {key: state[key] for key in OUTPUT_KEYS if key in state}  # type: ignore[return-value]


def _graph(method: MethodConfig | None, deployment: DeploymentSettings | None) -> CragGraph:
    """The app's graph, or one built with the app's components under ``method``/``deployment``."""
    if method is None and deployment is None:
        return graphs.graph
    return build_graph(graphs.components, method=method, deployment=deployment)


def ask(
    question: str,
    context: Context | None = None,
    *,
    method: MethodConfig | None = None,
    deployment: DeploymentSettings | None = None,
) -> ChatOutputState:
    """Run the CRAG graph on one question; return its output.

    Args:
        question: The question.
        context: This run's settings (how many passages, the scope, the web, the answer's
            length); default: :class:`Context`'s defaults.
        method: The method's parameters (thresholds, refinement, ablations); default: the
            operator's (the calibrated defaults, each overridden by its ``CRAG_<NAME>``).
        deployment: Where the store and models are, what may be fetched
            (:func:`deployment_with`, e.g. ``deployment_with(store_path="my-store")``);
            default: the environment.
    """
    graph = _graph(method, deployment)
    return output_of(graph.invoke({"question": question}, context=context or Context()))


async def aask(
    question: str,
    context: Context | None = None,
    *,
    method: MethodConfig | None = None,
    deployment: DeploymentSettings | None = None,
) -> ChatOutputState:
    """Async :func:`ask`: the models run on worker threads, never on the event loop."""
    graph = _graph(method, deployment)
    return output_of(await graph.ainvoke({"question": question}, context=context or Context()))


def thread_config(thread_id: str) -> RunnableConfig:
    """The run config that puts a run on the thread ``thread_id`` of a checkpointed graph."""
    return {"configurable": {"thread_id": thread_id}}


@contextmanager
def persistent_graph(
    target: str | Path | None = None,
    *,
    components: Components | None = None,
    method: MethodConfig | None = None,
    deployment: DeploymentSettings | None = None,
) -> Iterator[CragGraph]:
    """The CRAG graph with a checkpointer: threads survive the process.

    Example::

        with persistent_graph() as g:
            g.invoke({"question": "Who painted the Mona Lisa?"}, thread_config("t1"))

    Every run on a thread is checkpointed in ``target``; a later process opening the same
    database sees the thread's state and history (``g.get_state``, ``g.get_state_history``).
    Each run still starts by resetting its own fields (``retrieve``).

    Args:
        target: A SQLite file (created with its directory when missing) or a PostgreSQL
            connection string (``postgresql://...``, the ``postgres`` extra); default: the
            deployment setting ``CRAG_THREADS_DB``, else ``.crag/threads.sqlite``.
        components: What the graph's nodes call; default: the app's
            (:data:`crag.app.graphs.components`).
        method: The method's parameters; default: the operator's.
        deployment: The deployment settings; default: the environment.

    Raises:
        ThreadsDatabaseError: PostgreSQL cannot be reached (at opening, or during a run; the
            run can be retried on the same graph once the database is back).
    """
    with checkpointer(target or configured_threads_db()) as saver:
        yield build_graph(
            _components(components), checkpointer=saver, method=method, deployment=deployment
        )


@asynccontextmanager
async def apersistent_graph(
    target: str | Path | None = None,
    *,
    components: Components | None = None,
    method: MethodConfig | None = None,
    deployment: DeploymentSettings | None = None,
) -> AsyncIterator[CragGraph]:
    """Async :func:`persistent_graph` (``aiosqlite`` or psycopg's async pool)."""
    async with async_checkpointer(target or configured_threads_db()) as saver:
        yield build_graph(
            _components(components), checkpointer=saver, method=method, deployment=deployment
        )


def _components(components: Components | None) -> Components:
    """``components``, or the app's when none are given."""
    return graphs.components if components is None else components


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


def record_feedback(
    graph_with_threads: CragGraph,
    thread_id: str,
    verdict: str,
    *,
    run_id: str = "",
    expected: str = "",
    comment: str = "",
    better: str | None = None,
    target: str | Path | None = None,
    method: MethodConfig | None = None,
    deployment: DeploymentSettings | None = None,
) -> Feedback:
    """Record feedback on the answer of a run of ``thread_id`` (of :func:`persistent_graph`).

    Python acts as the operator, as it does for everything else here: the record's owner is
    ``operator`` (the server's token's, whose records ``GET /crag/feedback`` lists too), and
    no hourly quota applies. Feedback given again on the same run replaces the earlier one.
    The run's record (question, answer, action, scores, knowledge, thresholds, generator:
    :func:`crag.app.feedback_record.run_record`) is read from the thread's state now.

    Args:
        graph_with_threads: The checkpointed graph the thread's runs were made with.
        thread_id: The thread.
        verdict: ``"good"`` or ``"bad"``.
        run_id: The run judged: a checkpoint's ``run_id`` metadata, or a checkpoint's id (what
            a record's ``run_id`` is for a run without one); empty: the thread's latest run.
        expected: The answer that was expected (at most 2,000 characters).
        comment: A comment (at most 2,000 characters).
        better: Which answer was better when standard RAG's was compared: ``"crag"``,
            ``"rag"`` or ``"same"``.
        target: The threads database the feedback is kept in; default: ``CRAG_THREADS_DB``,
            else ``.crag/threads.sqlite`` (where :func:`persistent_graph` keeps threads).
        method: The method whose thresholds the record names; default: the operator's.
        deployment: The settings whose evaluator and generator it names; default: the
            environment.

    Raises:
        FeedbackError: A wrong verdict, a text over its limit, no finished run of that id on
            the thread, or a database that cannot be used.
    """
    from crag.app.feedback_store import checked_input

    given = checked_input(
        {
            "thread_id": thread_id,
            "verdict": verdict,
            "run_id": run_id,
            "expected": expected,
            "comment": comment,
            "better": better,
        }
    )
    key, record = _judged_run(graph_with_threads, given, method, deployment)
    return _saved_as_operator(given, key, record, target)


def _judged_run(
    graph_with_threads: CragGraph,
    given: FeedbackInput,
    method: MethodConfig | None,
    deployment: DeploymentSettings | None,
) -> tuple[str, dict[str, Any]]:
    """The judged run's key (its ``run_id``, else its checkpoint's id) and its record.

    Raises:
        FeedbackError: The thread has no such finished run (404).
    """
    from crag.app.feedback_record import run_record, run_settings

    snapshot = _finished_run(graph_with_threads, given.thread_id, given.run_id)
    metadata = snapshot.metadata or {}
    record = run_record(snapshot.values, metadata, run_settings(method, deployment))
    key = str(metadata.get("run_id") or snapshot.config["configurable"]["checkpoint_id"])
    return key, record


def _saved_as_operator(
    given: FeedbackInput, key: str, record: Mapping[str, Any], target: str | Path | None
) -> Feedback:
    """Store the feedback as the operator's, with no hourly quota, in the threads database."""
    from crag.app.feedback_store import FeedbackStore
    from crag.app.web.account_store import AccountDatabase
    from crag.app.web.credentials import OPERATOR

    store = FeedbackStore(AccountDatabase(target or configured_threads_db()))
    try:
        saved, _ = store.save(OPERATOR, given, key, record, per_hour=None)
    finally:
        store.database.close()
    return saved


def _finished_run(graph_with_threads: CragGraph, thread_id: str, run_id: str) -> Any:
    """The state at the end of ``run_id`` on the thread (empty: its latest run).

    Raises:
        FeedbackError: The thread has no such run, or it has not ended with an answer (404).
    """
    from crag.app.feedback_record import finished

    config = thread_config(thread_id)
    snapshot = None
    if run_id:
        history = graph_with_threads.get_state_history(config, filter={"run_id": run_id})
        snapshot = next(iter(history), None)
        if snapshot is None:
            configurable = {**config["configurable"], "checkpoint_id": run_id}
            snapshot = graph_with_threads.get_state({"configurable": configurable})
    else:
        snapshot = graph_with_threads.get_state(config)
    if not snapshot.values or not finished(snapshot.values, snapshot.next):
        named = f" {run_id!r}" if run_id else ""
        raise FeedbackError(f"the thread {thread_id!r} has no finished run{named}", 404)
    return snapshot
