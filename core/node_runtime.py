"""How the graphs add a node: the run's settings resolved for it, cancellable where it calls models.

A node is ``node(state, runtime) -> StateUpdate`` that reads its settings from
``runtime.context``, a :class:`~crag.core.context.Context`. LangGraph builds a run's context at the
graph's boundary (``stream``/``astream``: a dict becomes the graph's context schema,
:data:`~crag.core.run_context.RunContext`, itself a ``Context``), but passes anything else through
as is: ``None`` for a run given no context, a mapping other than a dict, a wrong value. It has
no hook to build those at the boundary, so :func:`graph_node` wraps every node to hand it the
resolved context (:func:`~crag.core.context.resolve_context`: a ``Context`` as is, the shared
defaults for ``None``, a setting error for anything else). The nodes never resolve it
themselves, and every node of a run sees the same ``Context`` object.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

from langgraph.runtime import Runtime

from crag.core.cancellation import cancellable_node
from crag.core.context import Context, resolve_context

S = TypeVar("S")
U = TypeVar("U")


def settled(runtime: Runtime[Any]) -> Runtime[Context]:
    """``runtime`` with its context resolved to the run's :class:`Context`.

    Raises:
        InvalidSettingError: the context is neither a ``Context``, a mapping of settings nor
            ``None``, or a mapping names an unknown setting or a bad value.
    """
    context = resolve_context(runtime.context)
    if context is runtime.context:
        return cast("Runtime[Context]", runtime)
    return runtime.override(context=context)


def with_settings(node: Callable[[S, Runtime[Context]], U]) -> Callable[[S, Runtime[Any]], U]:
    """Wrap ``node`` so that it gets the run's resolved settings as ``runtime.context``.

    The wrapper keeps ``node``'s name and signature (LangGraph reads the ``runtime`` parameter
    and the state type from it).
    """

    @functools.wraps(node)
    def run(state: S, runtime: Runtime[Any]) -> U:
        return node(state, settled(runtime))

    return run


def graph_node(node: Callable[[S, Runtime[Context]], U], *, cancellable: bool = True) -> Any:
    """What a graph adds for ``node``: the node with its settings resolved, cancellable.

    :func:`with_settings`, then :func:`~crag.core.cancellation.cancellable_node` unless
    ``cancellable`` is off (a node that calls no model).
    """
    wrapped = with_settings(node)
    return cancellable_node(wrapped) if cancellable else wrapped
