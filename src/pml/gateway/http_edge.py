"""The HTTP server's own bounds, before any request reaches the app: head size and time,
and connections per address.

    config = uvicorn.Config(app, http=bounded_http_protocol(trusted_proxies), ...)

uvicorn's httptools protocol reads a request's head (request line and headers) for as long
as the client sends it and as large as it grows: 300 MB of one header, sent without a key,
took two minutes of the event loop (every tenant waited seconds per call) and 400 MB; a
few thousand connections sending a byte a second held every file descriptor. So each
connection here

- may send at most ``MAX_HEAD_BYTES`` of a request's head: past it, ``431`` and the
  connection is closed (the app never sees the request);
- must finish a request's head within ``HEAD_TIMEOUT_S`` of its first byte: past it,
  ``408`` and closed;
- counts against its TCP peer's ``MAX_CONNECTIONS_PER_ADDRESS`` open connections: one more
  is answered ``503`` with ``Retry-After`` and closed. Trusted proxies (``[limits]
  trusted_proxies``) carry many clients' connections and are not capped.

A request whose head fits is served exactly as uvicorn serves it (its body is bounded by
the app, per route).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any, ClassVar, Final

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

logger = logging.getLogger(__name__)

MAX_HEAD_BYTES: Final = 64 * 1024
HEAD_TIMEOUT_S: Final = 20.0
MAX_CONNECTIONS_PER_ADDRESS: Final = 256
BUSY_RETRY_S: Final = 5


def _answer(status: bytes, extra: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 " + status + b"\r\n" + extra + b"connection: close\r\ncontent-length: 0\r\n\r\n"
    )


HEAD_TOO_LARGE: Final = _answer(b"431 Request Header Fields Too Large")
HEAD_TOO_SLOW: Final = _answer(b"408 Request Timeout")
TOO_MANY_CONNECTIONS: Final = _answer(
    b"503 Service Unavailable", b"retry-after: " + str(BUSY_RETRY_S).encode() + b"\r\n"
)


class BoundedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the bounds of the module doc."""

    open_by_address: ClassVar[Counter[str]]
    uncapped: ClassVar[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] | None]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._address: str | None = None
        self._in_head = True
        self._head_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._ended_here = False  # the data being read ended a request

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        peer: object = transport.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else ""  # pyright: ignore[reportUnknownArgumentType]
        if self._capped(address):
            if self.open_by_address[address] >= MAX_CONNECTIONS_PER_ADDRESS:
                logger.warning("refused a connection: %s holds too many open ones", address)
                self._close_with(TOO_MANY_CONNECTIONS)
                return
            self.open_by_address[address] += 1
            self._address = address

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        if self._address is not None:
            self.open_by_address[self._address] -= 1
            if self.open_by_address[self._address] <= 0:
                del self.open_by_address[self._address]
            self._address = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._in_head and self._head_timer is None:
            self._head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_too_slow)
        self._ended_here = False
        super().data_received(data)
        # Still in a head that began before this data ended a message: all of it was head.
        if self._in_head and not self._ended_here and not self.transport.is_closing():
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                logger.warning("refused a request whose head is over %d bytes", MAX_HEAD_BYTES)
                self._close_with(HEAD_TOO_LARGE)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._stop_head_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head, self._head_bytes = True, 0  # the next request on this connection
        self._ended_here = True

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self._in_head and not self.transport.is_closing():
            self._close_with(HEAD_TOO_SLOW)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _close_with(self, answer: bytes) -> None:
        self._stop_head_timer()
        if not self.transport.is_closing():
            self.transport.write(answer)
            self.transport.close()

    @classmethod
    def _capped(cls, address: str) -> bool:
        if cls.uncapped is None:  # every peer is a trusted proxy (``"*"``)
            return False
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:  # a Unix socket, an unknown peer
            return False
        return not any(ip in network for network in cls.uncapped)


def bounded_http_protocol(trusted_proxies: Sequence[str] = ()) -> type[BoundedHttpProtocol]:
    """The protocol class for one server (its own connection counts), trusted proxies
    uncapped."""
    uncapped: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] | None = ()
    if "*" in trusted_proxies:
        uncapped = None
    else:
        uncapped = tuple(ipaddress.ip_network(entry, strict=False) for entry in trusted_proxies)
    return type(
        "ServerHttpProtocol",
        (BoundedHttpProtocol,),
        {"open_by_address": Counter[str](), "uncapped": uncapped},
    )
