"""Query rewriting and result ranking that favour Wikipedia, as the CRAG paper does.

The paper's web search prefers Wikipedia pages. Here that is done in two steps:

1. :func:`wikipedia_query` appends the keyword ``wikipedia`` to the query. A keyword (rather
   than ``site:wikipedia.org``) works with every engine ddgs and SearxNG query, and it only
   *biases* the search: when Wikipedia has nothing relevant, other pages still come back.
2. :func:`rank_results` moves Wikipedia pages to the front (stable) and drops duplicates.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit, urlunsplit

from crag.websearch.base import SearchResult

WIKIPEDIA_KEYWORD = "wikipedia"
_MENTIONS_WIKIPEDIA = re.compile(r"\bwikipedia\b|\bwikipedia\.org\b", re.IGNORECASE)


def wikipedia_query(query: str) -> str:
    """Bias ``query`` towards Wikipedia by appending `` wikipedia``.

    The query is returned unchanged (apart from surrounding whitespace) when it is empty or
    already mentions Wikipedia (any case, including ``site:en.wikipedia.org``).
    """
    query = query.strip()
    if not query or _MENTIONS_WIKIPEDIA.search(query):
        return query
    return f"{query} {WIKIPEDIA_KEYWORD}"


def _host(url: str) -> str:
    try:
        return (urlsplit(url.strip()).hostname or "").rstrip(".").lower()
    except ValueError:
        return ""


def is_wikipedia(url: str) -> bool:
    """Whether ``url`` is on ``wikipedia.org`` or any of its subdomains (``en.m.`` included)."""
    host = _host(url)
    return host == "wikipedia.org" or host.endswith(".wikipedia.org")


def normalize_url(url: str) -> str:
    """Key used to spot duplicates: no fragment, no trailing slash, lower-case scheme and host."""
    url = url.strip()
    try:
        parts = urlsplit(url)
    except ValueError:
        return url.rstrip("/")
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), path, parts.query, ""))


def rank_results(
    results: Iterable[SearchResult], prefer_wikipedia: bool, only_wikipedia: bool = False
) -> list[SearchResult]:
    """Drop duplicate URLs and, if asked, put Wikipedia pages first.

    The order is otherwise kept (stable): the first of several hits with the same
    normalised URL (see :func:`normalize_url`) stays where it was.

    Args:
        results: Hits, best first.
        prefer_wikipedia: Move Wikipedia pages before all others.
        only_wikipedia: Keep Wikipedia pages only.

    Returns:
        The ranked, de-duplicated hits.
    """
    seen: set[str] = set()
    unique: list[SearchResult] = []
    for result in results:
        key = normalize_url(result.url)
        if key in seen:
            continue
        seen.add(key)
        unique.append(result)
    if only_wikipedia:
        return [r for r in unique if is_wikipedia(r.url)]
    if prefer_wikipedia:
        wiki = [r for r in unique if is_wikipedia(r.url)]
        return wiki + [r for r in unique if not is_wikipedia(r.url)]
    return unique
