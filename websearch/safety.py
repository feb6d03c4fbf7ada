"""Which web addresses crag may read: http(s) only, public addresses only.

Pages come from search results, so their URLs are chosen by whoever wrote the page or the
result: a link (or a redirect) to ``http://169.254.169.254/`` or ``http://10.0.0.1/admin``
must not make crag read the cloud metadata service or the local network. The rules:

* only ``http`` and ``https`` URLs; user names and passwords in URLs are removed (never sent);
* every address a host name resolves to must be public: loopback, private, link-local,
  multicast, reserved, unspecified and other non-global addresses are refused, unless the
  host name, the address or a network containing it is on the :class:`AddressPolicy`
  allow-list (setting ``allowed_hosts``).

:func:`check_url` applies the rules that need no DNS (scheme, literal IP addresses);
:meth:`AddressPolicy.check_resolved` applies them to the addresses a name resolves to, and
:func:`resolve_checked` resolves a host once and checks every address. The page fetcher
(:mod:`crag.websearch.fetch`) and the endpoint client (:mod:`crag.websearch.guarded_client`) connect
to the very addresses :func:`resolve_checked` returned, so a DNS answer that changes between the
check and the connection (DNS rebinding) cannot slip a private address through.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from crag.net.allowed_hosts import IPAddress, IPNetwork, parse_allowed_hosts, parse_ip

ALLOWED_SCHEMES = frozenset({"http", "https"})


class UnsafeURLError(ValueError):
    """A URL crag refuses to read; ``reason`` says why in a few words."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.reason = reason


class HostLookupError(OSError):
    """A host name that could not be resolved (``DNS lookup of HOST failed: ...``)."""

    def __init__(self, host: str, detail: Exception) -> None:
        super().__init__(f"DNS lookup of {host} failed: {detail}")
        self.host = host


def address_kind(address: IPAddress) -> str | None:
    """Why ``address`` is not public (``"a private address"``, ...), or ``None`` if it is."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address_kind(address.ipv4_mapped)
    checks = (
        (address.is_unspecified, "an unspecified address"),
        (address.is_loopback, "a loopback address"),
        (address.is_link_local, "a link-local address"),
        (address.is_multicast, "a multicast address"),
        (address.is_reserved, "a reserved address"),
        (address.is_private, "a private address"),
    )
    for flagged, kind in checks:
        if flagged:
            return kind
    if not address.is_global:  # e.g. 100.64.0.0/10 (carrier-grade NAT)
        return "a non-public address"
    return None


@dataclass(frozen=True)
class AddressPolicy:
    """The allow-list for addresses that are not public.

    Attributes:
        hosts: Host names allowed whatever they resolve to (lower case, no trailing dot).
        networks: Addresses and networks allowed even if not public.
    """

    hosts: frozenset[str] = field(default_factory=frozenset)
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def from_setting(cls, allowed_hosts: str | Iterable[str]) -> AddressPolicy:
        """Parse the ``allowed_hosts`` setting: comma-separated names, IPs and CIDRs.

        Raises:
            ValueError: an entry is empty after trimming or is not a valid name or network.
        """
        hosts, networks = parse_allowed_hosts(allowed_hosts)
        return cls(hosts, networks)

    @property
    def key(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """A hashable summary, used to keep cached pages apart per policy."""
        return tuple(sorted(self.hosts)), tuple(sorted(str(n) for n in self.networks))

    def allows_host(self, host: str) -> bool:
        """Whether the host name itself is on the allow-list."""
        return host.lower().rstrip(".") in self.hosts

    def allows_address(self, address: IPAddress) -> bool:
        """Whether ``address`` is public or on the allow-list."""
        if address_kind(address) is None:
            return True
        plain = address
        if isinstance(address, ipaddress.IPv6Address) and address.scope_id:
            plain = ipaddress.IPv6Address(str(address).split("%", 1)[0])
        return any(plain in network for network in self.networks)

    def check_resolved(self, host: str, addresses: Iterable[IPAddress]) -> list[IPAddress]:
        """Return ``addresses`` if every one may be used for ``host``.

        All of them must pass (not just one) so that the connection may try them in turn.

        Raises:
            UnsafeURLError: an address is not public and not allowed, or there is none.
        """
        found = list(addresses)
        if not found:
            raise UnsafeURLError(host, f"{host} resolves to no address")
        if self.allows_host(host):
            return found
        for address in found:
            if not self.allows_address(address):
                kind = address_kind(address)
                if parse_ip(host) == address:
                    raise UnsafeURLError(host, f"{address} is {kind}")
                raise UnsafeURLError(host, f"{host} resolves to {address}, {kind}")
        return found


def addresses_of(infos: Iterable[tuple[Any, ...]]) -> list[IPAddress]:
    """The distinct addresses of ``socket.getaddrinfo`` results, in order."""
    addresses: list[IPAddress] = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]))
        if address not in addresses:
            addresses.append(address)
    return addresses


def lookup_host(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to (a literal IP address resolves to itself).

    Raises:
        HostLookupError: the name could not be resolved.
    """
    literal = parse_ip(host)
    if literal is not None:
        return [literal]
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise HostLookupError(host, exc) from exc
    return addresses_of(infos)


def resolve_checked(policy: AddressPolicy, host: str, port: int) -> list[IPAddress]:
    """Resolve ``host`` once and check every address it resolves to against ``policy``.

    Connect to the returned addresses (in order) and never resolve the name again: that way
    the addresses connected to are the addresses checked. Blocking (DNS); async callers run it
    in a thread.

    Raises:
        HostLookupError: the name could not be resolved.
        UnsafeURLError: an address is not public and not allowed, or there is none.
    """
    return policy.check_resolved(host, lookup_host(host, port))


def strip_userinfo(url: str) -> str:
    """``url`` without ``user:password@`` and without its ``#fragment``."""
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


def check_url(url: str, policy: AddressPolicy) -> str:
    """Check what can be checked without DNS; return the URL to request.

    Returns:
        ``url`` without user info and fragment.

    Raises:
        UnsafeURLError: not http(s), no host, or a literal IP address that is not allowed.
    """
    text = url.strip()
    try:
        parts = urlsplit(text)
        host = parts.hostname or ""
        parts.port  # noqa: B018 (raises ValueError for a bad port)
    except ValueError:
        raise UnsafeURLError(url, "not a valid URL") from None
    scheme = parts.scheme.lower()
    if scheme not in ALLOWED_SCHEMES:
        raise UnsafeURLError(url, f"not an http(s) link ({scheme or 'no scheme'})")
    if not host:
        raise UnsafeURLError(url, "the link has no host")
    address = parse_ip(host)
    if address is not None and not (policy.allows_host(host) or policy.allows_address(address)):
        raise UnsafeURLError(url, f"{address} is {address_kind(address)}")
    return strip_userinfo(text)
