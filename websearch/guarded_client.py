"""A synchronous HTTP client for a configured endpoint, under the same address rules as pages.

The SearxNG provider queries ``search_url``, an address set in the configuration rather than
found on the web; it still goes through the rules of :mod:`crag.websearch.safety`: only http(s),
and every address the host resolves to must be public unless ``allowed_hosts`` lists it. As in
the page fetcher (:mod:`crag.websearch.fetch`), the host name is resolved once, every address is
checked, and the connection goes to a checked address, so a DNS answer that changes after the
check cannot point it elsewhere. No proxies or ``.netrc`` from the environment are used.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

from crag.websearch.fetch import verifying_ssl_context
from crag.websearch.safety import AddressPolicy, HostLookupError, UnsafeURLError, resolve_checked


class GuardedSyncBackend(httpcore.NetworkBackend):
    """An httpcore network backend that connects only to addresses the policy allows.

    Raises (from ``connect_tcp``):
        UnsafeURLError: an address is not public and not allowed.
    """

    def __init__(self, policy: AddressPolicy) -> None:
        self._policy = policy
        self._inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        """Resolve, check every address, then connect to the checked addresses in turn."""
        try:
            addresses = resolve_checked(self._policy, host, port)
        except HostLookupError as exc:
            raise httpcore.ConnectError(str(exc)) from exc  # httpx reports a connect error
        error: Exception | None = None
        for address in addresses:
            try:
                return self._inner.connect_tcp(
                    str(address),
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except httpcore.ConnectError as exc:
                error = exc
        assert error is not None  # check_resolved never returns an empty list
        raise error

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        """Never: endpoints are reached over TCP only."""
        raise UnsafeURLError(path, "not a network address")

    def sleep(self, seconds: float) -> None:
        """Sleep with the wrapped backend."""
        self._inner.sleep(seconds)


class GuardedSyncTransport(httpx.HTTPTransport):
    """httpx's own transport over a connection pool whose backend is :class:`GuardedSyncBackend`."""

    def __init__(self, policy: AddressPolicy) -> None:
        context = verifying_ssl_context()
        super().__init__(verify=context, trust_env=False)
        self._pool = httpcore.ConnectionPool(
            ssl_context=context, network_backend=GuardedSyncBackend(policy)
        )


def guarded_client(policy: AddressPolicy, timeout: float) -> httpx.Client:
    """A client that reaches only addresses ``policy`` allows.

    It follows no redirect, shares no cookies with other clients and takes nothing (proxies,
    ``.netrc``) from the environment. Requests may raise
    :class:`~crag.websearch.safety.UnsafeURLError` for a refused address.
    """
    return httpx.Client(
        transport=GuardedSyncTransport(policy),
        timeout=timeout,
        follow_redirects=False,
        trust_env=False,
    )
