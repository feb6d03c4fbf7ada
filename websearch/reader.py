"""From search results to scored-ready passages: cached search, concurrent page reading.

:func:`cached_search` runs a search with one retry after a transient failure and keeps the
results in the process-wide cache (:mod:`crag.websearch.cache`). :func:`read_results` reads the
top results' pages concurrently (:mod:`crag.websearch.fetch`, :mod:`crag.websearch.pages`) and
returns their paragraphs as :class:`WebPassage` objects: the page title, a line break and the
paragraph, with the page's URL. A page that cannot be read falls back to its search snippet,
and a note says so.

The reading is asynchronous (``httpx.AsyncClient``); :func:`read_results` is its synchronous
face for sync nodes. It runs the coroutine with ``asyncio.run`` in the calling thread, or, if
that thread already runs an event loop (a notebook, an async caller), in a fresh loop on a
worker thread, so it never touches a loop it does not own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

from crag.core.cancellation import CancelToken, RunCancelledError, current_token
from crag.websearch.base import SearchProvider, SearchResult
from crag.websearch.cache import PAGE_CACHE, SEARCH_CACHE
from crag.websearch.fetch import FetchOptions, PageError, PageFetcher
from crag.websearch.pages import PageText, extract, page_title, pdf_supported
from crag.websearch.retry import search_with_retry
from crag.websearch.safety import AddressPolicy, strip_userinfo

logger = logging.getLogger(__name__)

T = TypeVar("T")

MAX_CONCURRENT_PAGES = 8
"""Pages fetched at the same time."""
CANCEL_POLL_SECONDS = 0.1
"""How often the page reading looks at its run's cancellation token."""


@dataclass(frozen=True)
class ReaderOptions:
    """How pages are read (the run's settings).

    Attributes:
        timeout: Seconds for each page, redirects included (pages are read concurrently).
        max_bytes: Largest page read; larger pages fall back to their snippet.
        max_redirects: Most redirects followed per page.
        allowed_hosts: Comma-separated host names, IPs and CIDRs that may be read although
            they are not public addresses.
        cache_ttl: Seconds a page read stays cached (0: no cache).
    """

    timeout: float = 5.0
    max_bytes: int = 2_000_000
    max_redirects: int = 5
    allowed_hosts: str = ""
    cache_ttl: float = 3600.0

    def fetch_options(self) -> FetchOptions:
        """The fetcher's options (raises ValueError for a bad setting)."""
        return FetchOptions(
            timeout=self.timeout,
            max_bytes=self.max_bytes,
            max_redirects=self.max_redirects,
            policy=AddressPolicy.from_setting(self.allowed_hosts),
            pdf=pdf_supported(),
        )


@dataclass(frozen=True)
class WebPassage:
    """A piece of web text ready for the evaluator.

    Attributes:
        text: The title, a line break, the paragraph (just the paragraph without a title).
        source: The URL it came from.
        from_page: ``True`` for a page paragraph, ``False`` for a search snippet.
    """

    text: str
    source: str
    from_page: bool


@dataclass
class WebReading:
    """The passages read from a list of results, and notes on what could not be read."""

    passages: list[WebPassage] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _search_key(provider: SearchProvider, query: str, max_results: int) -> tuple[object, ...]:
    key = getattr(provider, "cache_key", None)
    return (key, " ".join(query.split()).lower(), max_results) if key is not None else ()


def cached_search(
    provider: SearchProvider, query: str, max_results: int, *, ttl: float
) -> list[SearchResult]:
    """Search, retrying once after a transient failure; cache the results for ``ttl`` s.

    Providers without a ``cache_key`` attribute (test fakes, custom providers) are never
    cached: only a provider can say which of its settings change its results.

    Raises:
        SearchUnavailableError: the search failed (after the retry, if one made sense).
    """
    key = _search_key(provider, query, max_results)
    if key:
        hit = SEARCH_CACHE.get(key, ttl)
        if hit is not None:
            logger.debug("search cache hit for %r", query)
            return list(hit)
    results = search_with_retry(provider, query, max_results)
    if key and ttl > 0:
        SEARCH_CACHE.put(key, tuple(results))
    return results


def run_sync(factory: Callable[[], Awaitable[T]]) -> T:
    """Run the coroutine made by ``factory`` to completion from synchronous code.

    In a thread without a running event loop this is ``asyncio.run``; in a thread that runs
    one, the coroutine runs in a fresh loop on a worker thread while this thread waits.
    """

    async def main() -> T:
        return await factory()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="crag-web") as pool:
        return pool.submit(asyncio.run, main()).result()


def _displayed(url: str) -> str:
    """A result URL fit for notes and sources: no user name or password in it."""
    try:
        return strip_userinfo(url) if "@" in url else url
    except ValueError:
        return url


def _note(url: str, error: PageError, has_snippet: bool) -> str:
    head = f"skipped {url}: {error.reason}" if error.skipped else f"{url}: {error.reason}"
    return f"{head}, used its search snippet" if has_snippet else f"{head}, nothing used from it"


def _passage(title: str, text: str, source: str, from_page: bool) -> WebPassage:
    return WebPassage(
        text=f"{title}\n{text}" if title else text, source=source, from_page=from_page
    )


async def _read_page(
    fetcher: PageFetcher, url: str, options: ReaderOptions, limit: asyncio.Semaphore
) -> PageText:
    key = (url, fetcher.options.policy.key, options.max_bytes, options.max_redirects)
    cached = PAGE_CACHE.get(key, options.cache_ttl)
    if cached is not None:
        logger.debug("page cache hit for %s", url)
        return cached
    async with limit:
        page = await fetcher.fetch(url)
    text = await asyncio.to_thread(extract, page)
    if options.cache_ttl > 0:
        PAGE_CACHE.put(key, text)
    return text


PageProgress = Callable[[str, bool, int, int], None]
"""Called after each page read: ``(url, read_ok, pages_done, pages_total)``."""


def _notify(on_page: PageProgress | None, url: str, ok: bool, done: int, total: int) -> None:
    if on_page is None:
        return
    try:
        on_page(_displayed(url), ok, done, total)
    except Exception:  # progress reporting must never stop the reading
        logger.debug("page progress callback failed", exc_info=True)


async def aread_results(
    results: Sequence[SearchResult],
    *,
    pages: int,
    options: ReaderOptions,
    on_page: PageProgress | None = None,
) -> WebReading:
    """Read the pages of the first ``pages`` results concurrently; snippets for the rest.

    Each page read gives its paragraphs (title-prefixed, with the page's URL as source). A page
    that is refused, skipped or fails gives its search snippet instead, and a note; so does a
    page without readable paragraphs. Results past ``pages`` give their snippets, silently.
    ``on_page`` (optional) hears about each page as soon as it is read or has failed.

    Raises:
        ValueError: a bad reading setting (``options``).
    """
    to_read = list(results[: max(0, pages)])
    outcomes: list[PageText | PageError] = []
    if to_read:
        fetch_options = options.fetch_options()
        limit = asyncio.Semaphore(MAX_CONCURRENT_PAGES)
        done = 0

        async def read(fetcher: PageFetcher, url: str) -> PageText:
            nonlocal done
            ok = False
            try:
                page = await _read_page(fetcher, url, options, limit)
                ok = True
                return page
            finally:
                done += 1
                _notify(on_page, url, ok, done, len(to_read))

        async with PageFetcher(fetch_options) as fetcher:
            gathered = await asyncio.gather(
                *(read(fetcher, r.url) for r in to_read),
                return_exceptions=True,
            )
        for result, outcome in zip(to_read, gathered, strict=True):
            if isinstance(outcome, PageText | PageError):
                outcomes.append(outcome)
            elif isinstance(outcome, Exception):  # a bug must not end the run
                logger.warning("reading %s failed", result.url, exc_info=outcome)
                outcomes.append(PageError(f"could not be read ({type(outcome).__name__})"))
            else:  # CancelledError, KeyboardInterrupt, ...
                raise outcome
    return _compose(results, outcomes)


def _compose(
    results: Sequence[SearchResult], outcomes: Sequence[PageText | PageError]
) -> WebReading:
    """Passages in result order: a page's paragraphs, or else its snippet (with a note)."""
    reading = WebReading()
    seen: set[str] = set()

    def add(passage: WebPassage) -> None:
        if passage.text not in seen:
            seen.add(passage.text)
            reading.passages.append(passage)

    for index, result in enumerate(results):
        url = _displayed(result.url)
        title = page_title(result.title) if result.title != result.url else ""
        snippet = result.snippet.strip()
        if index < len(outcomes):
            outcome = outcomes[index]
            if isinstance(outcome, PageText) and outcome.paragraphs:
                for paragraph in outcome.paragraphs:
                    add(_passage(outcome.title or title, paragraph, outcome.url, True))
                continue
            if isinstance(outcome, PageText):
                outcome = PageError("no readable text on the page")
            reading.notes.append(_note(url, outcome, bool(snippet)))
        if snippet:
            add(_passage(title, snippet, url, False))
    return reading


async def until_cancelled(work: Awaitable[T], token: CancelToken | None) -> T:
    """Await ``work``; cancel it and raise if ``token`` is cancelled first.

    The reading of a page waits on the network (up to ``page_timeout``, redirects included),
    where no model's cancellation check runs: without this, Ctrl-C or SIGTERM on ``crag ask``
    waited for the slowest page, as LangGraph waits for the node before the interrupt goes on.

    Raises:
        RunCancelledError: ``token`` was cancelled before ``work`` ended.
    """
    task = asyncio.ensure_future(work)
    if token is None:
        return await task
    while not task.done():
        await asyncio.wait({task}, timeout=CANCEL_POLL_SECONDS)
        if not task.done() and token.cancelled:
            task.cancel()
            await asyncio.wait({task})
            raise RunCancelledError("the run was cancelled while reading web pages")
    return task.result()


def read_results(
    results: Sequence[SearchResult],
    *,
    pages: int,
    options: ReaderOptions,
    on_page: PageProgress | None = None,
) -> WebReading:
    """Synchronous :func:`aread_results`, safe to call with or without a running loop.

    The reading stops soon after the calling run is cancelled (:func:`until_cancelled`).
    """
    if pages <= 0 or not results:
        return _compose(results, [])
    token = current_token()  # looked up here: run_sync may read on a thread of its own
    return run_sync(
        lambda: until_cancelled(
            aread_results(results, pages=pages, options=options, on_page=on_page), token
        )
    )
