"""Named capabilities as MCP tools: listed per caller, called like any tool (SPEC §6.6)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from gateway.upstreams import MODES, Upstream, data_of, error_of, gateway_settings
from pml.gateway.server import Gateway, open_gateway
from pml.registry.models import CapabilityDraft, CapabilityRecord, RenameChanges
from pml.registry.names import tool_name_for
from pml.registry.records import blank_record
from pml.registry.scope import Scope, Visibility
from pml.storage.capability_repo import SqlCapabilityRepository
from pml.storage.types import utc_now
from pml.storage.usage_repo import CAPABILITY_SERVER_ID, SqlToolUsageRepository
from pml.upstream.pool import ClientPool

pytestmark = pytest.mark.anyio

SCOPE = Scope("acme", "webapp", "erwan")
ADD_CODE = 'return {"sum": args.get("a", 1) + args["b"]}'
ADD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"a": {"type": "integer", "default": 1}, "b": {"type": "integer"}},
    "required": ["b"],
}


async def named(
    gateway: Gateway,
    name: str | None,
    code: str = ADD_CODE,
    schema: dict[str, Any] | None = None,
    *,
    scope: Scope = SCOPE,
    description: str | None = None,
    tools: tuple[str, ...] = (),
    visibility: Visibility = "project",
) -> CapabilityRecord:
    draft = CapabilityDraft(
        code=code,
        name=name,
        intent="add two numbers",
        description=description,
        parameters_schema=schema if schema is not None else dict(ADD_SCHEMA),
        tools_used=tools,
        visibility=visibility,
    )
    return (await gateway.registry.capture(scope, draft, latency_ms=1)).record


def tool_map(tools: list[mcp_types.Tool]) -> dict[str, mcp_types.Tool]:
    return {tool.name: tool for tool in tools}


@pytest.fixture(params=MODES)
async def client(request: pytest.FixtureRequest, gateway: Gateway) -> Any:
    async with Client(gateway.server, mode=request.param) as connected:
        yield connected


async def test_named_capabilities_are_listed_with_their_schema_and_unnamed_ones_are_not(
    gateway: Gateway, client: Client
) -> None:
    await named(gateway, "math:add", description="Adds a and b")
    unnamed = await named(gateway, None, code="return 42")
    tools = tool_map((await client.list_tools(cache_mode="bypass")).tools)
    add = tools["mcp__math__add"]
    assert add.input_schema == ADD_SCHEMA
    assert add.input_schema["properties"]["a"]["default"] == 1
    assert add.description is not None
    assert add.description.startswith("Adds a and b")
    assert "math:add" in add.description
    assert unnamed.tool_name not in tools
    assert not any(name.startswith("mcp__code__") for name in tools)
    assert {"pml_execute", "cap_list", "a__echo"} <= set(tools)


async def test_a_capability_tool_runs_its_code_with_the_arguments(
    gateway: Gateway, client: Client
) -> None:
    record = await named(gateway, "math:add")
    result = await client.call_tool("mcp__math__add", {"b": 41})
    assert data_of(result) == {"sum": 42}
    assert result.meta is not None
    details = result.meta["pml/capability"]
    assert details["capabilityFqdn"] == record.fqdn
    assert details["capabilityName"] == "math:add"
    again = await client.call_tool("mcp__math__add", {"a": 10, "b": 5})
    assert data_of(again) == {"sum": 15}


async def test_a_result_that_is_not_an_object_is_wrapped_and_shown_as_text(
    gateway: Gateway, client: Client
) -> None:
    await named(gateway, "say:hello", code='return "héllo " + args["who"]', schema={})
    result = await client.call_tool("mcp__say__hello", {"who": "wörld 🙂"})
    assert result.structured_content == {"result": "héllo wörld 🙂"}
    block = result.content[0]
    assert isinstance(block, mcp_types.TextContent)
    assert block.text == "héllo wörld 🙂"


async def test_a_capability_tool_calls_upstream_tools_through_the_snippet(
    gateway: Gateway, client: Client, upstreams: dict[str, Upstream]
) -> None:
    code = 'return await mcp.a.echo(text=args["text"])'
    schema = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
    await named(gateway, "a:shout", code=code, schema=schema, tools=("a:echo",))
    result = await client.call_tool("mcp__a__shout", {"text": "ü"})
    assert data_of(result) == {"server": "a", "tool": "echo", "args": {"text": "ü"}}
    assert upstreams["a"].calls == [("echo", {"text": "ü"})]


async def test_an_unknown_capability_tool_is_capability_not_found(client: Client) -> None:
    for name in ("mcp__math__nothing", "mcp__" + "x" * 500, "mcp__a__'; DROP TABLE x; --"):
        error = error_of(await client.call_tool(name, {}))
        assert error["code"] == "NOT_FOUND"
        assert error["message"].startswith("Capability not found")


async def test_an_unnamed_capability_is_not_callable_as_a_tool(
    gateway: Gateway, client: Client
) -> None:
    unnamed = await named(gateway, None, code="return 7", schema={})
    error = error_of(await client.call_tool(unnamed.tool_name, {}))
    assert error["code"] == "NOT_FOUND"


async def test_arguments_that_fail_the_schema_are_invalid_args(
    gateway: Gateway, client: Client
) -> None:
    await named(gateway, "math:add")
    cases: list[dict[str, Any]] = [
        {},  # b is required
        {"b": "41"},  # wrong type
        {"b": 1, "a": [1, 2]},
    ]
    for arguments in cases:
        error = error_of(await client.call_tool("mcp__math__add", arguments))
        assert error["code"] == "INVALID_ARGS", arguments
    await gateway.executor.flush()
    record = (await gateway.registry.resolve(SCOPE, "math:add")).record
    assert record.usage_count == 1 + 3  # the capture, then three failed calls
    assert record.success_count == 1


async def test_arguments_that_are_not_an_object_are_refused(gateway: Gateway) -> None:
    await named(gateway, "math:add")
    result = await gateway.tools.call_tool(SCOPE, "mcp__math__add", ["b", 1])  # pyright: ignore[reportArgumentType]
    assert error_of(result)["code"] == "INVALID_INPUT"


async def test_a_renamed_capability_keeps_answering_under_its_old_tool_name(
    gateway: Gateway, client: Client
) -> None:
    await named(gateway, "math:add")
    await gateway.registry.rename(SCOPE, "math:add", RenameChanges(new_name="math:plus"))
    tools = tool_map((await client.list_tools(cache_mode="bypass")).tools)
    assert "mcp__math__plus" in tools
    assert "mcp__math__add" not in tools
    old = await client.call_tool("mcp__math__add", {"b": 1})
    assert data_of(old) == {"sum": 2}
    assert old.meta is not None
    assert old.meta["pml/capability"]["deprecatedAlias"]["currentName"] == "math:plus"


async def test_private_capabilities_are_listed_only_for_their_creator(gateway: Gateway) -> None:
    await named(gateway, "mine:secret", code="return 1", schema={}, visibility="private")
    own = tool_map(await gateway.tools.list_tools(SCOPE))
    colleague = tool_map(await gateway.tools.list_tools(Scope("acme", "webapp", "ana")))
    other_project = tool_map(await gateway.tools.list_tools(Scope("acme", "other", "erwan")))
    assert "mcp__mine__secret" in own
    assert "mcp__mine__secret" not in colleague
    assert "mcp__mine__secret" not in other_project
    denied = await gateway.tools.call_tool(Scope("acme", "webapp", "ana"), "mcp__mine__secret", {})
    assert error_of(denied)["code"] == "NOT_FOUND"


async def test_a_long_display_name_gives_a_valid_unique_tool_name(
    gateway: Gateway, client: Client
) -> None:
    first = await named(gateway, "n:" + "a" * 62, code="return 1", schema={})
    second = await named(gateway, "n:" + "a" * 61 + "b", code="return 2", schema={})
    assert first.tool_name != second.tool_name
    tools = tool_map((await client.list_tools(cache_mode="bypass")).tools)
    for record, value in ((first, 1), (second, 2)):
        assert len(record.tool_name) <= 64
        assert record.tool_name in tools
        result = await client.call_tool(record.tool_name, {})
        assert (result.is_error, result.structured_content) == (False, {"result": value})


async def test_tools_are_paged_with_cursors_when_the_list_is_long(
    sqlite_url: str, pool: ClientPool
) -> None:
    settings = gateway_settings(sqlite_url, expose_upstream=True).model_copy(
        update={"tools_page_size": 4}
    )
    async with open_gateway(settings, pool=pool) as gateway:
        for index in range(7):
            await named(gateway, f"n:tool_{index}", code=f"return {index}", schema={})
        everything = [tool.name for tool in await gateway.tools.list_tools(SCOPE)]
        async with Client(gateway.server, mode="legacy") as client:
            seen: list[str] = []
            cursor: str | None = None
            pages = 0
            while True:
                page = await client.list_tools(cursor=cursor, cache_mode="bypass")
                pages += 1
                seen.extend(tool.name for tool in page.tools)
                assert len(page.tools) <= 4
                cursor = page.next_cursor
                if cursor is None or pages > 20:
                    break
            with pytest.raises(MCPError, match="Invalid cursor"):
                await client.list_tools(cursor="bm90LWEtY3Vyc29y", cache_mode="bypass")
    assert seen == everything
    assert len(seen) == len(set(seen))
    assert {f"mcp__n__tool_{i}" for i in range(7)} <= set(seen)
    assert pages == -(-len(everything) // 4)


async def test_every_kind_of_tool_call_writes_a_tool_usage_row(
    gateway: Gateway, client: Client
) -> None:
    record = await named(gateway, "math:add")
    await client.call_tool("mcp__math__add", {"b": 1})
    await client.call_tool("mcp__math__add", {"b": "bad"})
    await client.call_tool("a__echo", {"text": "x"})
    await client.call_tool("a__fail", {})
    await client.call_tool(
        "pml_execute", {"intent": "echo", "code": 'return await mcp.b.echo(text="y")'}
    )
    await gateway.executor.flush()
    async with gateway.db.read() as conn:
        usage = SqlToolUsageRepository(conn)
        rows = {
            (row.server_id, row.tool_name): row
            for row in await usage.summary(SCOPE.org, SCOPE.project)
        }
        assert await usage.count(user_id="erwan") == 5
    capability = rows[(CAPABILITY_SERVER_ID, record.fqdn)]
    assert (capability.calls, capability.successes) == (2, 1)
    assert (rows[("a", "echo")].calls, rows[("a", "echo")].successes) == (1, 1)
    assert (rows[("a", "fail")].calls, rows[("a", "fail")].successes) == (1, 0)
    assert rows[("b", "echo")].calls == 1
    assert all(row.avg_latency_ms >= 0 for row in rows.values())
    whois = data_of(await client.call_tool("cap_whois", {"fqdn": record.fqdn}))
    assert whois["tool_usage"]["calls"] == 2
    assert whois["usage_count"] == 3  # the capture and the two calls
    assert whois["total_latency_ms"] > 1


async def insert_bulk(gateway: Gateway, count: int) -> None:
    """``count`` named capabilities written straight to the registry's tables."""
    now = utc_now()
    async with gateway.db.transaction() as conn:
        repo = SqlCapabilityRepository(conn)
        for index in range(count):
            fqdn = f"acme.webapp.bulk.tool_{index}.{index:04x}"
            record = replace(
                blank_record(SCOPE, fqdn, now),
                display_name=f"bulk:tool_{index}",
                named=True,
                tool_name=tool_name_for("bulk", f"tool_{index}"),
                code=f"return {index}",
                code_hash=f"{index:064x}",
                intent=f"bulk tool number {index}",
                parameters_schema=dict(ADD_SCHEMA),
            )
            await repo.insert_record(record)
    await gateway.watcher.project_changed("acme", "webapp")  # written behind the registry


async def test_five_thousand_capability_tools_list_in_one_response_with_a_large_budget(
    sqlite_url: str, pool: ClientPool
) -> None:
    # The listing's budget is the contract (SPEC §6.6): one large enough lists all 5 000.
    settings = gateway_settings(sqlite_url, expose_upstream=True)
    settings.gateway.capability_tools_budget = 1_000_000
    async with open_gateway(settings, pool=pool) as gateway:
        await insert_bulk(gateway, 5000)
        async with Client(gateway.server, mode="legacy") as client:
            with anyio.fail_after(30):
                listed = await client.list_tools(cache_mode="bypass")
            result = await client.call_tool("mcp__bulk__tool_4999", {"b": 1})
    names = [tool.name for tool in listed.tools]
    assert listed.next_cursor is None
    assert len([name for name in names if name.startswith("mcp__bulk__")]) == 5000
    assert len(names) == len(set(names))
    assert result.structured_content == {"result": 4999}


async def test_five_thousand_capability_tools_list_within_the_default_budget(
    gateway: Gateway,
) -> None:
    await insert_bulk(gateway, 5000)
    async with Client(gateway.server, mode="legacy") as client:
        with anyio.fail_after(30):
            listed = await client.list_tools(cache_mode="bypass")
        result = await client.call_tool("mcp__bulk__tool_4999", {"b": 1})
    names = [tool.name for tool in listed.tools]
    bulk = [name for name in names if name.startswith("mcp__bulk__")]
    assert 10 < len(bulk) < 200
    assert "mcp__bulk__tool_4999" not in bulk  # beyond the budget, and still callable:
    assert result.structured_content == {"result": 4999}
    assert len(names) == len(set(names))


async def test_hostile_arguments_to_a_capability_tool_are_refused_cleanly(
    gateway: Gateway, client: Client
) -> None:
    await named(gateway, "math:add")
    hostile: list[dict[str, Any]] = [
        {"b": "x" * 2_000_000},  # a huge wrong-typed value
        {"b": 1, "a": "'; DROP TABLE capability_records; --"},
        {"b": 1, "ключ\u202e": True, "a": None},
        {"b": float("1e308"), "a": {"nested": [[[[]]]]}},
    ]
    for arguments in hostile:
        error = error_of(await client.call_tool("mcp__math__add", arguments))
        assert error["code"] == "INVALID_ARGS", arguments
        assert len(error["message"]) < 5_000
    assert data_of(await client.call_tool("mcp__math__add", {"b": 2})) == {"sum": 3}
