"""Pass-through tools (``server__tool``) and hostile input, through a real SDK client."""

from __future__ import annotations

from typing import Any

import mcp_types
import pytest
from mcp import Client

from gateway.upstreams import (
    NO_SUCH_COMMAND,
    UNICODE_TEXT,
    Upstream,
    data_of,
    error_of,
    gateway_settings,
    mortal_server,
    tool,
)
from pml.config import ServerSettings
from pml.gateway.server import Gateway, open_gateway
from pml.gateway.tools import GatewayTools
from pml.registry.scope import Scope
from pml.registry.tools import CapTools
from pml.upstream.pool import ClientPool

pytestmark = pytest.mark.anyio


# -- pass-through ----------------------------------------------------------------------------


async def test_pass_through_returns_the_upstream_result_unchanged(
    pool: ClientPool, client: Client
) -> None:
    via_gateway = await client.call_tool("a__mixed", {})
    assert via_gateway.structured_content == {"n": 1, "nested": {"list": [1, 2.5, None, "x"]}}
    assert via_gateway.content[0] == mcp_types.TextContent(type="text", text=UNICODE_TEXT)
    assert isinstance(via_gateway.content[1], mcp_types.ImageContent)
    assert via_gateway.meta is not None
    assert via_gateway.meta["upstream"] == "a"
    direct = await pool.call_tool("a", "mixed", {})
    assert via_gateway.content == direct.content
    assert via_gateway.structured_content == direct.structured_content


async def test_an_upstream_error_result_is_passed_as_is(client: Client) -> None:
    result = await client.call_tool("b__fail", {})
    assert result.is_error is True
    assert result.content == [mcp_types.TextContent(type="text", text="b says no")]
    assert result.structured_content is None


async def test_same_tool_names_on_two_servers_reach_their_own_server(
    upstreams: dict[str, Upstream], client: Client
) -> None:
    a = await client.call_tool("a__echo", {"text": "1"})
    b = await client.call_tool("b__echo", {"text": "2"})
    assert a.structured_content == {"server": "a", "tool": "echo", "args": {"text": "1"}}
    assert b.structured_content == {"server": "b", "tool": "echo", "args": {"text": "2"}}
    assert upstreams["a"].calls == [("echo", {"text": "1"})]
    assert upstreams["b"].calls == [("echo", {"text": "2"})]


async def test_server_names_with_underscores_resolve_without_naive_splitting(
    sqlite_url: str,
) -> None:
    srv, my = Upstream("my__srv", [tool("x")]), Upstream("my")
    pool = ClientPool({"my__srv": srv.server, "my": my.server})
    settings = gateway_settings(sqlite_url, expose_upstream=True)
    async with open_gateway(settings, pool=pool) as gw, Client(gw.server) as connected:
        await connected.call_tool("my__srv__x", {})
        await connected.call_tool("my__echo", {})
    assert (srv.calls, my.calls) == ([("x", {})], [("echo", {})])


async def test_a_server_that_could_not_start_is_upstream_unavailable_naming_it(
    sqlite_url: str,
) -> None:
    pool = ClientPool(
        {"a": Upstream("a").server, "broken": ServerSettings(command=NO_SUCH_COMMAND)}
    )
    settings = gateway_settings(sqlite_url, expose_upstream=True)
    async with open_gateway(settings, pool=pool) as gw, Client(gw.server) as connected:
        names = [t.name for t in (await connected.list_tools()).tools]
        assert not [name for name in names if name.startswith("broken__")]
        error = error_of(await connected.call_tool("broken__anything", {}))
        assert error["code"] == "UPSTREAM_UNAVAILABLE"
        assert error["server"] == "broken"
        assert "broken" in error["message"]
        still_up = await connected.call_tool("a__echo", {})
        assert still_up.structured_content == {"server": "a", "tool": "echo", "args": {}}


async def test_an_upstream_killed_mid_call_is_upstream_unavailable_and_the_gateway_keeps_serving(
    sqlite_url: str,
) -> None:
    pool = ClientPool({"a": Upstream("a").server, "mortal": mortal_server()})
    settings = gateway_settings(sqlite_url, expose_upstream=True)
    async with open_gateway(settings, pool=pool) as gw, Client(gw.server) as connected:
        pong = await connected.call_tool("mortal__ping", {})
        assert pong.content == [mcp_types.TextContent(type="text", text="pong")]
        error = error_of(await connected.call_tool("mortal__die", {}))
        assert error["code"] == "UPSTREAM_UNAVAILABLE"
        assert error["server"] == "mortal"
        still_up = await connected.call_tool("a__echo", {})
        assert still_up.structured_content == {"server": "a", "tool": "echo", "args": {}}
        assert data_of(await connected.call_tool("cap_list", {}))["total"] == 0


async def test_pass_through_names_are_unknown_when_upstream_is_not_exposed(
    upstreams: dict[str, Upstream], closed_gateway: Gateway
) -> None:
    async with Client(closed_gateway.server) as connected:
        error = error_of(await connected.call_tool("a__echo", {}))
    assert error == {"code": "NOT_FOUND", "message": "Unknown tool: a__echo"}
    assert upstreams["a"].calls == []


# -- hostile input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["nope", "", "cap_", "cap:", "a__", "__echo", "a__nope", "ünïcødé__tøøl", "x" * 5000]
)
async def test_unknown_tools_are_not_found_with_a_bounded_message(
    client: Client, name: str
) -> None:
    error = error_of(await client.call_tool(name, {}))
    assert error["code"] == "NOT_FOUND"
    assert error["message"].startswith("Unknown tool: ")
    assert len(error["message"]) < 300


async def test_huge_arguments_are_refused_or_passed_without_harm(client: Client) -> None:
    huge = "x" * 2_000_000
    error = error_of(await client.call_tool("cap_lookup", {"name": huge}))
    assert error["code"] == "INVALID_INPUT"
    assert len(error["message"]) < 1000
    echoed = await client.call_tool("a__echo", {"text": huge, "deep": [[[[[[1]]]]]]})
    assert echoed.structured_content is not None
    assert echoed.structured_content["args"]["text"] == huge


async def test_unicode_arguments_round_trip(client: Client) -> None:
    text = UNICODE_TEXT + "\u0000\u202e"
    echoed = await client.call_tool("b__echo", {"text": text})
    assert echoed.structured_content == {"server": "b", "tool": "echo", "args": {"text": text}}
    error = error_of(await client.call_tool("cap_lookup", {"name": text}))
    assert error["code"] in ("NOT_FOUND", "INVALID_INPUT")


async def test_an_unexpected_failure_is_an_internal_error_and_the_server_stays_up(
    gateway: Gateway, caplog: pytest.LogCaptureFixture
) -> None:
    class Exploding(CapTools):
        async def call(self, tool: str, scope: Scope, arguments: object) -> dict[str, Any]:
            raise RuntimeError("secret detail")

    tools = GatewayTools(Exploding(gateway.registry), gateway.pool, expose_upstream=False)
    result = await tools.call_tool(gateway.default_scope, "cap_list", {})
    error = error_of(result)
    assert error["code"] == "INTERNAL_ERROR"
    assert "secret" not in error["message"]
    assert any(r.exc_info for r in caplog.records if "cap_list" in r.getMessage())
    after = await tools.call_tool(gateway.default_scope, "pml_execute", {"intent": "x"})
    assert error_of(after)["code"] == "NOT_AVAILABLE"
