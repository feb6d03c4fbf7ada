"""The graphs the LangGraph servers serve: the app's, each run marked as a served one.

``langgraph.json`` (and Aegra's ``deploy/cluster/graphs.py``) name these, not
:mod:`crag.app.graphs`: every run of a graph here carries :data:`~crag.nodes.caller.SERVED_KEY`
in its config, set by the graph itself whatever the caller sent, so that a run that reached
the graph without the caller's identity (a path of the server's that forgot to pass it) is
refused by :func:`~crag.nodes.caller.run_caller` instead of acting as the operator. The nodes,
components and models are those of :mod:`crag.app.graphs`: one set per process.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph
from langgraph.typing import ContextT, InputT, OutputT, StateT

from crag.app import graphs
from crag.app.thread_run_lock import ThreadLockedGraph
from crag.nodes.caller import ADMIN_PERMISSION, AUTH_KEYS, SERVED_KEY

if TYPE_CHECKING:
    from crag.app.web.accounts import Accounts

__all__ = ["graph", "ingest_graph", "rag_graph", "served", "tutorial_graph"]


def _marked(config: RunnableConfig | None) -> RunnableConfig:
    """``config`` marked as served, its caller as the accounts say now (a copy).

    The caller's own value of the mark is overridden; the caller is :func:`_caller_now`'s.
    Blocking: the caller's account is looked up in the threads database.
    """
    marked: dict[str, Any] = dict(config or {})
    configurable = {**(marked.get("configurable") or {}), SERVED_KEY: True}
    marked["configurable"] = _caller_now(configurable)
    return marked  # type: ignore[return-value]


@functools.cache
def _accounts(database: str) -> Accounts:
    from crag.app.web.accounts import Accounts

    return Accounts(database)


def _caller_name(configurable: dict[str, Any]) -> str:
    """The caller's identity in a run's config (the id, else the user object's); ``""``: none."""
    user = configurable.get("langgraph_auth_user_id")
    if isinstance(user, str) and user:
        return user
    found = configurable.get("langgraph_auth_user")
    name = found.get("identity") if isinstance(found, dict) else getattr(found, "identity", None)
    return name if isinstance(name, str) else ""


def _caller_now(configurable: dict[str, Any]) -> dict[str, Any]:
    """``configurable`` with its caller's permissions as their account has them now.

    langgraph-api writes the caller's permissions into a run's config when the run is created,
    and runs it with them whenever it starts (``after_seconds``, a queued run): an admin made a
    member must not still read every member's documents through it, nor a removed account's
    run act for it (its identity is dropped: the run is refused, :class:`NoCallerError`). A
    name no account ever had (a person the trusted proxy names) is kept as given. The operator
    (a name no account, proxy or provider can have: only the server's token signs it in) is an
    admin in every run, also one langgraph-api starts from a cron, whose config carries the
    operator's name without the permissions.
    """
    from crag.app.threads import configured_threads_db
    from crag.app.web.credentials import OPERATOR

    name = _caller_name(configurable)
    if name == OPERATOR:
        return {**configurable, "langgraph_auth_permissions": [ADMIN_PERMISSION]}
    if not name:
        return configurable
    standing = _accounts(configured_threads_db()).standing(name)
    if standing is None:
        return configurable
    if standing == "removed":
        return {key: value for key, value in configurable.items() if key not in AUTH_KEYS}
    permissions = [ADMIN_PERMISSION] if standing == "admin" else []
    return {
        **configurable,
        "langgraph_auth_user_id": name,
        "langgraph_auth_permissions": permissions,
    }


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
        marked = await asyncio.to_thread(_marked, config)
        inner = cast("AsyncGenerator[Any, None]", super().astream(input, marked, **kwargs))
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
