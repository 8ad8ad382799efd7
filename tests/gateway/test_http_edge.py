"""The HTTP server's own bounds on a real uvicorn (127.0.0.1, raw sockets): a request head
too large is 431, too slow is 408, too many connections from one address is 503, and the
server serves everyone else meanwhile; ordinary requests, large bodies included, are
served as before."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator

import anyio
import anyio.abc
import httpx
import pytest

from pml.gateway import http_edge
from pml.gateway.http import running_http
from pml.gateway.keys import ApiKeys
from pml.gateway.server import Gateway

pytestmark = pytest.mark.anyio


@contextlib.asynccontextmanager
async def serving(gateway: Gateway) -> AsyncGenerator[tuple[str, int]]:
    async with running_http(gateway) as url:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        yield host, int(port)


async def answer_of(stream: anyio.abc.ByteStream, timeout_s: float = 10.0) -> bytes:
    """What the server sends before it closes (or the first 64 KB)."""
    received = b""
    with anyio.move_on_after(timeout_s):
        while len(received) < 65536:
            try:
                received += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError):
                break
    return received


async def health(host: str, port: int) -> int:
    async with httpx.AsyncClient(timeout=10.0) as client:
        return (await client.get(f"http://{host}:{port}/health")).status_code


async def test_a_head_over_the_bound_is_431_at_once_and_others_are_served(
    gateway: Gateway,
) -> None:
    async with serving(gateway) as (host, port), await anyio.connect_tcp(host, port) as stream:
        started = time.monotonic()
        await stream.send(b"POST /mcp HTTP/1.1\r\nHost: x\r\nX-Junk: ")
        # Just past the bound (a client that goes on sending after the close would get a
        # reset, which discards the answer before it is read).
        await stream.send(b"a" * (http_edge.MAX_HEAD_BYTES + 1024))
        answer = await answer_of(stream)
        assert answer.startswith(b"HTTP/1.1 431 ")
        assert time.monotonic() - started < 5
        assert await health(host, port) == 200


async def test_a_head_sent_too_slowly_is_408(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http_edge, "HEAD_TIMEOUT_S", 0.5)
    async with serving(gateway) as (host, port), await anyio.connect_tcp(host, port) as stream:
        await stream.send(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # the head never ends
        answer = await answer_of(stream, timeout_s=5.0)
        assert answer.startswith(b"HTTP/1.1 408 ")
        assert await health(host, port) == 200


async def test_one_address_holds_a_bounded_number_of_connections(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http_edge, "MAX_CONNECTIONS_PER_ADDRESS", 4)
    async with serving(gateway) as (host, port), contextlib.AsyncExitStack() as stack:
        held = [
            await stack.enter_async_context(await anyio.connect_tcp(host, port)) for _ in range(4)
        ]
        for stream in held:  # each is a real connection: a partial head, then nothing
            await stream.send(b"GET /health HTTP/1.1\r\n")
        async with await anyio.connect_tcp(host, port) as refused:
            answer = await answer_of(refused)
        assert answer.startswith(b"HTTP/1.1 503 ")
        assert b"retry-after: 5" in answer.lower()
        await held.pop().aclose()
        await anyio.sleep(0.2)
        assert await health(host, port) == 200  # a place was freed


async def test_ordinary_requests_and_large_bodies_are_served_as_before(gateway: Gateway) -> None:
    key = (await ApiKeys(gateway.db).create("acme", "webapp", user="ana"))[0]
    async with serving(gateway) as (host, port):
        headers = {f"X-Note-{i}": "n" * 900 for i in range(60)}  # a 55 KB head: within
        body = b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "pad": "' + b"p" * 400_000 + b'"}'
        async with httpx.AsyncClient(timeout=10.0) as client:
            big_head = await client.get(f"http://{host}:{port}/health", headers=headers)
            big_body = await client.post(
                f"http://{host}:{port}/mcp",
                content=body,
                headers={
                    "Content-Type": "application/json",
                    "Accept": "application/json, text/event-stream",
                    "Authorization": f"Bearer {key}",
                },
            )
        assert big_head.status_code == 200
        # The whole body was read and answered by the MCP app (no session: its JSON-RPC
        # error), not refused at the HTTP edge.
        assert big_body.status_code not in (408, 431, 503)
        assert big_body.json()["jsonrpc"] == "2.0"
