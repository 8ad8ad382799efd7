"""The HTTP lane's side of one POST: reading the body, watching the client, answering.

    body = await read_body(receive, limit)       # whole, or cut short (then given back)
    exchange = Exchange(send, session_id)
    async with watching(exchange, receive, cancel_on_leave=scope):
        result = await call()                     # a quick call never starts the watch
    await exchange.finish(message)                # JSON, or the last SSE event

A call that is not over within ``WATCH_AFTER_S`` gets a watcher: it cancels the call when
a 2026-07-28 client leaves (that generation's cancellation) and, like the SDK, commits
to ``text/event-stream`` with a keep-alive ping every ``PING_INTERVAL_S`` so that a proxy's
idle timeout does not cut a long call. The watcher is started by a timer rather than for
every request: a task per request costs more than the lane saves (~50 µs).

Serving is on asyncio (uvicorn), so the timer and the watcher are asyncio's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Final

import anyio
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from starlette.types import Message, Receive, Send

WATCH_AFTER_S: Final = 0.05
PING_INTERVAL_S: Final = 15.0  # the SDK's keep-alive for a response still being worked on
PING: Final = b": ping\r\n\r\n"
SSE_HEADERS: Final = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"connection", b"keep-alive"),
    (b"x-accel-buffering", b"no"),
]


class Exchange:
    """One POST's answer: JSON at once, or SSE once keep-alive pings had to start."""

    def __init__(self, send: Send, session_id: str | None) -> None:
        self._send = send
        self._session: list[tuple[bytes, bytes]] = (
            [(MCP_SESSION_ID_HEADER.encode(), session_id.encode("latin-1"))] if session_id else []
        )
        self.streaming = False

    async def ping(self) -> None:
        """A keep-alive comment (the first one commits the answer to SSE)."""
        if not self.streaming:
            headers = SSE_HEADERS + self._session
            await self._send({"type": "http.response.start", "status": 200, "headers": headers})
            self.streaming = True
        await self._send({"type": "http.response.body", "body": PING, "more_body": True})

    async def finish(self, message: bytes) -> None:
        """Answer with the JSON-RPC ``message``."""
        if self.streaming:
            event = b"event: message\r\ndata: " + message + b"\r\n\r\n"
            await self._send({"type": "http.response.body", "body": event, "more_body": False})
            return
        await self.plain(200, message)

    async def plain(self, status: int, body: bytes) -> None:
        """A whole ``application/json`` answer (an empty body for ``202``)."""
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            *self._session,
        ]
        await self._send({"type": "http.response.start", "status": status, "headers": headers})
        await self._send({"type": "http.response.body", "body": body, "more_body": False})


@asynccontextmanager
async def watching(
    exchange: Exchange, receive: Receive, *, cancel_on_leave: anyio.CancelScope | None
) -> AsyncGenerator[None]:
    """Watch the client while the block runs, once it has run ``WATCH_AFTER_S`` (see module)."""
    loop = asyncio.get_running_loop()
    started: list[asyncio.Task[None]] = []

    def start() -> None:
        started.append(loop.create_task(_watch(exchange, receive, cancel_on_leave)))

    timer = loop.call_later(WATCH_AFTER_S, start)
    try:
        yield
    finally:
        timer.cancel()
        for task in started:  # stopped before the answer is sent: one writer at a time
            task.cancel()
            with anyio.CancelScope(shield=True):
                await asyncio.wait({task})


async def _watch(
    exchange: Exchange, receive: Receive, cancel_on_leave: anyio.CancelScope | None
) -> None:
    deadline = anyio.current_time() + PING_INTERVAL_S - WATCH_AFTER_S
    while True:
        with anyio.move_on_after(max(deadline - anyio.current_time(), 0)):
            message = await receive()
            if message["type"] == "http.disconnect":
                if cancel_on_leave is not None:
                    cancel_on_leave.cancel()
                return
            continue
        await exchange.ping()
        deadline = anyio.current_time() + PING_INTERVAL_S


@dataclass(frozen=True, slots=True)
class Body:
    """What was read of a request body: whole (``complete``), or cut short by the size limit
    or by another message (``trailing``, e.g. the client leaving)."""

    data: bytes
    more: bool = False
    trailing: Message | None = None

    @property
    def complete(self) -> bool:
        return not self.more and self.trailing is None

    def replayed(self, receive: Receive) -> Receive:
        """``receive`` as it was before the body was read."""
        pending: list[Message] = [
            {"type": "http.request", "body": self.data, "more_body": self.more}
        ]
        if self.trailing is not None:
            pending.append(self.trailing)
        pending.reverse()

        async def replay() -> Message:
            if pending:
                return pending.pop()
            return await receive()

        return replay


async def read_body(receive: Receive, limit: int) -> Body:
    """The request body, read until it ends or is longer than ``limit`` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return Body(b"".join(chunks), more=True, trailing=message)
        chunk: bytes = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        more = bool(message.get("more_body", False))
        if not more or size > limit:
            return Body(b"".join(chunks), more=more)
