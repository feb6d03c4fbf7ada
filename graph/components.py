"""The components nodes call, behind one provider so that tests can swap them.

Nodes ask :func:`current_components` for the vector store, evaluator, chat model and search
provider matching the run's :class:`~graph.context.Context`. The default provider
(:class:`app.wiring.DefaultComponents`) loads each real component once per process and shares
it between runs; tests install fakes with :func:`use_components`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.vectorstores import VectorStore

    from evaluator.base import RetrievalEvaluator
    from graph.context import Context
    from websearch.base import SearchProvider


class Components(Protocol):
    """Supplies each node with the components a run's settings ask for."""

    def vectorstore(self, context: Context) -> VectorStore:
        """The store passages are retrieved from."""
        ...

    def evaluator(self, context: Context) -> RetrievalEvaluator:
        """The retrieval evaluator (grade, refine and web selection share it)."""
        ...

    def chat_model(self, context: Context) -> BaseChatModel:
        """The generator, also used to rewrite queries."""
        ...

    def search(self, context: Context) -> SearchProvider:
        """The web search provider."""
        ...


_lock = threading.Lock()
_override: Components | None = None
_default: Components | None = None


def current_components() -> Components:
    """Return the active provider: an installed override, else the process-wide default."""
    global _default
    if _override is not None:
        return _override
    with _lock:
        if _default is None:
            from app.wiring import DefaultComponents

            _default = DefaultComponents()
        return _default


@contextmanager
def use_components(components: Components) -> Iterator[Components]:
    """Install ``components`` for the duration of the block (tests, custom wiring)."""
    global _override
    previous = _override
    _override = components
    try:
        yield components
    finally:
        _override = previous
