"""An HTTP upstream's answers are bounded like a stdio server's lines: an answer over the
bound fails its call at once without being held whole, the connection serves on, and results
up to the bound pass on both kinds of answer (one JSON body, an event stream)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from pml.config import ServerSettings
from pml.upstream.http_bounds import AnswerTooLarge, BoundedTransport
from pml.upstream.transport import StderrTail, open_client
from upstream.helpers import TOY_SERVER, free_port, wait_for_port

pytestmark = pytest.mark.anyio

BOUND = 1_500_000


@pytest.fixture(params=["json", "event-stream"])
def toy_url(request: pytest.FixtureRequest) -> Iterator[str]:
    port = free_port()
    command = [sys.executable, str(TOY_SERVER), "--http", str(port)]
    # The 2026-07-28 handshake answers with JSON; the 2025-11-25 one with event streams.
    command.append("--json" if request.param == "json" else "--legacy")
    process = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait()


@pytest.fixture
async def client(toy_url: str) -> AsyncIterator[Client]:
    await wait_for_port(toy_url)

    async def ignore(message: object) -> None:
        pass

    async with AsyncExitStack() as stack:
        yield await open_client(
            stack,
            ServerSettings(url=toy_url),
            on_message=ignore,
            on_closed=lambda: None,
            stderr=StderrTail("toy"),
            max_line_bytes=BOUND,
        )


def only_text(result: types.CallToolResult) -> str:
    (block,) = result.content
    assert isinstance(block, types.TextContent)
    return block.text


async def test_an_answer_over_the_bound_fails_its_call_and_the_next_call_works(
    client: Client,
) -> None:
    with anyio.fail_after(10), pytest.raises(MCPError) as refused:
        await client.call_tool("big", {"size": 3 * BOUND})
    message = refused.value.error.message
    assert f"larger than {BOUND} bytes" in message or f"the {BOUND} byte limit" in message
    assert only_text(await client.call_tool("echo", {"text": "next"})) == "next"


async def test_a_result_over_the_sdk_s_one_mib_default_passes_within_the_bound(
    client: Client,
) -> None:
    size = 1_300_000  # over the SDK's 1 MiB event default, under PML's bound
    with anyio.fail_after(10):
        result = await client.call_tool("big", {"size": size})
    assert len(only_text(result)) == size


class _Endless(httpx2.AsyncByteStream):
    """A body that never ends: it must be dropped, not held."""

    def __init__(self) -> None:
        self.sent = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while self.sent < 10**9:  # bounded, in case the transport failed to stop it
            self.sent += 65_536
            yield b"x" * 65_536


class _Small(httpx2.AsyncByteStream):
    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield b'{"ok": true}'


class _Fixed(httpx2.AsyncBaseTransport):
    def __init__(self, response: httpx2.Response) -> None:
        self.response = response

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        return self.response


async def test_an_endless_body_is_cut_at_the_bound_having_read_little_more() -> None:
    body = _Endless()
    answer = httpx2.Response(200, headers={"content-type": "application/json"}, stream=body)
    async with httpx2.AsyncClient(transport=BoundedTransport(BOUND, _Fixed(answer))) as http:
        with pytest.raises(AnswerTooLarge, match=f"larger than {BOUND} bytes"):
            await http.post("http://127.0.0.1:9/mcp", json={})
    assert BOUND < body.sent <= BOUND + 65_536


async def test_a_declared_length_over_the_bound_is_refused_before_any_byte() -> None:
    body = _Endless()
    headers = {"content-type": "application/json", "content-length": str(BOUND + 1)}
    answer = httpx2.Response(200, headers=headers, stream=body)
    async with httpx2.AsyncClient(transport=BoundedTransport(BOUND, _Fixed(answer))) as http:
        with pytest.raises(AnswerTooLarge):
            await http.post("http://127.0.0.1:9/mcp", json={})
    assert body.sent == 0


@pytest.mark.parametrize("length", ["-5", "abc", "1e9", "", "99999999999999999999999"])
async def test_odd_declared_lengths_do_not_break_small_answers(length: str) -> None:
    headers = {"content-type": "application/json", "content-length": length}
    answer = httpx2.Response(200, headers=headers, stream=_Small())
    async with httpx2.AsyncClient(transport=BoundedTransport(BOUND, _Fixed(answer))) as http:
        if length == "99999999999999999999999":
            with pytest.raises(AnswerTooLarge):
                await http.post("http://127.0.0.1:9/mcp", json={})
        else:
            reply = await http.post("http://127.0.0.1:9/mcp", json={})
            assert reply.json() == {"ok": True}


async def test_an_event_stream_is_left_to_the_sdk_s_per_event_bound() -> None:
    body = _Endless()
    answer = httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=body)
    transport = BoundedTransport(100, _Fixed(answer))
    async with (
        httpx2.AsyncClient(transport=transport) as http,
        http.stream("GET", "http://127.0.0.1:9/mcp") as reply,
    ):
        async for _ in reply.aiter_bytes():
            if body.sent > 1000:
                break  # past the bound, and not cut: streams are bounded per event
    assert body.sent > 1000
