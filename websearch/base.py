"""The web search interface: one provider, one query, a few results."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


class SearchUnavailableError(RuntimeError):
    """The search engine could not be used (no network, rate limit, timeout, bad answer).

    The graph catches it, goes on with the knowledge it has and records the message in
    ``notes``; the message must say what failed in words a user understands.
    """


@dataclass(frozen=True)
class SearchResult:
    """One web search hit."""

    title: str
    url: str
    snippet: str


@runtime_checkable
class SearchProvider(Protocol):
    """A web search engine."""

    name: str

    def search(self, query: str, max_results: int) -> list[SearchResult]:
        """Return at most ``max_results`` hits, best first.

        Raises:
            SearchUnavailableError: the engine could not be reached or refused the query.
        """
        ...
