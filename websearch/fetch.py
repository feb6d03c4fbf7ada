"""Fetch web pages safely: bounded in time and size, checked at every hop, without cookies.

:class:`PageFetcher` wraps one guarded ``httpx.AsyncClient``
(:func:`crag.websearch.guarded_client.guarded_async_client`) for a batch of pages:

* **Addresses.** Every URL (the first and each redirect target) must pass
  :func:`crag.websearch.safety.check_url`. Host names are resolved by the client's guarded
  transport (:mod:`crag.websearch.guarded_client`): it resolves the name once, checks every
  address against the :class:`~crag.websearch.safety.AddressPolicy` and then connects to one of
  those checked addresses. TLS still verifies the certificate against the host name and HTTP
  still sends it as ``Host``, so the page is the one asked for, while a DNS answer that changes
  after the check (DNS rebinding) cannot point the connection somewhere else. Proxies from the
  environment are not used (``trust_env=False``): with a proxy, the proxy would resolve names.
* **Redirects** are followed by hand, at most ``max_redirects`` of them, so that each hop is
  checked like the first URL.
* **Size and time.** A ``Content-Length`` over ``max_bytes`` is refused before reading; the body
  is streamed and reading stops once it passes ``max_bytes``, counted as it comes off the wire.
  Compression is not requested (``Accept-Encoding: identity``) and a compressed body is refused
  unread, so the size read is the size of the page: a 32 KB zstd page never becomes 1 GiB. The
  whole fetch (DNS, connects, redirects, body) must finish within ``timeout`` seconds.
* **Types.** The ``Content-Type`` is checked before the body is read: HTML is read, PDF only
  when asked for (``pdf=True``), anything else is skipped. A missing or generic type is
  decided from the first bytes.
* **No credentials.** User names and passwords are removed from URLs, no ``Authorization``
  header is sent, ``.netrc`` is not read and the guarded client's cookie jar refuses every
  cookie, so a cookie set by one page (or hop) is never sent back.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from http import HTTPStatus
from types import TracebackType
from urllib.parse import urljoin

import httpx

from crag.websearch.guarded_client import (
    ReplyRefusedError,
    ReplyTooLargeError,
    guarded_async_client,
)
from crag.websearch.safety import AddressPolicy, HostLookupError, UnsafeURLError, check_url

logger = logging.getLogger(__name__)

USER_AGENT = "crag/0.1 (Corrective RAG page reader)"
"""The ``User-Agent`` sent with every page request."""

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
PDF_TYPES = frozenset({"application/pdf", "application/x-pdf"})
_SNIFFED_TYPES = frozenset({"", "application/octet-stream", "binary/octet-stream"})
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_CHUNK = 64 * 1024
_ACCEPT = "text/html,application/xhtml+xml;q=0.9,application/pdf;q=0.8,*/*;q=0.1"


class PageError(Exception):
    """A page that was not read.

    Attributes:
        reason: What happened, in a few words a user understands ("page too large ...").
        skipped: ``True`` when crag chose not to read it (not a web page, refused address),
            ``False`` when reading failed (timeout, HTTP error, unreachable).
    """

    def __init__(self, reason: str, *, skipped: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.skipped = skipped


@dataclass(frozen=True)
class FetchOptions:
    """Limits for fetching one page.

    Attributes:
        timeout: Seconds for the whole fetch of one page, redirects included.
        max_bytes: Largest body read, in bytes.
        max_redirects: Most redirects followed.
        policy: Which non-public addresses may be read (none by default).
        pdf: Accept PDF documents (only when they can be parsed).
        user_agent: The ``User-Agent`` header.
    """

    timeout: float = 5.0
    max_bytes: int = 2_000_000
    max_redirects: int = 5
    policy: AddressPolicy = field(default_factory=AddressPolicy)
    pdf: bool = False
    user_agent: str = USER_AGENT

    def __post_init__(self) -> None:
        if not self.timeout > 0:
            raise ValueError(f"page_timeout must be positive, got {self.timeout!r}")
        if self.max_bytes <= 0:
            raise ValueError(f"max_page_bytes must be positive, got {self.max_bytes!r}")
        if self.max_redirects < 0:
            raise ValueError(f"max_redirects must be 0 or more, got {self.max_redirects!r}")


@dataclass(frozen=True)
class FetchedPage:
    """The body of a page that was read.

    Attributes:
        url: The final URL, after redirects (without user info or fragment).
        media_type: Lower-case media type, e.g. ``text/html`` or ``application/pdf``.
        charset: The charset the server declared, if any.
        body: At most ``max_bytes`` bytes.
    """

    url: str
    media_type: str
    charset: str | None
    body: bytes

    @property
    def is_pdf(self) -> bool:
        """Whether the body is a PDF document."""
        return self.media_type in PDF_TYPES


def _status_text(status: int) -> str:
    try:
        return f"HTTP {status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"HTTP {status}"


def _media_type(response: httpx.Response) -> tuple[str, str | None]:
    """The response's media type (lower case) and declared charset."""
    raw = response.headers.get("content-type", "")
    media_type = raw.split(";", 1)[0].strip().lower()
    return media_type, response.charset_encoding


def _sniff(head: bytes) -> str:
    """Guess a media type from the first bytes of a body with no useful Content-Type."""
    start = head.lstrip()[:512].lower()
    if start.startswith(b"%pdf-"):
        return "application/pdf"
    if start.startswith((b"<!doctype html", b"<html")) or b"<html" in start:
        return "text/html"
    return ""


class PageFetcher:
    """Fetch pages with one client; use as ``async with PageFetcher(options) as fetcher``."""

    def __init__(self, options: FetchOptions) -> None:
        self.options = options
        self._client: httpx.AsyncClient | None = None

    async def __aenter__(self) -> PageFetcher:
        options = self.options
        self._client = guarded_async_client(
            options.policy,
            options.timeout,
            options.max_bytes,
            headers={"User-Agent": options.user_agent, "Accept": _ACCEPT},
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def fetch(self, url: str) -> FetchedPage:
        """Fetch ``url`` within the time limit.

        Raises:
            PageError: the page was refused, skipped or could not be read; ``reason`` says why.
        """
        try:
            return await asyncio.wait_for(self._fetch(url), self.options.timeout)
        except TimeoutError:
            raise PageError(f"page did not load within {self.options.timeout:g} s") from None

    async def _fetch(self, url: str) -> FetchedPage:
        try:
            current = check_url(url, self.options.policy)
        except UnsafeURLError as exc:
            raise PageError(f"refused to read it: {exc.reason}", skipped=True) from None
        for hop in range(self.options.max_redirects + 1):
            response = await self._send(hop, current)
            try:
                if response.status_code in _REDIRECTS and "location" in response.headers:
                    target = urljoin(current, response.headers["location"].strip())
                    try:
                        current = check_url(target, self.options.policy)
                    except UnsafeURLError as exc:
                        raise self._refused(hop + 1, target, exc.reason) from None
                    continue
                return await self._read(current, response)
            finally:
                await response.aclose()
        raise PageError(f"too many redirects (more than {self.options.max_redirects})")

    async def _send(self, hop: int, url: str) -> httpx.Response:
        """GET ``url`` (hop ``hop`` of the redirects) and return the response, body unread."""
        if self._client is None:
            raise RuntimeError("use PageFetcher as an async context manager")
        try:
            request = self._client.build_request("GET", url)
            return await self._client.send(request, stream=True)
        except UnsafeURLError as exc:
            raise self._refused(hop, url, exc.reason) from None
        except HostLookupError as exc:
            logger.info("%s", exc)
            raise PageError("could not be reached (DNS lookup failed)") from None
        except ReplyRefusedError as exc:
            raise self._body_refused(exc) from None
        except httpx.TimeoutException:
            raise PageError(f"page did not load within {self.options.timeout:g} s") from None
        except httpx.ConnectError as exc:
            logger.info("connecting to %s failed: %r", url, exc)
            raise PageError("could not be reached (connection failed)") from None
        except httpx.HTTPError as exc:
            logger.info("requesting %s failed: %r", url, exc)
            raise PageError(f"could not be read ({type(exc).__name__})") from None
        except httpx.InvalidURL:
            raise PageError("not a valid URL", skipped=True) from None

    def _body_refused(self, exc: ReplyRefusedError) -> PageError:
        """The page's error for a body the transport refused (too large, compressed)."""
        if isinstance(exc, ReplyTooLargeError):
            return PageError(f"page too large (more than {self.options.max_bytes:,} bytes)")
        return PageError(f"refused to read it: {exc}", skipped=True)

    @staticmethod
    def _refused(hop: int, url: str, reason: str) -> PageError:
        if hop == 0:
            return PageError(f"refused to read it: {reason}", skipped=True)
        return PageError(f"refused to follow its redirect to {url}: {reason}", skipped=True)

    def _check_type(self, media_type: str) -> None:
        if media_type in HTML_TYPES:
            return
        if media_type in PDF_TYPES:
            if self.options.pdf:
                return
            raise PageError(
                "a PDF, and reading PDFs needs the pypdf package, which is not installed "
                "(reinstall crag)",
                skipped=True,
            )
        raise PageError(f"not a web page ({media_type or 'unknown type'})", skipped=True)

    async def _read(self, url: str, response: httpx.Response) -> FetchedPage:
        """Check status, type and size, then read the body up to ``max_bytes``."""
        status = response.status_code
        if not 200 <= status < 300:
            raise PageError(f"page answered {_status_text(status)}")
        media_type, charset = _media_type(response)
        if media_type not in _SNIFFED_TYPES:
            self._check_type(media_type)
        limit = self.options.max_bytes
        too_large = PageError(f"page too large (more than {limit:,} bytes)")
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise too_large
        chunks: list[bytes] = []
        size = 0
        try:
            async for chunk in response.aiter_bytes(_CHUNK):
                size += len(chunk)
                if size > limit:
                    raise too_large
                chunks.append(chunk)
        except ReplyRefusedError as exc:
            raise self._body_refused(exc) from None
        except httpx.TimeoutException:
            raise PageError(f"page did not load within {self.options.timeout:g} s") from None
        except httpx.HTTPError as exc:
            logger.info("reading %s failed: %r", url, exc)
            raise PageError(f"could not be read ({type(exc).__name__})") from None
        body = b"".join(chunks)
        if media_type in _SNIFFED_TYPES:
            media_type = _sniff(body[:1024])
            self._check_type(media_type)
        return FetchedPage(url=url, media_type=media_type, charset=charset, body=body)
