"""One run at a time per thread, across server replicas: the served graphs queue a second run.

A second run on a thread while its first is running must wait: both read and write the
thread's checkpoints, which otherwise interleave. ``langgraph dev`` and the LangGraph API server
enforce this themselves (``multitask_strategy``); several replicas of an engine that does not
(Aegra 0.11 accepts the parameter and enforces nothing, even on one replica) run both at once.

So when the replicas share a PostgreSQL (:func:`crag.vectorstore.shared_database.shared_database`:
``CRAG_THREADS_DB`` set to a ``postgresql://`` URL), a graph made by :func:`one_run_per_thread`
holds a session-level advisory lock keyed by the run's thread id for the whole run
(:mod:`crag.vectorstore.advisory_lock`), taken before the graph reads the thread's checkpoint:
around ``stream`` and ``astream``, which ``invoke``, ``ainvoke``, ``astream_events`` (v2 and
v3) and the servers all go through. A run that has to wait logs one line; a replica killed mid-run
closes its connection, so PostgreSQL frees the lock and the queued run goes on. A run without
a thread id, or a graph called inside another run (a checkpoint namespace), takes no lock.
Without a shared PostgreSQL nothing is taken: the one-process path reads one environment
variable per run and is otherwise unchanged.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import aclosing
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph
from langgraph.typing import ContextT, InputT, OutputT, StateT

from crag.vectorstore.advisory_lock import advisory_lock, async_advisory_lock
from crag.vectorstore.shared_database import shared_database

LOCK_PREFIX = "crag.thread-run:"
"""The advisory lock's name of a thread: this prefix and the thread id."""


def _thread_id(*configs: RunnableConfig | None) -> str | None:
    """The run's thread id (the call's config first, then the graph's own), unless nested."""
    for config in configs:
        configurable = (config or {}).get("configurable") or {}
        if configurable.get("checkpoint_ns"):
            return None  # a graph run inside another run: that run holds the thread
        thread = configurable.get("thread_id")
        if thread is not None and str(thread):
            return str(thread)
    return None


def _waiting(thread: str) -> str:
    return f"a run on thread {thread} waits for the thread's running run to finish"


class ThreadLockedGraph(CompiledStateGraph[StateT, ContextT, InputT, OutputT]):
    """A compiled graph whose runs on one thread take turns across processes (see the module).

    ``copy`` and ``with_config`` keep the class, so the copies the servers make (with their
    checkpointer) take the lock too.
    """

    def stream(  # type: ignore[override]
        self,
        input: Any,
        config: RunnableConfig | None = None,
        **kwargs: Any,
    ) -> Iterator[dict[str, Any] | Any]:
        """``stream``, holding the thread's run lock throughout when there is one."""
        database = shared_database()
        thread = _thread_id(config, self.config) if database is not None else None
        if database is None or thread is None:
            yield from super().stream(input, config, **kwargs)
            return
        with advisory_lock(database, LOCK_PREFIX + thread, _waiting(thread)):
            yield from super().stream(input, config, **kwargs)

    def _inner_astream(
        self, input: Any, config: RunnableConfig | None, **kwargs: Any
    ) -> AsyncGenerator[dict[str, Any] | Any, None]:
        """The compiled graph's own ``astream`` (an async generator, so it can be closed)."""
        return cast(
            "AsyncGenerator[dict[str, Any] | Any, None]", super().astream(input, config, **kwargs)
        )

    async def astream(  # type: ignore[override]
        self,
        input: Any,
        config: RunnableConfig | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[dict[str, Any] | Any]:
        """``astream``, holding the thread's run lock throughout when there is one."""
        database = shared_database()
        thread = _thread_id(config, self.config) if database is not None else None
        if database is None or thread is None:
            async with aclosing(self._inner_astream(input, config, **kwargs)) as chunks:
                async for chunk in chunks:
                    yield chunk
            return
        async with (
            async_advisory_lock(database, LOCK_PREFIX + thread, _waiting(thread)),
            aclosing(self._inner_astream(input, config, **kwargs)) as chunks,
        ):
            async for chunk in chunks:
                yield chunk


def one_run_per_thread(
    graph: CompiledStateGraph[StateT, ContextT, InputT, OutputT],
) -> ThreadLockedGraph[StateT, ContextT, InputT, OutputT]:
    """``graph`` as a :class:`ThreadLockedGraph`: the same nodes, channels and settings."""
    attributes = {key: value for key, value in graph.__dict__.items() if key != "__orig_class__"}
    return ThreadLockedGraph(**attributes)
