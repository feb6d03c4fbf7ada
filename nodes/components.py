"""The components nodes call, behind one provider so that tests can swap them.

Nodes ask :func:`current_components` for the vector store, evaluator, chat model and search
provider matching the run's :class:`~crag.core.context.Context`. The default provider, the app's
(:data:`DEFAULT_COMPONENTS`), loads each real component once per process and shares it between
runs; tests install fakes with :func:`use_components`.

The default is named here, not imported: the app sits in the top layer and this module below
the nodes, so the name is resolved on the first call that needs it (the first run, on the
LangGraph server as in Python), never at import.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol, cast

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.vectorstores import VectorStore

    from crag.core.context import Context
    from crag.evaluator.base import RetrievalEvaluator
    from crag.websearch.base import SearchProvider


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


DEFAULT_COMPONENTS = "crag.app.wiring:DefaultComponents"
"""``module:attribute`` of the default provider's class (built once per process, no arguments)."""

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
            _default = _default_factory()()
        return _default


def _default_factory() -> Callable[[], Components]:
    """Import the class :data:`DEFAULT_COMPONENTS` names."""
    module, _, attribute = DEFAULT_COMPONENTS.partition(":")
    return cast("Callable[[], Components]", getattr(importlib.import_module(module), attribute))


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
