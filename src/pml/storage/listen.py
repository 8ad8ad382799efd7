"""PostgreSQL ``LISTEN`` on a dedicated connection that comes back after it is lost.

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(listen_forever, db.listen_dsn(), "channel", on_payload, on_reconnect)

``on_payload(text)`` is called for every notification; ``on_reconnect()`` after a lost
connection is back (notifications sent meanwhile are gone, so the caller re-checks). The
loop ends only when cancelled; reconnection waits grow from 0.2 s to 10 s.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import asyncpg  # pyright: ignore[reportMissingTypeStubs]

logger = logging.getLogger(__name__)

FIRST_RETRY_S = 0.2
MAX_RETRY_S = 10.0
CONNECT_TIMEOUT_S = 10.0


async def listen_forever(
    dsn: str,
    channel: str,
    on_payload: Callable[[str], Awaitable[None]],
    on_reconnect: Callable[[], Awaitable[None]],
    *,
    ready: anyio.Event | None = None,
) -> None:
    """Listen on ``channel`` until cancelled (see module); ``ready`` is set once listening."""
    retry_s = FIRST_RETRY_S
    connected_before = False
    while True:
        try:
            await _listen_once(
                dsn, channel, on_payload, on_reconnect if connected_before else None, ready
            )
        except (OSError, asyncpg.PostgresError, TimeoutError) as error:
            logger.warning(
                "LISTEN %s: connection lost (%s); retrying in %.1f s", channel, error, retry_s
            )
        else:
            logger.warning("LISTEN %s: connection closed; retrying in %.1f s", channel, retry_s)
        if ready is not None:
            ready.set()  # a gateway whose database does not answer now still starts
        connected_before = True
        await anyio.sleep(retry_s)
        retry_s = min(retry_s * 2, MAX_RETRY_S)


async def _listen_once(
    dsn: str,
    channel: str,
    on_payload: Callable[[str], Awaitable[None]],
    on_reconnect: Callable[[], Awaitable[None]] | None,
    ready: anyio.Event | None,
) -> None:
    send, receive = anyio.create_memory_object_stream[str | None](1024)

    def notified(_conn: Any, _pid: int, _channel: str, payload: str) -> None:
        try:
            send.send_nowait(payload)
        except anyio.WouldBlock:
            logger.warning("LISTEN %s: too many notifications queued; one dropped", channel)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # this connection is being closed

    def terminated(_conn: Any) -> None:
        with contextlib.suppress(
            anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError
        ):
            send.send_nowait(None)

    connect: Any = asyncpg.connect  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    connection: Any = await connect(dsn, timeout=CONNECT_TIMEOUT_S)
    try:
        connection.add_termination_listener(terminated)
        await connection.add_listener(channel, notified)
        if ready is not None:
            ready.set()
        if on_reconnect is not None:
            await on_reconnect()
        async with receive:
            async for payload in receive:
                if payload is None:
                    return
                await on_payload(payload)
    finally:
        with anyio.CancelScope(shield=True):
            try:
                await connection.close(timeout=2)
            except (OSError, asyncpg.PostgresError, TimeoutError):
                connection.terminate()
