"""The stdio transport and its pass-through fast lane, spoken to as raw JSON lines on pipes.

The gateway runs on real pipes (``open_pipes``) with the real pool and in-process upstream
servers; the test is the client and writes the protocol by hand, so every line the lane
declines can be seen reaching the SDK server instead.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import mcp_types
import pytest

from gateway.upstreams import UNICODE_TEXT, Upstream, gateway_settings
from gateway.waiting_upstream import ENVELOPE, Waiter
from pml.gateway.fast_lane import ToolCallLane
from pml.gateway.server import Gateway, open_gateway
from pml.gateway.stdio import MAX_LINE_BYTES, Pipes, claim_stdio, open_pipes, serve_on_pipes
from pml.registry.models import CapabilityDraft
from pml.upstream.pool import ClientPool

pytestmark = pytest.mark.anyio

WAIT_S = 10.0


@dataclass
class RecordingLane:
    """The real lane, remembering which lines it took."""

    inner: ToolCallLane
    taken: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])

    def take(self, line: bytes, tasks: anyio.abc.TaskGroup) -> bool:
        took = self.inner.take(line, tasks)
        if took:
            self.taken.append(json.loads(line))
        return took

    def sent(self, message: mcp_types.JSONRPCMessage) -> None:
        self.inner.sent(message)


@dataclass
class Wire:
    """The client's end: write raw lines, read parsed ones."""

    pipes: Pipes
    lane: RecordingLane

    def send(self, message: dict[str, Any] | bytes) -> None:
        data = message if isinstance(message, bytes) else json.dumps(message).encode()
        self.pipes.write_line(data)

    async def receive(self) -> dict[str, Any]:
        with anyio.fail_after(WAIT_S):
            line = await self.pipes.reader.readline()
        assert line, "the gateway closed stdout"
        return json.loads(line)

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        self.send(message)
        return await self.receive()

    @property
    def taken_ids(self) -> list[Any]:
        return [message["id"] for message in self.lane.taken if "id" in message]


@pytest.fixture
def waiter() -> Waiter:
    return Waiter()


@pytest.fixture
async def stdio_gateway(sqlite_url: str, waiter: Waiter) -> AsyncGenerator[Gateway]:
    pool = ClientPool({"a": Upstream("a").server, "slow": waiter.server})
    async with open_gateway(gateway_settings(sqlite_url, expose_upstream=True), pool=pool) as gw:
        yield gw


@asynccontextmanager
async def wire(gateway: Gateway) -> AsyncGenerator[Wire]:
    """Serve ``gateway`` on a fresh pair of pipes; closing the client's end stops it."""
    to_server_r, to_server_w = os.pipe()
    to_client_r, to_client_w = os.pipe()
    stopped = anyio.Event()
    try:
        async with (
            open_pipes(to_server_r, to_client_w) as server_pipes,
            anyio.create_task_group() as tasks,
        ):
            lane = RecordingLane(
                ToolCallLane(
                    gateway.tools,
                    gateway.default_scope,
                    server_info=gateway.server.server_info_stamp,
                    write=server_pipes.write_line,
                    session_tracked=lambda: bool(gateway.server.notifier.scopes()),
                )
            )

            async def serve() -> None:
                await serve_on_pipes(gateway.server, server_pipes, lane=lane)
                stopped.set()

            tasks.start_soon(serve)
            async with open_pipes(to_client_r, to_server_w) as client_pipes:
                os.close(to_server_w)  # open_pipes holds its own copy
                to_server_w = -1
                yield Wire(client_pipes, lane)
            with anyio.fail_after(WAIT_S):  # the end of stdin stops the server by itself
                await stopped.wait()
    finally:
        for fd in (to_server_r, to_server_w, to_client_r, to_client_w):
            if fd >= 0:
                os.close(fd)


def call(request_id: Any, name: str, arguments: Any = None, **extra: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, **extra}
    if arguments is not None:
        params["arguments"] = arguments
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


async def handshake(w: Wire, version: str = "2025-11-25") -> dict[str, Any]:
    answer = await w.request(
        {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
        }
    )
    w.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    listed = await w.request({"jsonrpc": "2.0", "id": "list", "method": "tools/list"})
    assert "a__echo" in [t["name"] for t in listed["result"]["tools"]]
    return answer


# -- the lane answers plain pass-through calls -----------------------------------------------


async def test_a_session_s_pass_through_call_is_answered_by_the_lane_unchanged(
    stdio_gateway: Gateway,
) -> None:
    async with wire(stdio_gateway) as w:
        await handshake(w)
        answer = await w.request(call(7, "a__mixed", {}))
        echo = await w.request(call("e", "a__echo", {"text": UNICODE_TEXT}))
    assert w.taken_ids == [7, "e"]
    assert answer["id"] == 7
    result = answer["result"]
    assert result["content"][0] == {"type": "text", "text": UNICODE_TEXT}
    assert result["content"][1]["type"] == "image"
    assert result["structuredContent"] == {"n": 1, "nested": {"list": [1, 2.5, None, "x"]}}
    assert result["_meta"]["upstream"] == "a"
    assert echo["result"]["structuredContent"]["args"] == {"text": UNICODE_TEXT}


async def test_a_modern_call_is_answered_by_the_lane_with_the_2026_envelope(
    stdio_gateway: Gateway,
) -> None:
    async with wire(stdio_gateway) as w:
        opening = await w.request(
            {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": ENVELOPE}}
        )
        answer = await w.request(call(2, "a__echo", {"text": "hi"}, _meta=ENVELOPE))
    assert "result" in opening
    assert w.taken_ids == [2]
    result = answer["result"]
    assert result["resultType"] == "complete"
    # The upstream (2026-07-28 too) stamped its own identity; as in the SDK, that one stays.
    assert result["_meta"][mcp_types.SERVER_INFO_META_KEY]["name"] == "a"
    assert result["structuredContent"] == {"server": "a", "tool": "echo", "args": {"text": "hi"}}


async def test_the_lane_and_the_sdk_server_give_the_same_result(stdio_gateway: Gateway) -> None:
    async with wire(stdio_gateway) as w:
        await handshake(w)
        fast = await w.request(call(1, "a__mixed", {}))
        # A progress token sends the same call through the SDK server.
        slow = await w.request(call(2, "a__mixed", {}, _meta={"progressToken": "p"}))
    assert w.taken_ids == [1]
    as_model = mcp_types.CallToolResult.model_validate
    assert as_model(fast["result"]) == as_model(slow["result"])


async def test_errors_in_the_lane_have_the_gateway_s_error_shape(stdio_gateway: Gateway) -> None:
    async with wire(stdio_gateway) as w:
        await handshake(w)
        refused = await w.request(call(1, "a__echo", ["not", "an", "object"]))
        failed = await w.request(call(2, "a__fail", {}))
    assert w.taken_ids == [2]  # arguments that are not an object: the SDK's own error
    assert "error" in refused or refused["result"]["isError"] is True
    assert failed["result"]["isError"] is True
    assert failed["result"]["content"] == [{"type": "text", "text": "a says no"}]


# -- what the lane leaves to the SDK server ----------------------------------------------------


async def test_a_call_before_the_session_is_initialised_is_the_server_s(
    stdio_gateway: Gateway,
) -> None:
    async with wire(stdio_gateway) as w:
        answer = await w.request(call(1, "a__echo", {}))
    assert w.taken_ids == []
    assert "error" in answer


async def test_unlisted_tools_bad_envelopes_and_odd_params_go_to_the_server(
    stdio_gateway: Gateway,
) -> None:
    bad_version = {**ENVELOPE, mcp_types.PROTOCOL_VERSION_META_KEY: "1999-01-01"}
    async with wire(stdio_gateway) as w:
        await w.request(
            {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": ENVELOPE}}
        )
        unknown = await w.request(call(2, "a__nope", {}, _meta=ENVELOPE))
        no_envelope = await w.request(call(3, "a__echo", {}))
        wrong_version = await w.request(call(4, "a__echo", {}, _meta=bad_version))
        extra_param = await w.request(call(5, "a__echo", {}, _meta=ENVELOPE, extra=1))
        taken = await w.request(call(6, "a__echo", {}, _meta=ENVELOPE))
    assert w.taken_ids == [6]
    assert unknown["result"]["isError"] is True
    assert "Unknown tool" in unknown["result"]["content"][0]["text"]
    assert "error" in no_envelope
    assert "error" in wrong_version
    assert "result" in extra_param or "error" in extra_param
    assert taken["result"]["structuredContent"]["tool"] == "echo"


@pytest.mark.parametrize(
    "line",
    [
        b"{not json",
        b"[1, 2, 3]",
        b'"tools/call"',
        b'{"jsonrpc": "2.0", "id": true, "method": "tools/call", "params": {"name": "a__echo"}}',
        b'{"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": "a__echo"}',
        b'{"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": 12}}',
        '{"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "a__é"}}'.encode(),
        b'{"jsonrpc": "1.0", "id": 9, "method": "tools/call", "params": {"name": "a__echo"}}',
    ],
    ids=["broken", "array", "string", "bool-id", "params-str", "name-int", "unicode", "v1"],
)
async def test_hostile_lines_are_never_taken_each_gets_one_error_and_serving_goes_on(
    stdio_gateway: Gateway, line: bytes
) -> None:
    async with wire(stdio_gateway) as w:
        await handshake(w)
        w.send(line)
        answer = await w.receive()
        after = await w.request(call(100, "a__echo", {"text": "still here"}))
    assert w.taken_ids == [100]
    if "error" in answer:
        assert answer["error"]["code"] in (-32700, -32600, -32602)
        assert answer["error"]["message"]
    else:
        assert answer["id"] == 9
        assert answer["result"]["isError"] is True
    assert after["id"] == 100
    assert after["result"]["structuredContent"]["args"] == {"text": "still here"}


async def test_a_line_that_is_not_json_gets_a_parse_error(stdio_gateway: Gateway) -> None:
    async with wire(stdio_gateway) as w:
        await handshake(w)
        w.send(b"{not json")
        answer = await w.receive()
    assert answer == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": "Parse error: the message is not JSON"},
    }


async def test_a_line_over_the_limit_is_skipped_with_an_error(stdio_gateway: Gateway) -> None:
    huge = b'{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "a__echo", '
    huge += b'"arguments": {"text": "' + b"x" * (MAX_LINE_BYTES + 10) + b'"}}}'
    async with wire(stdio_gateway) as w:
        await handshake(w)
        w.send(huge)
        error = await w.receive()
        after = await w.request(call(6, "a__echo", {"text": "small"}))
    assert error["id"] is None
    assert error["error"]["code"] == -32700
    assert str(MAX_LINE_BYTES) in error["error"]["message"]
    assert w.taken_ids == [6]
    assert after["result"]["structuredContent"]["args"] == {"text": "small"}


# -- in flight ---------------------------------------------------------------------------------


async def test_a_cancelled_lane_call_is_not_answered_and_its_upstream_call_stops(
    stdio_gateway: Gateway, waiter: Waiter
) -> None:
    async with wire(stdio_gateway) as w:
        await handshake(w)
        w.send(call(1, "slow__wait", {}))
        with anyio.fail_after(WAIT_S):
            await waiter.started.wait()
        duplicate = await w.request(call(1, "a__echo", {}))  # same id while in flight
        w.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
        with anyio.fail_after(WAIT_S):
            await waiter.cancelled.wait()
        after = await w.request(call(2, "a__echo", {"text": "next"}))
    assert w.taken_ids == [1, 2]
    assert duplicate["id"] == 1  # answered by the server, not by the lane
    assert after["id"] == 2  # nothing was written for the cancelled request in between


async def test_calls_in_the_lane_run_concurrently(stdio_gateway: Gateway, waiter: Waiter) -> None:
    async with wire(stdio_gateway) as w:
        await handshake(w)
        w.send(call("slow", "slow__wait", {}))
        with anyio.fail_after(WAIT_S):
            await waiter.started.wait()
        quick = await w.request(call("quick", "a__echo", {}))
        waiter.release.set()
        slow = await w.receive()
    assert quick["id"] == "quick"
    assert slow["id"] == "slow"
    assert slow["result"]["content"] == [{"type": "text", "text": "done"}]


# -- claiming stdin and stdout ---------------------------------------------------------------


async def test_claim_stdio_leaves_terminals_and_files_alone(tmp_path: Any) -> None:
    with (tmp_path / "in").open("w+b") as stdin, (tmp_path / "out").open("w+b") as stdout:
        async with claim_stdio(stdin.fileno(), stdout.fileno()) as pipes:
            assert pipes is None


async def test_claim_stdio_diverts_the_descriptors_and_restores_them() -> None:
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    try:
        before = (os.fstat(in_r).st_ino, os.fstat(out_w).st_ino)
        async with claim_stdio(in_r, out_w) as pipes:
            assert pipes is not None
            # While claimed, the descriptors no longer reach the wire...
            assert os.fstat(in_r).st_ino != before[0]
            assert os.fstat(out_w).st_ino != before[1]
            # ...but the protocol does.
            pipes.write_line(b'{"ok": 1}')
            await pipes.writer.drain()
            os.write(in_w, b"line\n")
            with anyio.fail_after(WAIT_S):
                assert await pipes.reader.readline() == b"line\n"
        assert (os.fstat(in_r).st_ino, os.fstat(out_w).st_ino) == before
        assert os.get_blocking(in_r)
        assert os.get_blocking(out_w)
        assert os.read(out_r, 100) == b'{"ok": 1}\n'
    finally:
        for fd in (in_r, in_w, out_r, out_w):
            os.close(fd)


async def test_the_gateway_s_own_tools_are_answered_by_the_lane(stdio_gateway: Gateway) -> None:
    async with wire(stdio_gateway) as w:
        await handshake(w)
        listed = await w.request(call(1, "cap_list", {}))
        seed = await w.request(call(2, "cap:list", {"named_only": True}))
        executed = await w.request(
            call(3, "pml_execute", {"intent": "add", "code": "return 1 + 2"})
        )
        refused = await w.request(call(4, "pml_execute", {"intent": ""}))
        slow = await w.request(call(5, "cap_list", {}, _meta={"progressToken": "p"}))
        fast = await w.request(call(6, "cap_list", {}))
    assert w.taken_ids == [1, 2, 3, 4, 6]
    assert listed["result"]["structuredContent"]["total"] == 0
    assert "items" in seed["result"]["structuredContent"]
    assert executed["result"]["structuredContent"]["result"] == 3
    assert executed["result"]["isError"] is False
    assert refused["result"]["isError"] is True
    assert refused["result"]["structuredContent"]["error"]["code"] == "INVALID_INPUT"
    as_model = mcp_types.CallToolResult.model_validate
    assert as_model(slow["result"]) == as_model(fast["result"])
    assert slow["result"]["structuredContent"]["total"] == 1


# -- tools/list ------------------------------------------------------------------------------


def listing(request_id: Any, **params: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": "tools/list"}
    if params:
        message["params"] = params
    return message


async def test_after_the_first_list_a_session_s_lists_come_from_the_lane_unchanged(
    stdio_gateway: Gateway,
) -> None:
    await named_capability(stdio_gateway)
    async with wire(stdio_gateway) as w:
        await w.request(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "1"},
                },
            }
        )
        w.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        server_answer = await w.request(listing("x"))  # the server's: the session is now known
        lane_answer = await w.request(listing("y"))
        with_empty_params = await w.request(listing("z") | {"params": {}})
    assert w.taken_ids == ["y", "z"]
    assert lane_answer["result"] == server_answer["result"]
    assert with_empty_params["result"] == server_answer["result"]
    names = [tool["name"] for tool in lane_answer["result"]["tools"]]
    assert "mcp__math__add" in names
    assert "a__echo" in names


async def test_a_modern_list_from_the_lane_equals_the_server_s(stdio_gateway: Gateway) -> None:
    await named_capability(stdio_gateway)
    async with wire(stdio_gateway) as w:
        opening = await w.request(listing(1, _meta=ENVELOPE))
        again = await w.request(listing(2, _meta=ENVELOPE))
    assert w.taken_ids == [2]
    assert again["result"] == opening["result"]
    assert again["result"]["resultType"] == "complete"
    assert again["result"]["cacheScope"] == "private"


async def test_hostile_list_requests_are_refused_or_left_to_the_server(
    stdio_gateway: Gateway,
) -> None:
    async with wire(stdio_gateway) as w:
        await handshake(w)
        bad_cursor = await w.request(listing(1, cursor="'; DROP TABLE tools; --"))
        numeric_cursor = await w.request(listing(2, cursor=12))
        extra = await w.request(listing(3, cursor=None, limit=5))
        still_fine = await w.request(listing(4))
    assert bad_cursor["error"]["code"] == mcp_types.INVALID_PARAMS
    assert "Invalid cursor" in bad_cursor["error"]["message"]
    assert "error" in numeric_cursor  # not taken: the server refuses it itself
    assert "result" in extra or "error" in extra
    assert w.taken_ids == [1, 4]
    assert "a__echo" in [tool["name"] for tool in still_fine["result"]["tools"]]


async def named_capability(gateway: Gateway) -> None:
    draft = CapabilityDraft(code="return 1", name="math:add", intent="add")
    await gateway.registry.capture(gateway.default_scope, draft, latency_ms=1)
