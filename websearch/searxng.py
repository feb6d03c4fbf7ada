"""Web search through a self-hosted SearxNG instance's JSON API.

The instance must allow the JSON format (``search.formats`` in its ``settings.yml`` must list
``json``); otherwise SearxNG answers ``403 Forbidden``. Its address follows the rules pages do
(:mod:`crag.websearch.safety`): an instance on a loopback or private address (the usual self-hosted
case) must be listed in ``allowed_hosts``.
"""

from __future__ import annotations

import json
import logging
import time
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

import httpx

from crag.websearch.base import SearchResult, SearchUnavailableError
from crag.websearch.guarded_client import ReplyRefusedError, ReplyTooLargeError, guarded_client
from crag.websearch.retry import TransientSearchError
from crag.websearch.safety import AddressPolicy, HostLookupError, UnsafeURLError, check_url

logger = logging.getLogger(__name__)

# A SearxNG result page is a few tens of kilobytes; anything far bigger is not one.
MAX_RESPONSE_BYTES = 5 * 1024 * 1024
_USER_AGENT = "crag/0.1 (Corrective RAG; SearxNG JSON client)"


def _status_text(status: int) -> str:
    try:
        return f"HTTP {status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"HTTP {status}"


def _text(value: Any) -> str:
    """Collapse whitespace in a JSON field that should be a string."""
    return " ".join(value.split()) if isinstance(value, str) else ""


def _to_result(item: Any) -> SearchResult | None:
    """Map one SearxNG result (``title``/``url``/``content``); drop non-http(s) URLs."""
    if not isinstance(item, dict):
        return None
    url = item.get("url")
    if not isinstance(url, str):
        return None
    url = url.strip()
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        return None
    return SearchResult(
        title=_text(item.get("title")) or url, url=url, snippet=_text(item.get("content"))
    )


class SearxngSearch:
    """Web search with a SearxNG instance (``GET {base_url}/search?q=...&format=json``).

    Each search uses a fresh HTTP client, so no cookies are kept between searches, and
    redirects are not followed (a redirect usually means a wrong ``base_url``). The client
    connects only to addresses ``policy`` allows (see :mod:`crag.websearch.guarded_client`); a
    refused address makes the search unavailable, saying why.

    Args:
        base_url: Root URL of the instance, e.g. ``http://127.0.0.1:8888``.
        timeout: Seconds before a search is abandoned (connecting and reading together).
        name: Provider name reported to the graph.
        policy: Which non-public addresses the instance may be on (default: none, i.e. the
            ``allowed_hosts`` setting left empty).

    Raises:
        ValueError: ``base_url`` is not an http(s) URL or ``timeout`` is not positive.
    """

    def __init__(
        self,
        base_url: str,
        timeout: float = 10.0,
        name: str = "searxng",
        *,
        policy: AddressPolicy | None = None,
    ) -> None:
        base_url = base_url.strip()
        try:
            parts = urlsplit(base_url)
        except ValueError as exc:
            raise ValueError(f"SearxNG URL {base_url!r} is not a valid URL: {exc}") from exc
        if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
            raise ValueError(
                f"SearxNG URL {base_url!r} must be an http(s) URL such as http://127.0.0.1:8888"
            )
        if not timeout > 0:
            raise ValueError(f"timeout must be positive, got {timeout!r}")
        self.name = name
        self.base_url = base_url.rstrip("/")
        self.timeout = float(timeout)
        self.policy = policy if policy is not None else AddressPolicy()

    def __repr__(self) -> str:
        return f"SearxngSearch({self.base_url!r}, timeout={self.timeout!r})"

    @property
    def cache_key(self) -> tuple[object, ...]:
        """What decides this provider's results, for the search cache."""
        return ("searxng", self.base_url, self.policy.key)

    @property
    def search_url(self) -> str:
        """The endpoint queried: ``{base_url}/search``."""
        return f"{self.base_url}/search"

    def search(self, query: str, max_results: int) -> list[SearchResult]:
        """Return at most ``max_results`` hits, best first; ``[]`` when nothing was found.

        Raises:
            SearchUnavailableError: the instance is unreachable, slow, rate-limits the query,
                answers with an HTTP error, or answers with something that is not its JSON.
        """
        query = query.strip()
        if not query or max_results <= 0:
            return []
        started = time.monotonic()
        body = self._fetch(query, started + self.timeout)
        results = self._parse(body)
        logger.debug(
            "SearxNG: %d result(s) for %r in %.2f s",
            len(results),
            query,
            time.monotonic() - started,
        )
        return results[:max_results]

    def _fetch(self, query: str, deadline: float) -> bytes:
        """GET the JSON answer; enforce the overall deadline while reading the body."""
        where = f"SearxNG at {self.base_url}"
        try:
            check_url(self.search_url, self.policy)
            with (
                guarded_client(self.policy, self.timeout, MAX_RESPONSE_BYTES) as client,
                client.stream(
                    "GET",
                    self.search_url,
                    params={"q": query, "format": "json"},
                    headers={"Accept": "application/json", "User-Agent": _USER_AGENT},
                ) as response,
            ):
                self._check_status(response)
                return self._read(response, deadline)
        except ReplyRefusedError as exc:
            raise self._refused_body(exc) from exc
        except UnsafeURLError as exc:
            logger.info("SearxNG address refused: %s", exc)
            raise SearchUnavailableError(
                f"{where} was not queried: {exc.reason}; list it in allowed_hosts "
                "(CRAG_ALLOWED_HOSTS) if it is a trusted instance"
            ) from exc
        except httpx.TimeoutException as exc:
            logger.info("SearxNG search timed out: %r", exc)
            raise TransientSearchError(self._timed_out()) from exc
        except (httpx.ConnectError, HostLookupError) as exc:
            logger.info("SearxNG connection failed: %r", exc)
            raise SearchUnavailableError(
                f"{where} could not be reached (connection refused or unknown host); "
                "is it running and is search_url right?"
            ) from exc
        except (httpx.HTTPError, httpx.InvalidURL, OSError) as exc:
            logger.info("SearxNG request failed: %r", exc)
            raise SearchUnavailableError(
                f"{where} could not be used ({type(exc).__name__}: {exc})."
            ) from exc

    def _read(self, response: httpx.Response, deadline: float) -> bytes:
        """The body, counted as it is decoded (the transport counts it on the wire too)."""
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > MAX_RESPONSE_BYTES:
                raise ReplyTooLargeError(response.request.url.host, MAX_RESPONSE_BYTES)
            if time.monotonic() > deadline:
                raise TransientSearchError(self._timed_out())
            chunks.append(chunk)
        return b"".join(chunks)

    def _refused_body(self, exc: ReplyRefusedError) -> SearchUnavailableError:
        """The error for an answer the client stopped reading: too large, or compressed."""
        where = f"SearxNG at {self.base_url}"
        if isinstance(exc, ReplyTooLargeError):
            return SearchUnavailableError(
                f"{where} answered with more than {MAX_RESPONSE_BYTES} bytes, "
                "which is not a SearxNG result page; crag stopped reading it."
            )
        logger.info("SearxNG answer refused: %s", exc)
        return SearchUnavailableError(f"{where} was not read: {exc}.")

    def _timed_out(self) -> str:
        return f"SearxNG at {self.base_url} did not answer within {self.timeout:g} s (timed out)."

    def _check_status(self, response: httpx.Response) -> None:
        """Raise SearchUnavailableError for anything but a 2xx answer.

        Rate limits (429) and server errors (5xx) raise :class:`TransientSearchError`, which
        the caller may retry; other 4xx answers are final.
        """
        status = response.status_code
        where = f"SearxNG at {self.base_url}"
        if 200 <= status < 300:
            return
        logger.info("SearxNG answered %s", status)
        if status == HTTPStatus.TOO_MANY_REQUESTS:
            raise TransientSearchError(
                f"{where} rate-limited the search (HTTP 429 Too Many Requests); "
                "wait a minute and try again."
            )
        if 300 <= status < 400:
            target = response.headers.get("location", "?")
            raise SearchUnavailableError(
                f"{where} answered with a redirect ({_status_text(status)} to {target}); "
                "check search_url."
            )
        if status == HTTPStatus.FORBIDDEN:
            raise SearchUnavailableError(
                f"{where} refused the search ({_status_text(status)}); make sure 'json' is "
                "listed in search.formats of its settings.yml."
            )
        if status >= 500:
            raise TransientSearchError(f"{where} answered {_status_text(status)}.")
        raise SearchUnavailableError(f"{where} answered {_status_text(status)}.")

    def _parse(self, body: bytes) -> list[SearchResult]:
        """Decode a SearxNG JSON answer into results."""
        not_json = SearchUnavailableError(
            f"SearxNG at {self.base_url} answered with something that is not SearxNG JSON; "
            "check search_url."
        )
        try:
            data = json.loads(body)
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
            raise not_json from exc
        if not isinstance(data, dict) or not isinstance(data.get("results"), list):
            raise not_json
        results = [r for r in map(_to_result, data["results"]) if r is not None]
        unresponsive = data.get("unresponsive_engines")
        if not results and isinstance(unresponsive, list) and unresponsive:
            engines = ", ".join(
                ": ".join(str(part) for part in entry) if isinstance(entry, list) else str(entry)
                for entry in unresponsive[:5]
            )
            raise SearchUnavailableError(
                f"SearxNG at {self.base_url} found nothing because its engines did not answer "
                f"({engines})."
            )
        return results
