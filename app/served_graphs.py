"""The graphs the LangGraph servers serve: the app's, each run marked as a served one.

``langgraph.json`` (and Aegra's ``deploy/cluster/graphs.py``) name these, not
:mod:`crag.app.graphs`: every run of a graph here carries :data:`~crag.core.caller.SERVED_KEY`
in its config, set by the graph itself whatever the caller sent, so that a run that reached
the graph without the caller's identity (a path of the server's that forgot to pass it) is
refused by :func:`~crag.core.caller.run_caller` instead of acting as the operator. The nodes,
components and models are those of :mod:`crag.app.graphs`: one set per process.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import aclosing
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph
from langgraph.typing import ContextT, InputT, OutputT, StateT

from crag.app import graphs
from crag.app.thread_run_lock import ThreadLockedGraph
from crag.core.caller import SERVED_KEY

__all__ = ["graph", "ingest_graph", "rag_graph", "served", "tutorial_graph"]


def _marked(config: RunnableConfig | None) -> RunnableConfig:
    """``config`` with the served-run mark set (a copy; the caller's value is overridden)."""
    marked: dict[str, Any] = dict(config or {})
    marked["configurable"] = {**(marked.get("configurable") or {}), SERVED_KEY: True}
    return marked  # type: ignore[return-value]


class ServedGraph(ThreadLockedGraph[StateT, ContextT, InputT, OutputT]):
    """A thread-locked graph whose every run is marked as served (see the module).

    ``stream`` and ``astream`` are what ``invoke``, ``ainvoke``, ``astream_events`` and the
    servers go through; ``copy`` and ``with_config`` keep the class.
    """

    def stream(  # type: ignore[override]
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[dict[str, Any] | Any]:
        """The run, marked as served."""
        yield from super().stream(input, _marked(config), **kwargs)

    async def astream(  # type: ignore[override]
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[dict[str, Any] | Any]:
        """The run, marked as served."""
        inner = cast("AsyncGenerator[Any, None]", super().astream(input, _marked(config), **kwargs))
        async with aclosing(inner) as chunks:
            async for chunk in chunks:
                yield chunk


def served(
    graph: CompiledStateGraph[StateT, ContextT, InputT, OutputT],
) -> ServedGraph[StateT, ContextT, InputT, OutputT]:
    """``graph`` as a :class:`ServedGraph`: the same nodes, channels, settings and lock."""
    attributes = {key: value for key, value in graph.__dict__.items() if key != "__orig_class__"}
    return ServedGraph(**attributes)


graph = served(graphs.graph)
"""The CRAG graph, served as ``crag``."""
ingest_graph = served(graphs.ingest_graph)
"""The ingestion graph, served as ``ingest``."""
rag_graph = served(graphs.rag_graph)
"""Standard RAG, served as ``rag``."""
tutorial_graph = served(graphs.tutorial_graph)
"""The LangGraph tutorial's corrective RAG, served as ``crag-tutorial``."""
