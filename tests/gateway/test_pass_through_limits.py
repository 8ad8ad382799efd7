"""One pass-through result is bounded by ``[sandbox] max_tool_result_bytes`` as a snippet's
tool result is: through the SDK server (stdio's path) and the HTTP fast lane."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import mcp_types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from gateway.upstreams import Upstream, error_of, gateway_settings
from pml.gateway.http import running_http
from pml.gateway.keys import ApiKeys
from pml.gateway.server import Gateway, open_gateway
from pml.upstream.pool import ClientPool

pytestmark = pytest.mark.anyio

LIMIT = 50_000


@pytest.fixture
async def limited(sqlite_url: str) -> AsyncGenerator[tuple[Gateway, Upstream]]:
    upstream = Upstream("a")
    settings = gateway_settings(sqlite_url, expose_upstream=True)
    settings.sandbox.max_tool_result_bytes = LIMIT
    async with open_gateway(settings, pool=ClientPool({"a": upstream.server})) as gateway:
        yield gateway, upstream


async def _over_http(gateway: Gateway, calls: list[dict[str, Any]]) -> list[Any]:
    key = (await ApiKeys(gateway.db).create("acme", "webapp", user="erwan"))[0]
    async with running_http(gateway) as url:
        headers = {"Authorization": f"Bearer {key}"}
        async with create_mcp_http_client(headers=headers) as http:
            transport = streamable_http_client(f"{url}/mcp", http_client=http)
            async with Client(transport) as client:
                return [await client.call_tool("a__echo", args) for args in calls]


def _refused(result: mcp_types.CallToolResult) -> dict[str, Any]:
    error = error_of(result)
    assert error["code"] == "LIMIT_EXCEEDED"
    assert error["limit"] == "max_tool_result_bytes"
    assert error["tool"] == "a:echo"
    assert str(LIMIT) in error["message"]
    assert len(str(error)) < 1_000  # the refusal carries none of the result
    return error


CASES = [
    {"text": "x" * (LIMIT * 3)},  # one long text (twice: content and structuredContent)
    {"text": "é" * LIMIT},  # fewer characters than the limit, more bytes
    {"many": ["y"] * LIMIT},  # many small values
    {"text": "🔔" * (LIMIT // 2)},  # four bytes each
]


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_result_over_the_limit_is_refused_through_the_sdk_server(
    limited: tuple[Gateway, Upstream], mode: str
) -> None:
    gateway, upstream = limited
    async with Client(gateway.server, mode=mode) as client:
        small = await client.call_tool("a__echo", {"text": "z" * (LIMIT // 4)})
        refused = [await client.call_tool("a__echo", args) for args in CASES]
        after = await client.call_tool("a__echo", {"text": "still serving"})

    assert small.is_error is not True
    assert small.structured_content is not None
    assert small.structured_content["args"]["text"] == "z" * (LIMIT // 4)
    for result in refused:
        _refused(result)
    assert after.structured_content == {
        "server": "a", "tool": "echo", "args": {"text": "still serving"}
    }  # fmt: skip
    assert len(upstream.calls) == len(CASES) + 2  # the upstream answered; PML did not relay


async def test_a_result_over_the_limit_is_refused_through_the_http_fast_lane(
    limited: tuple[Gateway, Upstream],
) -> None:
    gateway, _ = limited
    small = {"text": "z" * (LIMIT // 4)}
    results = await _over_http(gateway, [small, *CASES, {"text": "still serving"}])

    assert results[0].is_error is not True
    assert results[0].structured_content["args"] == small
    for result in results[1:-1]:
        _refused(result)
    assert results[-1].structured_content["args"] == {"text": "still serving"}
