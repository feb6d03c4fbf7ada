"""HTTP transports that read only what crag asked for, from addresses it checked.

One implementation for the synchronous and the asynchronous client (:class:`GuardedTransport`,
:class:`AsyncGuardedTransport`: thin wrappers over httpx's own ``HTTPTransport`` and
``AsyncHTTPTransport``, through public API only), used by the web search (pages, SearxNG) and
the model-server client:

* **No compression.** Every request asks for ``Accept-Encoding: identity``, and a response with
  any other ``Content-Encoding`` is refused before its body is read (:class:`UnaskedEncodingError`):
  httpx inflates gzip, brotli and zstd as it reads, so a 32 KB zstd body would become 1 GiB in
  memory at once, whatever the caller counts afterwards.
* **Bounded bodies.** A ``Content-Length`` over ``max_bytes`` is refused before reading; the
  body is counted as it comes off the wire and reading stops once it passes ``max_bytes``
  (:class:`ReplyTooLargeError`). With no encoding, the bytes decoded are the bytes received,
  so this one count caps both.
* **Checked addresses** (when given a ``resolve`` function, e.g.
  :func:`crag.websearch.safety.resolve_checked` bound to a policy): the host name is resolved
  and every address checked once per request, then the request goes to a checked address
  (tried in order) and the name is never resolved again, so a DNS answer that changes after the
  check (DNS rebinding) cannot point the connection elsewhere. The name is still sent as
  ``Host`` and, over TLS, as SNI and the name the certificate is verified against (httpcore's
  documented ``sni_hostname`` request extension). Each host name gets its own connection pool,
  so a TLS connection verified for one name never carries a request for another name served
  from the same address. Proxies and ``.netrc`` from the environment are never used.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

import httpx

from crag.net.allowed_hosts import IPAddress

logger = logging.getLogger(__name__)

Resolve = Callable[[str, int], list[IPAddress]]
"""Resolve ``(host, port)`` and check the addresses; raise to refuse the host."""
Refused = Callable[["ReplyRefusedError"], Exception]
"""The exception a caller wants raised for a refused body (default: the refusal itself)."""

_DNS_POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="crag-dns")
_PORTS = {"http": 80, "https": 443}
_IDENTITY = "identity"

T = TypeVar("T", httpx.HTTPTransport, httpx.AsyncHTTPTransport)


class ReplyRefusedError(Exception):
    """A response crag stopped reading; the message is one line naming the host.

    Attributes:
        host: The host the response came from (the name asked for, not the address).
    """

    def __init__(self, host: str, message: str) -> None:
        super().__init__(message)
        self.host = host


class ReplyTooLargeError(ReplyRefusedError):
    """A body longer than the transport's ``max_bytes`` (declared, or counted as it came)."""

    def __init__(self, host: str, limit: int) -> None:
        super().__init__(host, f"{host} sent more than {limit:,} bytes; crag stopped reading")
        self.limit = limit


class UnaskedEncodingError(ReplyRefusedError):
    """A body compressed although crag asked for none (``Accept-Encoding: identity``)."""

    def __init__(self, host: str, encoding: str) -> None:
        super().__init__(
            host, f"{host} sent a body compressed as {encoding!r}, which crag did not ask for"
        )
        self.encoding = encoding


def _same(error: ReplyRefusedError) -> Exception:
    return error


@functools.lru_cache(maxsize=1)
def verifying_ssl_context() -> ssl.SSLContext:
    """The default verifying TLS context (certifi's CA bundle), built once per process."""
    return httpx.create_ssl_context(trust_env=False)


def _unasked_encoding(headers: httpx.Headers) -> str | None:
    """The response's content coding if it is not ``identity`` (``None`` when it is)."""
    raw = headers.get("content-encoding", "")
    codings = [c.strip().lower() for c in raw.split(",") if c.strip()]
    return raw.strip() if any(c != _IDENTITY for c in codings) else None


class _Budget:
    """Counts one body's bytes as they arrive; raises once they pass the limit."""

    def __init__(self, host: str, limit: int, refused: Refused) -> None:
        self.host = host
        self.limit = limit
        self.received = 0
        self._refused = refused

    def take(self, part: bytes) -> bytes:
        self.received += len(part)
        if self.received > self.limit:
            raise self._refused(ReplyTooLargeError(self.host, self.limit))
        return part


class _BoundedStream(httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream, budget: _Budget) -> None:
        self._inner = inner
        self._budget = budget

    def __iter__(self) -> Iterator[bytes]:
        for part in self._inner:
            yield self._budget.take(part)

    def close(self) -> None:
        self._inner.close()


class _AsyncBoundedStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, budget: _Budget) -> None:
        self._inner = inner
        self._budget = budget

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for part in self._inner:
            yield self._budget.take(part)

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Guard(Generic[T]):
    """What both transports share: the pools, pinning a request, checking a response."""

    def __init__(
        self,
        make_pool: Callable[[], T],
        max_bytes: int,
        resolve: Resolve | None,
        refused: Refused | None,
    ) -> None:
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, got {max_bytes!r}")
        self.max_bytes = max_bytes
        self.resolve = resolve
        self.refused: Refused = refused or _same
        self._make_pool: Callable[[], T] = make_pool
        self._pools: dict[str, T] = {}
        self._lock = threading.Lock()

    def prepare(self, request: httpx.Request) -> httpx.Request:
        """``request`` asking for no compression (whatever the caller's client set)."""
        request.headers["Accept-Encoding"] = _IDENTITY
        return request

    def lookup(self, request: httpx.Request) -> list[IPAddress] | None:
        """The checked addresses of the request's host (blocking); ``None``: no checking."""
        if self.resolve is None:
            return None
        url = request.url
        return self.resolve(url.host, url.port or _PORTS.get(url.scheme, 80))

    def pool(self, request: httpx.Request) -> T:
        """The connection pool of the request's host name (made on first use)."""
        with self._lock:
            pool = self._pools.get(request.url.host)
            if pool is None:
                pool = self._pools[request.url.host] = self._make_pool()
            return pool

    def pools(self) -> list[T]:
        with self._lock:
            pools = list(self._pools.values())
            self._pools.clear()
            return pools

    @staticmethod
    def pinned(request: httpx.Request, addresses: list[IPAddress] | None) -> list[httpx.Request]:
        """``request`` sent to each checked address in turn, the name kept as Host and SNI."""
        if addresses is None:
            return [request]
        extensions = dict(request.extensions)
        if request.url.scheme == "https":
            extensions["sni_hostname"] = request.url.host
        return [
            httpx.Request(
                request.method,
                request.url.copy_with(host=str(address)),
                headers=request.headers,  # carries Host: the name, set when it was built
                stream=request.stream,
                extensions=extensions,
            )
            for address in addresses
        ]

    def refusal(self, request: httpx.Request, response: httpx.Response) -> Exception | None:
        """Why ``response`` is refused before its body is read, if it is."""
        host = request.url.host
        encoding = _unasked_encoding(response.headers)
        if encoding is not None:
            return self.refused(UnaskedEncodingError(host, encoding))
        declared = response.headers.get("content-length", "").strip()
        if declared.isdigit() and int(declared) > self.max_bytes:
            return self.refused(ReplyTooLargeError(host, self.max_bytes))
        return None

    def bounded(self, request: httpx.Request, response: httpx.Response) -> httpx.Response:
        """``response`` with its body counted as it is read (:class:`ReplyTooLargeError`)."""
        budget = _Budget(request.url.host, self.max_bytes, self.refused)
        stream: httpx.SyncByteStream | httpx.AsyncByteStream
        if isinstance(response.stream, httpx.AsyncByteStream):
            stream = _AsyncBoundedStream(response.stream, budget)
        else:
            assert isinstance(response.stream, httpx.SyncByteStream)
            stream = _BoundedStream(response.stream, budget)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=stream,
            extensions=response.extensions,
        )


class GuardedTransport(httpx.BaseTransport):
    """A synchronous transport under the module's rules (see its docstring).

    Args:
        max_bytes: Largest body read, on the wire and decoded.
        resolve: Resolves and checks a host's addresses; ``None`` connects as httpx does.
        ssl_context: Verifies servers' certificates (default: certifi's CA bundle).
        max_connections: Connections at once, per host name.
        refused: Makes the exception raised for a refused body (default: the
            :class:`ReplyRefusedError` itself), e.g. the caller's own error type.
    """

    def __init__(
        self,
        max_bytes: int,
        resolve: Resolve | None = None,
        *,
        ssl_context: ssl.SSLContext | None = None,
        max_connections: int = 10,
        refused: Refused | None = None,
    ) -> None:
        context = ssl_context or verifying_ssl_context()
        limits = httpx.Limits(max_connections=max_connections)

        def make_pool() -> httpx.HTTPTransport:
            return httpx.HTTPTransport(verify=context, trust_env=False, limits=limits)

        self._guard = _Guard(make_pool, max_bytes, resolve, refused)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` to a checked address; refuse a compressed or too long body."""
        guard = self._guard
        request = guard.prepare(request)
        error: httpx.ConnectError | None = None
        for pinned in guard.pinned(request, guard.lookup(request)):
            try:
                response = guard.pool(request).handle_request(pinned)
            except httpx.ConnectError as exc:  # the next checked address, if any
                error = exc
                continue
            refused = guard.refusal(request, response)
            if refused is not None:
                response.close()
                raise refused
            return guard.bounded(request, response)
        assert error is not None  # pinned() never returns an empty list
        raise error

    def close(self) -> None:
        """Close every host's pool."""
        for pool in self._guard.pools():
            pool.close()


class AsyncGuardedTransport(httpx.AsyncBaseTransport):
    """The asynchronous twin of :class:`GuardedTransport` (the same arguments and rules).

    The host is resolved in a thread of a pool of its own, not the loop's default executor:
    ``asyncio.run`` waits for that one on exit, so a resolver that hangs would outlast the
    caller's timeout.
    """

    def __init__(
        self,
        max_bytes: int,
        resolve: Resolve | None = None,
        *,
        ssl_context: ssl.SSLContext | None = None,
        max_connections: int = 10,
        refused: Refused | None = None,
    ) -> None:
        context = ssl_context or verifying_ssl_context()
        limits = httpx.Limits(max_connections=max_connections)

        def make_pool() -> httpx.AsyncHTTPTransport:
            return httpx.AsyncHTTPTransport(verify=context, trust_env=False, limits=limits)

        self._guard = _Guard(make_pool, max_bytes, resolve, refused)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` to a checked address; refuse a compressed or too long body."""
        guard = self._guard
        request = guard.prepare(request)
        addresses = None
        if guard.resolve is not None:
            loop = asyncio.get_running_loop()
            addresses = await loop.run_in_executor(_DNS_POOL, guard.lookup, request)
        error: httpx.ConnectError | None = None
        for pinned in guard.pinned(request, addresses):
            try:
                response = await guard.pool(request).handle_async_request(pinned)
            except httpx.ConnectError as exc:  # the next checked address, if any
                error = exc
                continue
            refused = guard.refusal(request, response)
            if refused is not None:
                await response.aclose()
                raise refused
            return guard.bounded(request, response)
        assert error is not None  # pinned() never returns an empty list
        raise error

    async def aclose(self) -> None:
        """Close every host's pool."""
        for pool in self._guard.pools():
            await pool.aclose()
