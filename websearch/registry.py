"""Build a search provider from its settings name."""

from __future__ import annotations

import functools

from websearch.base import SearchProvider
from websearch.duckduckgo import DuckDuckGoSearch
from websearch.safety import AddressPolicy
from websearch.searxng import SearxngSearch
from websearch.tavily import TavilySearch

SEARCH_PROVIDERS: tuple[str, ...] = ("duckduckgo", "searxng", "tavily")
WIKIPEDIA_DOMAIN = "wikipedia.org"


def create_search_provider(
    name: str,
    *,
    url: str,
    timeout: float,
    region: str = "us-en",
    safesearch: str = "moderate",
    backend: str = "auto",
    only_wikipedia: bool = False,
    allowed_hosts: str = "",
) -> SearchProvider:
    """Create a new provider.

    Args:
        name: ``"duckduckgo"``, ``"searxng"`` or ``"tavily"`` (case and spaces ignored).
        url: SearxNG base URL (``searxng`` only).
        timeout: Seconds before a search is abandoned.
        region: ddgs region, e.g. ``"us-en"`` (``duckduckgo`` only).
        safesearch: ``"on"``, ``"moderate"`` or ``"off"`` (``duckduckgo`` only).
        backend: ddgs backend(s), e.g. ``"auto"`` (``duckduckgo`` only).
        only_wikipedia: Ask the engine for Wikipedia pages only, where it can (``tavily``);
            the graph filters the results of every provider anyway.
        allowed_hosts: The ``allowed_hosts`` setting: non-public hosts and networks the SearxNG
            ``url`` may be on (``searxng`` only).

    Raises:
        ValueError: unknown ``name``, a bad SearxNG ``url`` or ``allowed_hosts``, or a
            non-positive ``timeout``.
    """
    key = name.strip().lower()
    if key == "duckduckgo":
        return DuckDuckGoSearch(
            timeout=timeout, region=region, safesearch=safesearch, backend=backend
        )
    if key == "searxng":
        return SearxngSearch(url, timeout=timeout, policy=AddressPolicy.from_setting(allowed_hosts))
    if key == "tavily":
        domains = (WIKIPEDIA_DOMAIN,) if only_wikipedia else ()
        return TavilySearch(timeout=timeout, include_domains=domains)
    raise ValueError(f"unknown search provider {name!r}; valid: {', '.join(SEARCH_PROVIDERS)}")


@functools.lru_cache(maxsize=16)
def _cached_provider(
    key: str,
    url: str,
    timeout: float,
    region: str,
    safesearch: str,
    backend: str,
    only_wikipedia: bool,
    allowed_hosts: str,
) -> SearchProvider:
    return create_search_provider(
        key,
        url=url,
        timeout=timeout,
        region=region,
        safesearch=safesearch,
        backend=backend,
        only_wikipedia=only_wikipedia,
        allowed_hosts=allowed_hosts,
    )


def get_search_provider(
    name: str,
    *,
    url: str,
    timeout: float,
    region: str = "us-en",
    safesearch: str = "moderate",
    backend: str = "auto",
    only_wikipedia: bool = False,
    allowed_hosts: str = "",
) -> SearchProvider:
    """Return the provider for these settings, creating it once per process.

    Same arguments as :func:`create_search_provider`. Providers keep no per-search state, so
    sharing one between threads is safe. Settings a provider ignores do not make new ones.
    """
    key = name.strip().lower()
    ddg = key == "duckduckgo"
    searxng = key == "searxng"
    return _cached_provider(
        key,
        url.strip() if searxng else "",
        float(timeout),
        region if ddg else "",
        safesearch if ddg else "",
        backend if ddg else "",
        only_wikipedia if key == "tavily" else False,
        allowed_hosts if searxng else "",
    )


def clear_search_provider_cache() -> None:
    """Forget the providers made by :func:`get_search_provider` (for tests)."""
    _cached_provider.cache_clear()
