"""Build a search provider from its settings name."""

from __future__ import annotations

import functools

from websearch.base import SearchProvider
from websearch.duckduckgo import DuckDuckGoSearch
from websearch.searxng import SearxngSearch

SEARCH_PROVIDERS: tuple[str, ...] = ("duckduckgo", "searxng")


def create_search_provider(name: str, *, url: str, timeout: float) -> SearchProvider:
    """Create a new provider.

    Args:
        name: ``"duckduckgo"`` or ``"searxng"`` (case and surrounding spaces ignored).
        url: SearxNG base URL (ignored by ``duckduckgo``).
        timeout: Seconds before a search is abandoned.

    Raises:
        ValueError: unknown ``name``, a bad SearxNG ``url`` or a non-positive ``timeout``.
    """
    key = name.strip().lower()
    if key == "duckduckgo":
        return DuckDuckGoSearch(timeout=timeout)
    if key == "searxng":
        return SearxngSearch(url, timeout=timeout)
    raise ValueError(f"unknown search provider {name!r}; valid: {', '.join(SEARCH_PROVIDERS)}")


@functools.lru_cache(maxsize=16)
def _cached_provider(key: str, url: str, timeout: float) -> SearchProvider:
    return create_search_provider(key, url=url, timeout=timeout)


def get_search_provider(name: str, *, url: str, timeout: float) -> SearchProvider:
    """Return the provider for these settings, creating it once per process.

    Same arguments as :func:`create_search_provider`. Providers keep no per-search state, so
    sharing one between threads is safe.
    """
    key = name.strip().lower()
    # DuckDuckGo ignores the URL: do not make one instance per search_url.
    return _cached_provider(key, url.strip() if key == "searxng" else "", float(timeout))


def clear_search_provider_cache() -> None:
    """Forget the providers made by :func:`get_search_provider` (for tests)."""
    _cached_provider.cache_clear()
