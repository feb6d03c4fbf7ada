"""The web search's HTTP clients: only addresses :mod:`crag.websearch.safety` allows, bounded.

One guarded client, synchronous (:func:`guarded_client`: the SearxNG provider queries
``search_url``, an address set in the configuration rather than found on the web) or
asynchronous (:func:`guarded_async_client`: the page fetcher, :mod:`crag.websearch.fetch`). Both
are built with the same settings over the transports of :mod:`crag.net.guarded_transport`
(thin synchronous and asynchronous layers over one shared guard), and the one place that
decides which addresses may be connected to is :func:`~crag.websearch.safety.resolve_checked`
bound to the :class:`~crag.websearch.safety.AddressPolicy`. So a host name is resolved once,
every address it resolves to must be public unless ``allowed_hosts`` lists it, and the
connection goes to a checked address (DNS rebinding cannot redirect it) while TLS still
verifies the name. Bodies are never compressed (a compressed one is refused) and are cut at
``max_bytes`` as they arrive.
No proxies or ``.netrc`` from the environment are used, no cookie is kept or sent, and no
redirect is followed by the client: a caller that follows one sends a new request, checked
like the first.

Requests may raise :class:`~crag.websearch.safety.UnsafeURLError` (a refused address),
:class:`~crag.websearch.safety.HostLookupError` (DNS failed) and
:class:`~crag.net.guarded_transport.ReplyRefusedError` (too large, or compressed).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from http.cookiejar import Cookie, CookieJar, DefaultCookiePolicy
from typing import Any
from urllib.request import Request

import httpx

from crag.net.guarded_transport import (
    AsyncGuardedTransport,
    GuardedTransport,
    ReplyRefusedError,
    ReplyTooLargeError,
    UnaskedEncodingError,
    verifying_ssl_context,
)
from crag.websearch.safety import AddressPolicy, resolve_checked

__all__ = [
    "DEFAULT_MAX_BYTES",
    "ReplyRefusedError",
    "ReplyTooLargeError",
    "UnaskedEncodingError",
    "guarded_async_client",
    "guarded_async_transport",
    "guarded_client",
    "verifying_ssl_context",
]

DEFAULT_MAX_BYTES = 5 * 1024 * 1024
"""Largest body a guarded client reads unless told otherwise."""


class _NoCookies(DefaultCookiePolicy):
    """Accept no cookie and send none."""

    def set_ok(self, cookie: Cookie, request: Request) -> bool:
        return False

    def return_ok(self, cookie: Cookie, request: Request) -> bool:
        return False


def guarded_transport(policy: AddressPolicy, max_bytes: int) -> GuardedTransport:
    """A synchronous transport reaching only addresses ``policy`` allows."""
    return GuardedTransport(max_bytes, functools.partial(resolve_checked, policy))


def guarded_async_transport(
    policy: AddressPolicy, max_bytes: int, max_connections: int = 10
) -> AsyncGuardedTransport:
    """An asynchronous transport reaching only addresses ``policy`` allows."""
    return AsyncGuardedTransport(
        max_bytes, functools.partial(resolve_checked, policy), max_connections=max_connections
    )


def _client_settings(timeout: float, headers: Mapping[str, str] | None) -> dict[str, Any]:
    """What every guarded client is built with, synchronous or not (see the module docstring)."""
    return {
        "timeout": httpx.Timeout(timeout),
        "follow_redirects": False,
        "trust_env": False,
        "cookies": CookieJar(policy=_NoCookies()),
        "headers": {**(headers or {}), "Accept-Encoding": "identity"},
    }


def guarded_client(
    policy: AddressPolicy,
    timeout: float,
    max_bytes: int = DEFAULT_MAX_BYTES,
    *,
    headers: Mapping[str, str] | None = None,
) -> httpx.Client:
    """A client that reaches only addresses ``policy`` allows and reads at most ``max_bytes``.

    It follows no redirect, keeps no cookie and takes nothing (proxies, ``.netrc``) from the
    environment; ``headers`` are sent with every request.
    """
    transport = guarded_transport(policy, max_bytes)
    return httpx.Client(transport=transport, **_client_settings(timeout, headers))


def guarded_async_client(
    policy: AddressPolicy,
    timeout: float,
    max_bytes: int = DEFAULT_MAX_BYTES,
    *,
    headers: Mapping[str, str] | None = None,
) -> httpx.AsyncClient:
    """The asynchronous :func:`guarded_client` (the same arguments and rules)."""
    transport = guarded_async_transport(policy, max_bytes)
    return httpx.AsyncClient(transport=transport, **_client_settings(timeout, headers))
