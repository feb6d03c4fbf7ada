"""The web search interface: one provider, one query, a few results."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit


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


def result_from_item(item: Any, *, url_key: str, snippet_key: str) -> SearchResult | None:
    """Map one engine's result dict to a :class:`SearchResult`; ``None`` if it is unusable.

    The URL is ``item[url_key]`` and the snippet ``item[snippet_key]``; an item that is not a
    dict or whose URL is not http(s) is dropped. Whitespace in the title and snippet is
    collapsed, and a result without a title is titled by its URL.
    """
    if not isinstance(item, dict):
        return None
    url = str(item.get(url_key) or "").strip()
    if urlsplit(url).scheme.lower() not in ("http", "https"):
        return None
    title = " ".join(str(item.get("title") or "").split()) or url
    snippet = " ".join(str(item.get(snippet_key) or "").split())
    return SearchResult(title=title, url=url, snippet=snippet)


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
