"""DuckDuckGo web search through the ``ddgs`` metasearch package (no API key needed).

``ddgs`` with ``backend="auto"`` queries several engines (Wikipedia, DuckDuckGo, Bing, ...) and
merges their hits. It can try engine after engine, each with its own timeout, so this module
runs it in a worker thread and gives up after one overall deadline.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import httpx
from ddgs import DDGS
from ddgs.exceptions import DDGSException, RatelimitException, TimeoutException

from crag.websearch.base import SearchResult, SearchUnavailableError, result_from_item
from crag.websearch.retry import TransientSearchError

logger = logging.getLogger(__name__)

T = TypeVar("T")

# ddgs raises a plain DDGSException with this text when every engine answered with nothing.
_NO_RESULTS = "No results found."
_MAX_DETAIL = 160
_HTTP_429 = re.compile(r"\b429\b")


class _DeadlineExceededError(Exception):
    """The worker thread did not finish before the deadline."""


def _run_with_deadline(func: Callable[[], T], timeout: float, name: str) -> T:
    """Run ``func`` in a daemon thread and wait at most ``timeout`` seconds for it.

    A thread that overruns is left to finish on its own (ddgs' per-request timeouts end it);
    being a daemon it never keeps the interpreter alive.

    Raises:
        _DeadlineExceededError: ``func`` did not return in time.
        Exception: whatever ``func`` raised.
    """
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            outcome["value"] = func()
        except Exception as exc:  # noqa: BLE001 - re-raised in the caller's thread
            outcome["error"] = exc
        finally:
            done.set()

    worker = threading.Thread(target=target, name=name, daemon=True)
    worker.start()
    if not done.wait(timeout):
        raise _DeadlineExceededError
    if "error" in outcome:
        raise outcome["error"]
    if "value" not in outcome:  # the thread died of a BaseException (SystemExit, ...)
        raise RuntimeError("the search thread ended without a result")
    value: T = outcome["value"]
    return value


def _root_cause(exc: BaseException) -> BaseException:
    """Unwrap ddgs' habit of wrapping an engine's exception as a plain ``DDGSException(err)``.

    Subclasses (``RatelimitException``, ``TimeoutException``) already say what happened and
    are kept as they are.
    """
    seen: set[int] = set()
    while (
        type(exc) is DDGSException
        and exc.args
        and isinstance(exc.args[0], BaseException)
        and id(exc) not in seen
    ):
        seen.add(id(exc))
        exc = exc.args[0]
    return exc


def _detail(exc: BaseException) -> str:
    """Describe a network failure in a few words."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    lowered = text.lower()
    if "dns" in lowered or "resolve" in lowered or "name or service not known" in lowered:
        return "DNS lookup failed; is this machine offline?"
    if "connect" in lowered or "refused" in lowered:
        return "connection failed; is this machine offline?"
    if len(text) > _MAX_DETAIL:
        text = text[: _MAX_DETAIL - 3] + "..."
    return text


def _to_result(item: Any) -> SearchResult | None:
    """Map one ddgs result dict (``title``/``href``/``body``) to a SearchResult."""
    return result_from_item(item, url_key="href", snippet_key="body")


class DuckDuckGoSearch:
    """Web search with ``ddgs`` (DuckDuckGo and the other engines it aggregates).

    Args:
        timeout: Seconds before the whole search is abandoned.
        region: ddgs region code, ``country-language``. The default is ``"us-en"`` rather
            than DuckDuckGo's ``"wt-wt"`` ("no region"): with ``backend="auto"`` ddgs derives
            the Wikipedia and Bing language from it, and ``wt-wt`` sends the Wikipedia engine
            to the non-existent ``wt.wikipedia.org``.
        safesearch: ``"on"``, ``"moderate"`` or ``"off"``.
        backend: ddgs backend(s), e.g. ``"auto"``, ``"duckduckgo"`` or ``"wikipedia,bing"``.
        name: Provider name reported to the graph.
    """

    def __init__(
        self,
        timeout: float = 10.0,
        region: str = "us-en",
        safesearch: str = "moderate",
        backend: str = "auto",
        name: str = "duckduckgo",
    ) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout must be positive, got {timeout!r}")
        self.name = name
        self.timeout = float(timeout)
        self.region = region
        self.safesearch = safesearch
        self.backend = backend

    def __repr__(self) -> str:
        return (
            f"DuckDuckGoSearch(timeout={self.timeout!r}, region={self.region!r}, "
            f"safesearch={self.safesearch!r}, backend={self.backend!r})"
        )

    @property
    def cache_key(self) -> tuple[str, ...]:
        """What decides this provider's results, for the search cache."""
        return ("duckduckgo", self.region, self.safesearch, self.backend)

    def _text(self, query: str, max_results: int) -> list[dict[str, Any]]:
        """Call ddgs (in the worker thread); a fresh client per search keeps threads apart."""
        client = DDGS(timeout=max(1, math.ceil(self.timeout)))
        return client.text(
            query,
            region=self.region,
            safesearch=self.safesearch,
            max_results=max_results,
            backend=self.backend,
        )

    def search(self, query: str, max_results: int) -> list[SearchResult]:
        """Return at most ``max_results`` hits, best first; ``[]`` when nothing was found.

        Raises:
            SearchUnavailableError: no network, rate limit, timeout or another ddgs failure.
        """
        query = query.strip()
        if not query or max_results <= 0:
            return []
        started = time.monotonic()
        try:
            raw = _run_with_deadline(
                lambda: self._text(query, max_results), self.timeout, name="crag-ddgs-search"
            )
        except _DeadlineExceededError:
            logger.warning("DuckDuckGo search for %r ran past %.1f s", query, self.timeout)
            raise TransientSearchError(
                f"DuckDuckGo search timed out after {self.timeout:g} s."
            ) from None
        except DDGSException as exc:
            if str(exc) == _NO_RESULTS:
                logger.info("DuckDuckGo found nothing for %r", query)
                return []
            raise self._translate(_root_cause(exc)) from exc
        except (httpx.HTTPError, OSError) as exc:
            raise self._translate(exc) from exc
        except Exception as exc:
            logger.warning("DuckDuckGo search failed unexpectedly", exc_info=True)
            raise SearchUnavailableError(
                f"DuckDuckGo search failed ({type(exc).__name__}: {_detail(exc)})."
            ) from exc
        results = [r for r in map(_to_result, raw or []) if r is not None][:max_results]
        logger.debug(
            "DuckDuckGo: %d result(s) for %r in %.2f s",
            len(results),
            query,
            time.monotonic() - started,
        )
        return results

    def _translate(self, exc: BaseException) -> SearchUnavailableError:
        """Turn a ddgs / network exception into a message a user understands.

        Rate limits and timeouts give :class:`TransientSearchError` (worth one retry).
        """
        logger.info("DuckDuckGo search failed: %r", exc)
        text = str(exc).lower()
        if isinstance(exc, RatelimitException) or "ratelimit" in text or _HTTP_429.search(text):
            return TransientSearchError(
                "DuckDuckGo rate-limited the search; wait a minute and try again, "
                "or use the 'searxng' search provider."
            )
        if isinstance(exc, TimeoutException | httpx.TimeoutException | TimeoutError) or (
            "timed out" in text
        ):
            return TransientSearchError(f"DuckDuckGo search timed out after {self.timeout:g} s.")
        return SearchUnavailableError(f"DuckDuckGo could not be reached ({_detail(exc)}).")
