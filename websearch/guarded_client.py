"""The web search's HTTP clients: only addresses :mod:`crag.websearch.safety` allows, bounded.

One guard for every request the web search sends, synchronous (the SearxNG provider queries
``search_url``, an address set in the configuration rather than found on the web) or
asynchronous (the page fetcher, :mod:`crag.websearch.fetch`): the transports of
:mod:`crag.core.guarded_transport`, given :func:`~crag.websearch.safety.resolve_checked` bound to
the :class:`~crag.websearch.safety.AddressPolicy`. So a host name is resolved once, every address
it resolves to must be public unless ``allowed_hosts`` lists it, and the connection goes to a
checked address (DNS rebinding cannot redirect it) while TLS still verifies the name. Bodies
are never compressed (a compressed one is refused) and are cut at ``max_bytes`` as they arrive.
No proxies or ``.netrc`` from the environment are used, and no redirect is followed by the
client: a caller that follows one sends a new request, checked like the first.

Requests may raise :class:`~crag.websearch.safety.UnsafeURLError` (a refused address),
:class:`~crag.websearch.safety.HostLookupError` (DNS failed) and
:class:`~crag.core.guarded_transport.ReplyRefusedError` (too large, or compressed).
"""

from __future__ import annotations

import functools

import httpx

from crag.core.guarded_transport import (
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
    "guarded_async_transport",
    "guarded_client",
    "verifying_ssl_context",
]

DEFAULT_MAX_BYTES = 5 * 1024 * 1024
"""Largest body :func:`guarded_client` reads unless told otherwise."""


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


def guarded_client(
    policy: AddressPolicy, timeout: float, max_bytes: int = DEFAULT_MAX_BYTES
) -> httpx.Client:
    """A client that reaches only addresses ``policy`` allows and reads at most ``max_bytes``.

    It follows no redirect, shares no cookies with other clients and takes nothing (proxies,
    ``.netrc``) from the environment.
    """
    return httpx.Client(
        transport=guarded_transport(policy, max_bytes),
        timeout=timeout,
        follow_redirects=False,
        trust_env=False,
        headers={"Accept-Encoding": "identity"},
    )
