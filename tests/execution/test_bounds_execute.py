"""Through ``pml_execute``: tool results, upstream error texts, exception messages and
results are bounded (SPEC §4), and ``SystemExit`` fails honestly."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

import mcp_types
import pytest
from mcp import Client
from mcp.server import Server, ServerRequestContext

from execution.conftest import Execute
from gateway.upstreams import Upstream, gateway_settings
from pml.config import SandboxSettings
from pml.gateway.server import Gateway, open_gateway
from pml.sandbox.truncate import MAX_ERROR_BYTES
from pml.upstream.pool import ClientPool

pytestmark = pytest.mark.anyio

TOOL_LIMIT = 200_000
Ctx = ServerRequestContext[Any, Any]


def _big_server() -> Server[Any]:
    """``blob(n, piece)``: ``piece`` repeated ``n`` times as text; ``shout(n)``: an error
    result of ``n`` characters; ``deep(n)``: structured content with ``n`` small items."""

    async def list_tools(ctx: Ctx, params: Any) -> mcp_types.ListToolsResult:
        schema: dict[str, Any] = {"type": "object"}
        names = ("blob", "shout", "items")
        return mcp_types.ListToolsResult(
            tools=[mcp_types.Tool(name=n, input_schema=schema) for n in names]
        )

    async def call_tool(
        ctx: Ctx, params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        args = params.arguments or {}
        n = int(args.get("n", 0))
        if params.name == "shout":
            text = str(args.get("piece", "!")) * n
            return mcp_types.CallToolResult(
                content=[mcp_types.TextContent(type="text", text=text)], is_error=True
            )
        if params.name == "items":
            return mcp_types.CallToolResult(
                content=[mcp_types.TextContent(type="text", text="items")],
                structured_content={"items": [{"i": i} for i in range(n)]},
            )
        text = str(args.get("piece", "x")) * n
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text=text)])

    return Server("big", on_list_tools=list_tools, on_call_tool=call_tool)


@pytest.fixture
async def bounded(sqlite_url: str) -> AsyncGenerator[Execute]:
    pool = ClientPool({"a": Upstream("a").server, "big": _big_server()})
    settings = gateway_settings(sqlite_url, expose_upstream=False)
    sandbox = SandboxSettings(max_tool_result_bytes=TOOL_LIMIT, memory_mb=256)
    settings = settings.model_copy(update={"sandbox": sandbox})
    gateway: Gateway
    async with open_gateway(settings, pool=pool) as gateway, Client(gateway.server) as client:
        yield Execute(client, gateway)


def _within(error: dict[str, Any], max_bytes: int) -> None:
    text = json.dumps(error, ensure_ascii=False)
    text.encode("utf-8")  # strict: valid UTF-8
    assert len(error["message"].encode("utf-8")) <= max_bytes


async def test_a_tool_result_under_the_limit_reaches_the_snippet(bounded: Execute) -> None:
    # {"content":[{"type":"text","text":"..."}]} adds about 40 bytes to the text.
    code = "t = await mcp.big.blob(n=150_000)\nreturn len(t)"
    data = await bounded(code=code)
    assert data["status"] == "success", data
    assert data["result"] == 150_000


@pytest.mark.parametrize("piece", ["x", "é", "🙂"])
async def test_a_tool_result_over_the_limit_fails_the_run_naming_the_tool(
    bounded: Execute, piece: str
) -> None:
    n = TOOL_LIMIT // len(piece.encode()) + 10
    error = await bounded.error(code=f"return len(await mcp.big.blob(n={n}, piece={piece!r}))")
    assert error["code"] == "LIMIT_EXCEEDED"
    assert error["limit"] == "max_tool_result_bytes"
    assert error["tool"] == "big:blob"
    assert "big:blob returned more than 200000 bytes" in error["message"]


async def test_a_result_with_many_small_items_is_measured_too(bounded: Execute) -> None:
    error = await bounded.error(code="r = await mcp.big.items(n=50_000)\nreturn 1")
    assert error["limit"] == "max_tool_result_bytes"


async def test_a_refused_tool_result_cannot_be_caught_by_the_snippet(bounded: Execute) -> None:
    code = "try:\n    await mcp.big.blob(n=10**6)\nexcept BaseException:\n    pass\nreturn 'caught'"
    error = await bounded.error(code=code)
    assert error["code"] == "LIMIT_EXCEEDED"


@pytest.mark.parametrize("piece", ["!", "é", "e\u0301", "🙂"])
async def test_a_huge_upstream_error_text_is_cut(bounded: Execute, piece: str) -> None:
    n = 150_000 // len(piece.encode())  # ~150 KB: under the result limit, over the error one
    error = await bounded.error(code=f"await mcp.big.shout(n={n}, piece={piece!r})")
    assert error["code"] == "TOOL_ERROR"
    assert error["message"].startswith("Tool big:shout failed: ")
    kept = error["message"].removeprefix("Tool big:shout failed: ").split("…")[0]
    assert f"[truncated: {len(piece) * n - len(kept)} more characters]" in error["message"]
    _within(error, MAX_ERROR_BYTES)


async def test_a_caught_huge_upstream_error_is_cut_inside_the_snippet(bounded: Execute) -> None:
    code = (
        "try:\n    await mcp.big.shout(n=150_000)\nexcept ToolError as e:\n    return len(str(e))"
    )
    data = await bounded(code=code)
    assert data["status"] == "success"
    assert data["result"] <= MAX_ERROR_BYTES


async def test_a_huge_exception_message_gives_a_bounded_error(bounded: Execute) -> None:
    error = await bounded.error(code='x = 1\nraise ValueError("v" * 30_000_000)')
    assert error["code"] == "EXECUTION_FAILED"
    assert error["exception_type"] == "ValueError"
    assert error["line"] == 2
    _within(error, MAX_ERROR_BYTES)


async def test_a_huge_result_is_refused(bounded: Execute) -> None:
    error = await bounded.error(code="return ['r' * 1000] * 30_000")
    assert error["code"] == "LIMIT_EXCEEDED"
    assert error["limit"] == "max_result_bytes"
    assert error["message"] == "Result size 30090001 bytes exceeds the limit of 1000000 bytes"


@pytest.mark.parametrize(
    ("code", "exception_type"),
    [
        ("raise SystemExit", "SystemExit"),
        ("raise SystemExit('done')", "SystemExit"),
        ("raise KeyboardInterrupt", "KeyboardInterrupt"),
        ("raise BaseException('base')", "BaseException"),
    ],
)
async def test_system_exit_and_friends_are_execution_failed(
    bounded: Execute, code: str, exception_type: str
) -> None:
    error = await bounded.error(code=code)
    assert error["code"] == "EXECUTION_FAILED"
    assert error["exception_type"] == exception_type
    data = await bounded(code="return 40 + 2")
    assert data["result"] == 42
    assert await bounded.stored() == {"records": 1, "versions": 1, "traces": 1}
