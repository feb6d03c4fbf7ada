"""A process-wide time-to-live cache for searches and pages.

The same search (provider, its settings, query, number of results) or the same page (URL and
the reading limits) is not fetched twice within ``web_cache_ttl`` seconds, within one run or
across runs of the same process. LangGraph's node ``CachePolicy`` would do this only when a
cache is given to ``compile()``, which the LangGraph server does not do; a cache at the
component level works the same under ``invoke``, the server and Studio.

Only successes are cached: a search engine that was down, or a page that timed out, is asked
again next time. The caches are bounded (least recently used entries go first) and
thread-safe. :func:`clear_web_caches` empties them (tests, or to force fresh results).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import cachetools

from crag.websearch.base import SearchResult
from crag.websearch.pages import PageText

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TTLCache(Generic[K, V]):
    """A bounded, thread-safe mapping whose entries expire.

    The time-to-live is given per lookup, so runs with different ``web_cache_ttl`` settings
    can share one cache. That is why this is not :class:`cachetools.TTLCache` (one ttl fixed
    when it is built, an entry dropped once past it): here an entry too old for one run is still
    found by another run with a longer ttl. The bound and the least-recently-used order are a
    :class:`cachetools.LRUCache` of ``(stored at, value)``.

    Args:
        maxsize: Most entries kept; the least recently used go first.
        clock: Seconds from a fixed start that never go back; ``clock`` may also be set on a
            built cache (tests replace it on the process-wide caches to step through time).
    """

    def __init__(self, maxsize: int = 256, clock: Callable[[], float] = time.monotonic) -> None:
        if maxsize <= 0:
            raise ValueError(f"maxsize must be positive, got {maxsize!r}")
        self.maxsize = maxsize
        self.clock = clock
        self._entries: cachetools.LRUCache[K, tuple[float, V]] = cachetools.LRUCache(maxsize)
        self._lock = threading.Lock()

    def get(self, key: K, ttl: float) -> V | None:
        """The value stored under ``key`` less than ``ttl`` seconds ago, else ``None``."""
        if ttl <= 0:
            return None
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            stored_at, value = entry
            return None if self.clock() - stored_at >= ttl else value

    def put(self, key: K, value: V) -> None:
        """Store ``value`` under ``key`` (now), evicting the oldest entries past ``maxsize``."""
        with self._lock:
            self._entries[key] = (self.clock(), value)

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


SEARCH_CACHE: TTLCache[Hashable, tuple[SearchResult, ...]] = TTLCache(maxsize=128)
"""Search results by (provider cache key, query, number of results)."""
PAGE_CACHE: TTLCache[Hashable, PageText] = TTLCache(maxsize=256)
"""Pages read by (URL, reading limits)."""


def clear_web_caches() -> None:
    """Empty the search and page caches."""
    SEARCH_CACHE.clear()
    PAGE_CACHE.clear()
