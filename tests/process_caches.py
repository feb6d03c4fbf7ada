"""Empty crag's process-wide caches, as a new process would find them.

The product never empties these caches (a process keeps its evaluators, search providers and
lexical indexes for its life), so the code that does lives with the tests. Each helper imports
its module only when called: the conftest imports this module, and the web search's and the
lexical store's modules are not light.
"""

from __future__ import annotations


def clear_evaluator_cache() -> None:
    """Forget loaded evaluators, so the next ``load_evaluator`` call loads afresh."""
    from crag.evaluator import registry

    registry._load_cached.cache_clear()


def clear_search_provider_cache() -> None:
    """Forget the providers made by ``get_search_provider``."""
    from crag.websearch import registry

    registry._cached_provider.cache_clear()


def forget_lexical_indexes() -> None:
    """Drop the lexical indexes this process holds in memory (their files stay)."""
    from crag.vectorstore import lexical_store

    with lexical_store._guard:
        lexical_store._cache.clear()
