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

A node that calls components (the store, the evaluator, the generator, the web search) takes
them as a third argument, ``node(state, runtime, components)``: the graph's builder passes its
components to :func:`graph_node`, which binds them (:func:`with_components`). Nothing is looked
up at run time: a graph runs with the components it was built with.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast, overload

from langgraph.runtime import Runtime

from crag.core.cancellation import cancellable_node
from crag.core.context import Context, resolve_context

S = TypeVar("S")
U = TypeVar("U")
C = TypeVar("C")


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


def with_components(
    node: Callable[[S, Runtime[Context], C], U], components: C
) -> Callable[[S, Runtime[Context]], U]:
    """``node`` with ``components`` bound as its third argument: a node LangGraph can call.

    The result keeps ``node``'s name and docstring, and has the ``(state, runtime)`` signature
    LangGraph reads (not ``node``'s: it is not marked as wrapping it).
    """

    def run(state: S, runtime: Runtime[Context]) -> U:
        return node(state, runtime, components)

    run.__name__ = getattr(node, "__name__", run.__name__)
    run.__qualname__ = getattr(node, "__qualname__", run.__qualname__)
    run.__doc__ = node.__doc__
    return run


@overload
def graph_node(node: Callable[[S, Runtime[Context]], U], *, cancellable: bool = True) -> Any: ...


@overload
def graph_node(
    node: Callable[[S, Runtime[Context], C], U], *, components: C, cancellable: bool = True
) -> Any: ...


def graph_node(
    node: Callable[..., Any], *, components: object = None, cancellable: bool = True
) -> Any:
    """What a graph adds for ``node``: the node with its settings resolved, cancellable.

    ``components`` given: bound as the node's third argument first (:func:`with_components`).
    Then :func:`with_settings`, then :func:`~crag.core.cancellation.cancellable_node` unless
    ``cancellable`` is off (a node that calls no model).
    """
    if components is not None:
        node = with_components(node, components)
    wrapped = with_settings(node)
    return cancellable_node(wrapped) if cancellable else wrapped
