"""How the graphs add a node: the run's settings resolved for it, cancellable where it calls models.

A node is ``node(state, runtime) -> StateUpdate`` that reads its settings from
``runtime.context``, a :class:`~crag.settings.run_settings.RunSettings`: the run's per-run
:class:`~crag.settings.context.Context` under the method and deployment the graph was built with.
LangGraph builds a run's context at the graph's boundary (``stream``/``astream``: a dict becomes
the graph's context schema, :data:`~crag.settings.run_context.RunContext`, itself a ``Context``),
but passes anything else through as is: ``None`` for a run given no context, a mapping other
than a dict, a wrong value. :func:`graph_node` wraps every node to hand it the joined settings
(:func:`~crag.settings.context.resolve_context`, then
:meth:`~crag.settings.run_settings.RunSettings.combine`). The nodes never resolve it themselves,
and every node of a run sees the same ``RunSettings`` object.

A node that calls components (the store, the evaluator, the generator, the web search) takes
them as a third argument, ``node(state, runtime, components)``: the graph's builder passes its
components to :func:`graph_node`, which binds them (:func:`with_components`). Nothing is looked
up at run time: a graph runs with the components it was built with.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast, overload

import cachetools
from langgraph.runtime import Runtime

from crag.core.cancellation import cancellable_node
from crag.settings.context import Context, resolve_context
from crag.settings.deployment import DeploymentSettings, deployment_settings
from crag.settings.method import MethodConfig, operator_method
from crag.settings.run_settings import RunSettings

S = TypeVar("S")
U = TypeVar("U")
C = TypeVar("C")

_RECENT = 64
"""Joined settings kept per graph: one per run in flight (every node of a run shares one)."""


class GraphSettings:
    """What a graph was built with: its method and deployment (``None``: the operator's).

    The operator's are read when a run starts (once per value of the environment), so a graph
    built at import (the served ones) follows the ``.env`` the server was started with.
    """

    def __init__(
        self, method: MethodConfig | None = None, deployment: DeploymentSettings | None = None
    ) -> None:
        """Settings for the runs of one graph."""
        self.method = method
        self.deployment = deployment
        self._lock = threading.Lock()
        self._recent: cachetools.LRUCache[tuple[int, int, int], tuple[object, ...]] = (
            cachetools.LRUCache(_RECENT)
        )

    def for_run(self, context: object) -> RunSettings:
        """The settings a node of the run with ``context`` reads.

        Raises:
            InvalidSettingError: the context is neither a ``Context``, a mapping of settings
                nor ``None``, names an unknown setting, a bad value, a method parameter or a
                deployment setting, or does not fit the deployment (a collection runs may not
                read).
        """
        run = resolve_context(context)
        method = self.method or operator_method()
        deployment = self.deployment or deployment_settings()
        key = (id(run), id(method), id(deployment))
        with self._lock:
            hit = self._recent.get(key)
            if hit is not None and all(
                a is b for a, b in zip(hit[:3], (run, method, deployment), strict=True)
            ):
                return cast("RunSettings", hit[3])
        settings = RunSettings.combine(run, method, deployment)
        with self._lock:
            self._recent[key] = (run, method, deployment, settings)
        return settings


def settled(runtime: Runtime[Any], graph: GraphSettings) -> Runtime[RunSettings]:
    """``runtime`` with its context joined to ``graph``'s method and deployment."""
    return runtime.override(context=graph.for_run(runtime.context))


def with_settings(
    node: Callable[[S, Runtime[RunSettings]], U], graph: GraphSettings
) -> Callable[[S, Runtime[Any]], U]:
    """Wrap ``node`` so that it gets the run's joined settings as ``runtime.context``.

    The wrapper keeps ``node``'s name and signature (LangGraph reads the ``runtime`` parameter
    and the state type from it).
    """

    @functools.wraps(node)
    def run(state: S, runtime: Runtime[Any]) -> U:
        return node(state, settled(runtime, graph))

    return run


def with_components(
    node: Callable[[S, Runtime[RunSettings], C], U], components: C
) -> Callable[[S, Runtime[RunSettings]], U]:
    """``node`` with ``components`` bound as its third argument: a node LangGraph can call.

    The result keeps ``node``'s name and docstring, and has the ``(state, runtime)`` signature
    LangGraph reads (not ``node``'s: it is not marked as wrapping it).
    """

    def run(state: S, runtime: Runtime[RunSettings]) -> U:
        return node(state, runtime, components)

    run.__name__ = getattr(node, "__name__", run.__name__)
    run.__qualname__ = getattr(node, "__qualname__", run.__qualname__)
    run.__doc__ = node.__doc__
    return run


@overload
def graph_node(
    node: Callable[[S, Runtime[RunSettings]], U], graph: GraphSettings, *, cancellable: bool = True
) -> Any: ...


@overload
def graph_node(
    node: Callable[[S, Runtime[RunSettings], C], U],
    graph: GraphSettings,
    *,
    components: C,
    cancellable: bool = True,
) -> Any: ...


def graph_node(
    node: Callable[..., Any],
    graph: GraphSettings,
    *,
    components: object = None,
    cancellable: bool = True,
) -> Any:
    """What a graph adds for ``node``: the node with its settings joined, cancellable.

    ``components`` given: bound as the node's third argument first (:func:`with_components`).
    Then :func:`with_settings` (``graph``: the method and deployment the graph was built with),
    then :func:`~crag.core.cancellation.cancellable_node` unless ``cancellable`` is off (a node
    that calls no model).
    """
    if components is not None:
        node = with_components(node, components)
    wrapped = with_settings(node, graph)
    return cancellable_node(wrapped) if cancellable else wrapped


__all__ = ["Context", "GraphSettings", "graph_node", "settled", "with_components", "with_settings"]
