"""Depth is an input error, never a crash: the gateway's edges, in process, on real pipes.

Every way JSON reaches the gateway — a stdio line, an HTTP body, tool arguments, an upstream
result, a stored value — is sent nesting far past ``MAX_JSON_DEPTH``; each gets a JSON-RPC
error or an error result, and the next ordinary request is still answered.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

import httpx
import mcp_types
import pytest
import sqlalchemy as sa
from mcp.shared.message import SessionMessage
from pydantic import ValidationError
from starlette.types import Receive, Scope, Send

from gateway.test_stdio_lane import call, handshake, wire
from gateway.upstreams import Upstream, gateway_settings
from pml.errors import StorageError, ToolCallError
from pml.gateway.early_stdio import opening_answer
from pml.gateway.http_lane_depth import DepthGuard
from pml.gateway.server import Gateway, open_gateway
from pml.storage.database import Database
from pml.storage.types import MAX_STORED_DEPTH, JsonValue
from pml.upstream.pool import ClientPool
from pml.upstream.results import check_result_depth
from pml.upstream.results_wire import readable
from pml.wire_json import MAX_JSON_DEPTH, TOO_DEEP_MESSAGE

pytestmark = pytest.mark.anyio


def nested_text(depth: int, kind: str = "list") -> str:
    opens: list[str] = []
    closes: list[str] = []
    for level in range(depth):
        as_list = kind == "list" or (kind == "mixed" and level % 2 == 0)
        opens.append("[" if as_list else '{"k":')
        closes.append("]" if as_list else "}")
    return "".join(opens) + "0" + "".join(reversed(closes))


def nested(depth: int) -> Any:
    """The value ``nested_text(depth, "mixed")`` is, built without recursion."""
    value: Any = 0
    for level in reversed(range(depth)):
        value = [value] if level % 2 == 0 else {"k": value}
    return value


@pytest.fixture
async def gateway(sqlite_url: str) -> AsyncGenerator[Gateway]:
    pool = ClientPool({"a": Upstream("a").server})
    async with open_gateway(gateway_settings(sqlite_url, expose_upstream=True), pool=pool) as gw:
        yield gw


def parse_error(answer: dict[str, Any], request_id: int | None = None) -> None:
    assert answer == {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": mcp_types.PARSE_ERROR, "message": TOO_DEEP_MESSAGE},
    }


# -- stdio ----------------------------------------------------------------------------------


async def test_stdio_answers_lines_of_any_depth_with_a_parse_error_and_keeps_serving(
    gateway: Gateway,
) -> None:
    deep_lines = [
        b"[" * 100_000,  # never closed
        nested_text(100_000).encode(),
        nested_text(10_000, "dict").encode(),
        nested_text(1_000, "mixed").encode(),
        json.dumps(call(5, "a__echo", {"x": "@"})).replace('"@"', nested_text(900)).encode(),
        json.dumps(call(6, "pml_execute", {"intent": "x", "code": "return 1", "args": "@"}))
        .replace('"@"', nested_text(MAX_JSON_DEPTH, "mixed"))
        .encode(),
    ]
    async with wire(gateway) as w:
        w.send(deep_lines[0])  # before the handshake too
        parse_error(await w.receive())
        await handshake(w)
        # A request whose id comes before its deep part gets its answer by that id.
        for line, request_id in zip(deep_lines[1:], [None, None, None, 5, 6], strict=True):
            w.send(line)
            parse_error(await w.receive(), request_id)
        answer = await w.request(call(7, "a__echo", {"text": "still here"}))
    assert answer["result"]["structuredContent"]["args"] == {"text": "still here"}


async def test_stdio_a_line_just_within_the_limit_is_a_request_like_any(gateway: Gateway) -> None:
    arguments = {"v": nested(MAX_JSON_DEPTH - 8)}
    async with wire(gateway) as w:
        await handshake(w)
        answer = await w.request(call(1, "a__echo", arguments))
    assert answer["result"]["structuredContent"]["args"] == arguments


def test_the_early_reader_leaves_a_deep_opening_request_to_the_server() -> None:
    params = {"protocolVersion": "2025-11-25", "capabilities": "@", "clientInfo": {}}
    line = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params})
    for depth in (1_000, 100_000):
        assert opening_answer(line.replace('"@"', nested_text(depth)).encode()) is None


# -- tool arguments -------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 900, 10_000])
async def test_deep_arguments_are_invalid_input_on_every_kind_of_tool(
    gateway: Gateway, depth: int
) -> None:
    tools, scope = gateway.tools, gateway.default_scope
    deep = {"v": nested(depth)}

    passed = await tools.call_tool(scope, "a__echo", deep)
    listed = await tools.call_tool(scope, "cap_list", deep)
    capability = await tools.call_tool(scope, "mcp__fs__read_json", deep)
    executed = await tools.call_tool(
        scope, "pml_execute", {"intent": "x", "code": "return 1", "args": deep}
    )
    raw = await tools.call_pass_through(scope, "a", "echo", deep)

    for result in (passed, listed, capability):
        assert result.is_error
        assert result.structured_content is not None
        assert result.structured_content["error"]["code"] == "INVALID_INPUT"
        assert "nested more than 128 levels" in result.structured_content["error"]["message"]
    assert executed.structured_content is not None
    assert executed.structured_content["status"] == "error"
    assert executed.structured_content["error"]["code"] == "INVALID_INPUT"
    assert raw["isError"] is True
    assert raw["structuredContent"]["error"]["code"] == "INVALID_INPUT"
    still = await tools.call_tool(scope, "a__echo", {"text": "ok"})
    assert not still.is_error


async def test_arguments_within_the_limit_are_passed_through(gateway: Gateway) -> None:
    arguments = {"v": nested(100)}
    result = await gateway.tools.call_tool(gateway.default_scope, "a__echo", arguments)
    assert not result.is_error
    assert result.structured_content is not None
    assert result.structured_content["args"] == arguments


# -- upstream results -----------------------------------------------------------------------


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH, 199, 5_000])
def test_an_upstream_result_too_deep_is_a_tool_error_naming_the_tool(depth: int) -> None:
    value = nested(depth)
    typed = mcp_types.CallToolResult(content=[], structured_content={"v": value})
    raw: dict[str, Any] = {"content": [], "structuredContent": {"v": value}}
    texted = {"content": [{"type": "text", "text": nested_text(depth + 1)}]}
    for result in (typed, raw, texted):
        with pytest.raises(ToolCallError, match=r"deep:dump returned JSON nested more than 128"):
            check_result_depth("deep", "dump", result)


def test_upstream_results_within_the_limit_or_not_json_pass() -> None:
    # Not JSON (a snippet gets the text): a scalar first, then brackets no parser reads.
    text_block = {"type": "text", "text": "see " + "[" * 10_000}
    check_result_depth("a", "t", {"content": [text_block], "structuredContent": nested(100)})
    check_result_depth("a", "t", {"content": [text_block, {"type": "image", "data": "x"}]})
    check_result_depth("a", "t", mcp_types.CallToolResult(content=[], structured_content={}))


def _parse_failure(line: str) -> ValidationError:
    try:
        mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValidationError as error:
        return error
    raise AssertionError("the SDK parsed it")


@pytest.mark.parametrize("request_id", [7, "call-7"])
def test_an_answer_too_deep_for_the_sdk_becomes_an_error_for_its_request(
    request_id: int | str,
) -> None:
    result = '{"content":[],"structuredContent":{"v":' + nested_text(100_000, "mixed") + "}}"
    line = f'{{"jsonrpc":"2.0","result":{result},"id":{json.dumps(request_id)}}}'

    item = readable(_parse_failure(line))

    assert isinstance(item, SessionMessage)
    assert isinstance(item.message, mcp_types.JSONRPCError)
    assert item.message.id == request_id
    assert "nested more than 128 levels" in item.message.error.message


def test_other_parse_failures_and_messages_are_left_to_the_sdk() -> None:
    unanswerable = '{"jsonrpc":"2.0","method":"x","params":' + nested_text(300) + "}"
    not_json = '{"jsonrpc": "2.0", "id": 1, "result": '
    for line in (unanswerable, not_json):
        failure = _parse_failure(line)
        assert readable(failure) is failure
    message = SessionMessage(mcp_types.JSONRPCNotification(jsonrpc="2.0", method="x"))
    assert readable(message) is message
    other = RuntimeError("boom")
    assert readable(other) is other


# -- HTTP bodies ----------------------------------------------------------------------------


class RecordingSdk:
    """Stands for the SDK's ``/mcp`` app: records the bodies that reach it, answers 202."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.bodies.append(body)
        await send({"type": "http.response.start", "status": 202, "headers": []})
        await send({"type": "http.response.body", "body": b""})


async def test_an_http_body_too_deep_never_reaches_the_sdk() -> None:
    sdk = RecordingSdk()
    transport = httpx.ASGITransport(app=DepthGuard(sdk))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        answers = [
            await client.post("/mcp", content=body)
            for body in (
                b"[" * 100_000,
                nested_text(10_000, "mixed").encode(),
                json.dumps(call(1, "a__echo", {"v": "@"}))
                .replace('"@"', nested_text(MAX_JSON_DEPTH))
                .encode(),
            )
        ]
        ordinary = json.dumps(call(2, "a__echo", {"v": nested(50)})).encode()
        passed = await client.post("/mcp", content=ordinary)
    for answer in answers:
        assert answer.status_code == 400
        parse_error(answer.json())
    assert passed.status_code == 202
    assert sdk.bodies == [ordinary]


# -- stored values --------------------------------------------------------------------------


async def test_a_stored_value_too_deep_is_a_storage_error_not_a_crash(db: Database) -> None:
    id_column = sa.Column("id", sa.Integer, primary_key=True)
    table = sa.Table("depth_probe", sa.MetaData(), id_column, sa.Column("doc", JsonValue()))
    async with db.engine.begin() as conn:
        await conn.run_sync(table.create)
        cast = "CAST(:doc AS JSONB)" if db.engine.dialect.name == "postgresql" else ":doc"
        insert = sa.text(f"INSERT INTO depth_probe (id, doc) VALUES (:id, {cast})")
        await conn.execute(insert, {"id": 1, "doc": nested_text(MAX_STORED_DEPTH)})
        await conn.execute(insert, {"id": 2, "doc": nested_text(MAX_STORED_DEPTH + 1, "mixed")})
    async with db.engine.connect() as conn:
        kept = (await conn.execute(sa.select(table.c.doc).where(table.c.id == 1))).scalar_one()
        with pytest.raises(StorageError, match=f"nested more than {MAX_STORED_DEPTH} levels"):
            (await conn.execute(sa.select(table.c.doc).where(table.c.id == 2))).scalar_one()
    assert kept == json.loads(nested_text(MAX_STORED_DEPTH))  # 256 levels: json.loads copes
