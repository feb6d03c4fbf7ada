"""Web search with Tavily's hosted search API (optional: ``pip install 'crag[tavily]'``).

Tavily needs an API key, read from the ``TAVILY_API_KEY`` environment variable (never from
the run's settings, so that it does not travel with runs or show in Studio). The
``tavily-python`` package is imported only when a search is made: without it, or without a
key, the search fails with a :class:`~crag.websearch.base.SearchUnavailableError` that says what
to install or set, and the graph goes on without web knowledge.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from crag.websearch.base import SearchResult, SearchUnavailableError, result_from_item
from crag.websearch.retry import TransientSearchError

logger = logging.getLogger(__name__)

API_KEY_ENV = "TAVILY_API_KEY"
_MAX_DETAIL = 160


def _to_result(item: Any) -> SearchResult | None:
    """Map one Tavily result (``title``/``url``/``content``); drop non-http(s) URLs."""
    return result_from_item(item, url_key="url", snippet_key="content")


class TavilySearch:
    """Web search through ``tavily.TavilyClient.search``.

    Args:
        timeout: Seconds before a search is abandoned.
        search_depth: Tavily's ``search_depth`` (``"basic"`` costs one credit).
        include_domains: Restrict results to these domains (e.g. ``("wikipedia.org",)``).
        api_key: The key; by default ``TAVILY_API_KEY`` at search time.
        name: Provider name reported to the graph.
    """

    def __init__(
        self,
        timeout: float = 10.0,
        search_depth: str = "basic",
        include_domains: Sequence[str] = (),
        api_key: str | None = None,
        name: str = "tavily",
    ) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout must be positive, got {timeout!r}")
        self.name = name
        self.timeout = float(timeout)
        self.search_depth = search_depth
        self.include_domains = tuple(include_domains)
        self._api_key = api_key

    def __repr__(self) -> str:
        return (
            f"TavilySearch(timeout={self.timeout!r}, search_depth={self.search_depth!r}, "
            f"include_domains={self.include_domains!r})"
        )

    @property
    def cache_key(self) -> tuple[object, ...]:
        """What decides this provider's results, for the search cache."""
        return ("tavily", self.search_depth, self.include_domains)

    def _client(self) -> Any:
        try:
            from tavily import TavilyClient
        except ImportError:
            raise SearchUnavailableError(
                "the Tavily search provider needs the optional tavily-python package "
                "(pip install 'crag[tavily]')"
            ) from None
        key = (self._api_key or os.environ.get(API_KEY_ENV, "")).strip()
        if not key:
            raise SearchUnavailableError(f"Tavily needs an API key: set {API_KEY_ENV}")
        return TavilyClient(api_key=key)

    def search(self, query: str, max_results: int) -> list[SearchResult]:
        """Return at most ``max_results`` hits, best first; ``[]`` when nothing was found.

        Raises:
            SearchUnavailableError: package or key missing, key refused, rate limit or usage
                limit, timeout, or no network.
        """
        query = query.strip()
        if not query or max_results <= 0:
            return []
        client = self._client()
        try:
            answer = client.search(
                query,
                max_results=max_results,
                search_depth=self.search_depth,
                include_domains=list(self.include_domains) or None,
                timeout=self.timeout,
            )
        except Exception as exc:  # tavily-python raises its own types and requests' ones
            raise self._translate(exc) from exc
        items = answer.get("results") if isinstance(answer, dict) else None
        if not isinstance(items, list):
            raise SearchUnavailableError("Tavily answered with something that is not results.")
        return [r for r in map(_to_result, items) if r is not None][:max_results]

    def _translate(self, exc: Exception) -> SearchUnavailableError:
        """Turn a tavily-python / requests exception into a message a user understands."""
        logger.info("Tavily search failed: %r", exc)
        kind = type(exc).__name__
        detail = " ".join(str(exc).split())[:_MAX_DETAIL]
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if kind == "UsageLimitExceededError" or status == 429:
            return TransientSearchError(
                "Tavily rate-limited the search or the plan's usage limit is reached "
                "(HTTP 429); wait and try again."
            )
        if kind in ("InvalidAPIKeyError", "MissingAPIKeyError") or status == 401:
            return SearchUnavailableError(f"Tavily refused the API key; check {API_KEY_ENV}.")
        if kind == "ForbiddenError" or status == 403:
            return SearchUnavailableError("Tavily refused the search (forbidden).")
        if kind == "BadRequestError" or status == 400:
            return SearchUnavailableError(f"Tavily rejected the query ({detail or 'bad request'}).")
        if "timeout" in kind.lower() or isinstance(exc, TimeoutError):
            return TransientSearchError(f"Tavily search timed out after {self.timeout:g} s.")
        if isinstance(status, int) and status >= 500:
            return TransientSearchError(f"Tavily answered HTTP {status}.")
        if "connection" in kind.lower() or isinstance(exc, OSError):
            return SearchUnavailableError("Tavily could not be reached; is this machine offline?")
        return SearchUnavailableError(f"Tavily search failed ({kind}: {detail}).")
