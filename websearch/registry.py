"""Build a search provider from its settings."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from crag.websearch.base import SearchProvider
from crag.websearch.duckduckgo import DuckDuckGoSearch
from crag.websearch.safety import AddressPolicy
from crag.websearch.searxng import SearxngSearch
from crag.websearch.tavily import TavilySearch

if TYPE_CHECKING:
    from crag.settings.run_settings import RunSettings

SEARCH_PROVIDERS: tuple[str, ...] = ("duckduckgo", "searxng", "tavily")
WIKIPEDIA_DOMAIN = "wikipedia.org"


@dataclass(frozen=True)
class SearchSettings:
    """Everything a search provider is built from (the run's ``search_*`` settings).

    Attributes:
        provider: ``"duckduckgo"``, ``"searxng"`` or ``"tavily"`` (case and spaces ignored).
        url: SearxNG base URL (``searxng`` only).
        timeout: Seconds before a search is abandoned.
        region: ddgs region, e.g. ``"us-en"`` (``duckduckgo`` only).
        safesearch: ``"on"``, ``"moderate"`` or ``"off"`` (``duckduckgo`` only).
        backend: ddgs backend(s), e.g. ``"auto"`` (``duckduckgo`` only).
        only_wikipedia: Ask the engine for Wikipedia pages only, where it can (``tavily``);
            the graph filters the results of every provider anyway.
        allowed_hosts: The ``allowed_hosts`` setting: non-public hosts and networks the SearxNG
            ``url`` may be on (``searxng`` only).
    """

    provider: str = "duckduckgo"
    url: str = ""
    timeout: float = 10.0
    region: str = "us-en"
    safesearch: str = "moderate"
    backend: str = "auto"
    only_wikipedia: bool = False
    allowed_hosts: str = ""

    @classmethod
    def from_context(cls, settings: RunSettings) -> SearchSettings:
        """The search settings of a run."""
        return cls(
            provider=settings.deployment.search_provider,
            url=settings.deployment.search_url,
            timeout=settings.deployment.search_timeout,
            region=settings.search_region,
            safesearch=settings.search_safesearch,
            backend=settings.deployment.search_backend,
            only_wikipedia=settings.only_wikipedia,
            allowed_hosts=settings.deployment.allowed_hosts,
        )

    def relevant(self) -> SearchSettings:
        """These settings as the provider sees them (the cache key of :func:`get_search_provider`).

        The name is normalised, and the settings the provider ignores are set to their defaults,
        so that they do not tell two providers apart.
        """
        key = self.provider.strip().lower()
        ddg, searxng = key == "duckduckgo", key == "searxng"
        default = SearchSettings()
        return dataclasses.replace(
            default,
            provider=key,
            url=self.url.strip() if searxng else default.url,
            timeout=float(self.timeout),
            region=self.region if ddg else default.region,
            safesearch=self.safesearch if ddg else default.safesearch,
            backend=self.backend if ddg else default.backend,
            only_wikipedia=self.only_wikipedia if key == "tavily" else default.only_wikipedia,
            allowed_hosts=self.allowed_hosts if searxng else default.allowed_hosts,
        )


def create_search_provider(settings: SearchSettings) -> SearchProvider:
    """Create a new provider.

    Raises:
        ValueError: unknown ``provider``, a bad SearxNG ``url`` or ``allowed_hosts``, or a
            non-positive ``timeout``.
    """
    key = settings.provider.strip().lower()
    if key == "duckduckgo":
        return DuckDuckGoSearch(
            timeout=settings.timeout,
            region=settings.region,
            safesearch=settings.safesearch,
            backend=settings.backend,
        )
    if key == "searxng":
        policy = AddressPolicy.from_setting(settings.allowed_hosts)
        return SearxngSearch(settings.url, timeout=settings.timeout, policy=policy)
    if key == "tavily":
        domains = (WIKIPEDIA_DOMAIN,) if settings.only_wikipedia else ()
        return TavilySearch(timeout=settings.timeout, include_domains=domains)
    raise ValueError(
        f"unknown search provider {settings.provider!r}; valid: {', '.join(SEARCH_PROVIDERS)}"
    )


@functools.lru_cache(maxsize=16)
def _cached_provider(settings: SearchSettings) -> SearchProvider:
    return create_search_provider(settings)


def get_search_provider(settings: SearchSettings) -> SearchProvider:
    """Return the provider for these settings, creating it once per process.

    Providers keep no per-search state, so sharing one between threads is safe. Settings a
    provider ignores do not make new ones (:meth:`SearchSettings.relevant`).
    """
    return _cached_provider(settings.relevant())
