"""The source address a per-address limit counts against: the socket peer of a request.

    peer_address({"client": ("10.0.0.7", 51234)})        # "10.0.0.7"
    peer_address({"client": ("2001:db8::1", 443)})       # "2001:db8::/64"
    peer_address({"client": None})                       # "unknown"

``X-Forwarded-For`` and the like are never read here: a client writes them as it pleases.
The server puts the socket peer in ``scope["client"]``; ``pml serve --http`` lets uvicorn
replace it from ``X-Forwarded-For`` only for the proxies ``[limits] trusted_proxies``
names (none by default), the right-most address no trusted proxy added. An IPv6 client
counts by its /64 network, the block one subscriber usually holds (a host can take any
address of it); an IPv4-mapped IPv6 address counts as its IPv4 address.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any, Final

UNKNOWN: Final = "unknown"
MAX_HOST_CHARS: Final = 64
IPV6_PREFIX: Final = 64


def peer_address(scope: Mapping[str, Any]) -> str:
    """The address ``scope``'s request counts against (see the module)."""
    client = scope.get("client")
    if not isinstance(client, tuple | list) or not client:
        return UNKNOWN
    host: object = client[0]  # pyright: ignore[reportUnknownVariableType]
    if not isinstance(host, str) or not host:
        return UNKNOWN
    try:
        address = ipaddress.ip_address(host)
    except ValueError:  # a Unix socket's path, a test client's name
        return host[:MAX_HOST_CHARS]
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, IPV6_PREFIX), strict=False))
    return str(address)
