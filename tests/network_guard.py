"""Keep the tests' network traffic on this machine: only loopback addresses may be reached.

Tests may talk only to servers they start on 127.0.0.1. :func:`install` wraps the socket
module so that a connection to any other address, or a name lookup of anything but a loopback
name, fails at once with :class:`OffMachineTraffic` (an ``OSError``, as a refused connection
would be) before a packet is sent. Code under test that degrades gracefully on network errors
then degrades here too; code that does not, fails the test and names the address.
"""

from __future__ import annotations

import _socket
import ipaddress
import socket
from typing import Any

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


class OffMachineTraffic(OSError):
    """A test tried to reach an address that is not on this machine."""


def allowed_host(host: Any) -> bool:
    """Whether ``host`` (a name, an IP literal or ``None``) is on this machine."""
    if host is None:
        return True
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    text = str(host).strip().strip("[]").lower()
    if text in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(text.split("%")[0]).is_loopback
    except ValueError:
        return False


def allowed_address(family: int, address: Any) -> bool:
    """Whether a socket ``address`` of ``family`` is local (Unix sockets always are)."""
    if family == getattr(socket, "AF_UNIX", None):
        return True
    if isinstance(address, tuple) and address:
        return allowed_host(address[0])
    return False


_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex
_real_getaddrinfo = socket.getaddrinfo


def _connect(self: _socket.socket, address: Any) -> None:
    if not allowed_address(self.family, address):
        raise OffMachineTraffic(f"tests may only connect to 127.0.0.1, not to {address!r}")
    _real_connect(self, address)


def _connect_ex(self: _socket.socket, address: Any) -> int:
    if not allowed_address(self.family, address):
        raise OffMachineTraffic(f"tests may only connect to 127.0.0.1, not to {address!r}")
    return _real_connect_ex(self, address)


def _getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
    if not allowed_host(host):
        raise socket.gaierror(
            socket.EAI_NONAME, f"tests may only look up loopback names, not {host!r}"
        )
    return _real_getaddrinfo(host, *args, **kwargs)


def install() -> None:
    """Put the guard in place for this process (idempotent)."""
    socket.socket.connect = _connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _connect_ex  # type: ignore[method-assign]
    socket.getaddrinfo = _getaddrinfo
