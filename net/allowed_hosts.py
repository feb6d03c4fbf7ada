"""The ``allowed_hosts`` setting: host names, addresses and networks that may be non-public.

Parsed here, with the settings, so that a bad entry is refused when the settings are built
(:meth:`crag.settings.run_settings.RunSettings.check_together`), and by the same code that gives
the web search its address policy (:meth:`crag.websearch.safety.AddressPolicy.from_setting`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_ip(host: str) -> IPAddress | None:
    """``host`` as an IP address (brackets and IPv6 scope allowed), or ``None`` for a name."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def parse_allowed_hosts(
    allowed_hosts: str | Iterable[str],
) -> tuple[frozenset[str], tuple[IPNetwork, ...]]:
    """Parse the setting (comma-separated names, IPs and CIDRs): the names and the networks.

    Names come out in lower case without a trailing dot; an address is a one-address network.

    Raises:
        ValueError: an entry is not a valid name or network (the message names it).
    """
    entries = allowed_hosts.split(",") if isinstance(allowed_hosts, str) else allowed_hosts
    hosts: set[str] = set()
    networks: list[IPNetwork] = []
    for raw in entries:
        entry = raw.strip().lower().rstrip(".")
        if not entry:
            continue
        if "/" in entry or parse_ip(entry) is not None:
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            except ValueError as exc:
                raise ValueError(f"allowed_hosts: {raw.strip()!r} is not valid ({exc})") from exc
        elif any(ch in entry for ch in " /:@?#"):
            raise ValueError(f"allowed_hosts: {raw.strip()!r} is not a host name")
        else:
            hosts.add(entry)
    return frozenset(hosts), tuple(networks)
