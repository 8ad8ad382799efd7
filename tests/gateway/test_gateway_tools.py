"""The gateway's MCP surface (SPEC §3), driven through a real SDK client in-process."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from mcp import Client

from gateway.upstreams import MODES, Upstream, data_of, error_of, gateway_settings, tool
from pml.gateway.server import Gateway, open_gateway
from pml.gateway.tools import GatewayTools
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft
from pml.registry.tools import CapTools
from pml.upstream.pool import ClientPool

pytestmark = pytest.mark.anyio

OWN_TOOLS = [
    "pml_discover",
    "pml_execute",
    "cap_list",
    "cap_lookup",
    "cap_whois",
    "cap_rename",
    "cap_history",
    "cap_curate",
]
PASS_THROUGH = ["a__echo", "a__fail", "a__mixed", "b__echo", "b__fail", "b__mixed"]


# -- the tool list ---------------------------------------------------------------------------


async def test_lists_exactly_the_own_tools_then_the_pass_through_ones(client: Client) -> None:
    names = [t.name for t in (await client.list_tools()).tools]
    assert names == OWN_TOOLS + PASS_THROUGH


async def test_without_expose_upstream_only_the_own_tools_are_listed(
    closed_gateway: Gateway,
) -> None:
    for mode in MODES:
        async with Client(closed_gateway.server, mode=mode) as connected:
            assert [t.name for t in (await connected.list_tools()).tools] == OWN_TOOLS


async def test_every_listed_name_is_valid_for_the_strictest_clients(client: Client) -> None:
    for listed in (await client.list_tools()).tools:
        assert re.fullmatch(r"[A-Za-z0-9_-]{1,64}", listed.name)
        assert listed.description
        assert listed.input_schema["type"] == "object"


async def test_both_protocol_generations_are_served(gateway: Gateway) -> None:
    versions: list[str] = []
    for mode in MODES:
        async with Client(gateway.server, mode=mode) as connected:
            versions.append(connected.protocol_version)
    assert versions == ["2025-11-25", "2026-07-28"]


async def test_the_server_declares_tools_list_changed(client: Client) -> None:
    assert client.server_capabilities.tools is not None
    assert client.server_capabilities.tools.list_changed is True


async def test_pass_through_tools_keep_the_upstream_definition_under_the_new_name(
    client: Client,
) -> None:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    echo = tools["a__echo"]
    assert echo.description == "Echo the arguments"
    assert echo.input_schema == {"type": "object", "properties": {"text": {"type": "string"}}}


async def test_input_schemas_follow_the_spec(client: Client) -> None:
    schemas = {t.name: t.input_schema for t in (await client.list_tools()).tools}
    execute = schemas["pml_execute"]
    assert execute["required"] == ["intent"]
    assert set(execute["properties"]) == {
        "intent",
        "code",
        "capability",
        "args",
        "name",
        "update",
        "version_tag",
        "routing",
        "options",
        "continue_workflow",
    }
    assert execute["properties"]["routing"]["enum"] == ["local", "cloud"]
    assert set(execute["properties"]["options"]["properties"]) == {"timeout_ms"}
    workflow = execute["properties"]["continue_workflow"]
    assert workflow["required"] == ["workflow_id", "approved"]
    discover = schemas["pml_discover"]["properties"]
    assert (discover["limit"]["minimum"], discover["limit"]["maximum"]) == (1, 50)
    assert discover["limit"]["default"] == 5
    assert discover["kind"]["enum"] == ["tool", "capability", "all"]
    assert "min_score" in discover
    curate = schemas["cap_curate"]["properties"]
    assert curate["mode"]["enum"] == ["suggest", "auto", "apply"]
    assert set(curate["filter"]["properties"]) == {"unnamed_only", "min_usage"}
    assert curate["renames"]["items"]["required"] == ["id", "name"]
    assert schemas["cap_list"]["properties"]["limit"]["maximum"] == 500
    assert schemas["cap_lookup"]["required"] == ["name"]
    assert schemas["cap_whois"]["required"] == ["fqdn"]
    for schema in schemas.values():  # self-contained: no $ref a client would have to follow
        assert "$ref" not in json.dumps(schema)
        assert "$defs" not in schema


async def test_upstream_names_that_are_not_valid_tool_names_are_skipped_and_logged_once(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    odd = Upstream("odd", [tool("ok"), tool("has.dot"), tool("x" * 70), tool("spa ce")])
    pool = ClientPool({"odd": odd.server})
    settings = gateway_settings(sqlite_url, expose_upstream=True)
    async with open_gateway(settings, pool=pool) as gw, Client(gw.server) as connected:
        for _ in range(2):
            names = [t.name for t in (await connected.list_tools()).tools]
            assert names == [*OWN_TOOLS, "odd__ok"]
        result = await connected.call_tool("odd__has.dot", {})
        assert error_of(result)["code"] == "NOT_FOUND"
    skipped = [r for r in caplog.records if "not exposed" in r.getMessage()]
    assert len(skipped) == 3


# -- the cap_* tools -------------------------------------------------------------------------


async def test_cap_list_on_an_empty_registry_returns_no_items(client: Client) -> None:
    result = await client.call_tool("cap_list", {})
    assert data_of(result) == {"items": [], "total": 0}


async def test_the_seed_spelling_cap_colon_list_is_accepted(client: Client) -> None:
    assert data_of(await client.call_tool("cap:list", {})) == {"items": [], "total": 0}


async def test_cap_lookup_finds_the_seeded_filesystem_server(client: Client) -> None:
    found = data_of(await client.call_tool("cap_lookup", {"name": "mcp:filesystem"}))
    assert found["display_name"] == "mcp:filesystem"
    assert found["type"] == "mcp-server"
    assert found["fqdn"].startswith("pml.std.mcp.filesystem.")


async def test_cap_tools_act_in_the_configured_scope_over_stdio_and_in_process(
    gateway: Gateway, client: Client
) -> None:
    await gateway.registry.capture(
        gateway.default_scope, CapabilityDraft(code="return 1", name="one"), latency_ms=1.0
    )
    await gateway.registry.capture(
        Scope("other", "proj", "eve"), CapabilityDraft(code="return 2", name="two"), latency_ms=1
    )
    listed = data_of(await client.call_tool("cap_list", {}))
    assert [item["display_name"] for item in listed["items"]] == ["one"]
    assert error_of(await client.call_tool("cap_lookup", {"name": "two"}))["code"] == "NOT_FOUND"


async def test_an_unknown_capability_is_not_found(client: Client) -> None:
    error = error_of(await client.call_tool("cap_lookup", {"name": "nope"}))
    assert error["code"] == "NOT_FOUND"
    assert "nope" in error["message"]


@pytest.mark.parametrize(
    ("name", "arguments", "field"),
    [
        ("cap_list", {"limit": "10"}, "limit"),
        ("cap_list", {"limit": 501}, "limit"),
        ("cap_list", {"pattern": 5}, "pattern"),
        ("cap_list", {"bogus": True}, "bogus"),
        ("cap_lookup", {}, "name"),
        ("cap_lookup", {"name": ["x"]}, "name"),
        ("cap_whois", {"fqdn": None}, "fqdn"),
    ],
)
async def test_wrong_argument_types_are_invalid_input_naming_the_field(
    client: Client, name: str, arguments: dict[str, Any], field: str
) -> None:
    error = error_of(await client.call_tool(name, arguments))
    assert error["code"] == "INVALID_INPUT"
    assert field in error["message"]


SCOPE = Scope("acme", "webapp", "erwan")  # the test gateway's caller


# -- discovery and curation ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "arguments", "key"),
    [
        ("pml_discover", {"intent": "echo the arguments", "limit": 3, "kind": "tool"}, "results"),
        ("cap_curate", {"mode": "suggest"}, "suggestions"),
        ("cap:curate", {}, "suggestions"),
    ],
)
async def test_discover_and_curate_answer_under_every_spelling(
    client: Client, name: str, arguments: dict[str, Any], key: str
) -> None:
    assert isinstance(data_of(await client.call_tool(name, arguments))[key], list)


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("pml_execute", {"intent": "x", "code": "return 1"}),
        ("pml_discover", {"intent": "read a file"}),
        ("cap_curate", {"mode": "suggest"}),
    ],
)
async def test_a_tool_surface_built_without_a_service_answers_not_available(
    gateway: Gateway, name: str, arguments: dict[str, Any]
) -> None:
    bare = GatewayTools(CapTools(gateway.registry), gateway.pool, expose_upstream=False)
    result = await bare.call_tool(SCOPE, name, arguments)
    error = error_of(result)
    assert error["code"] == "NOT_AVAILABLE"
    assert error["message"] == f"{name} is not available in this gateway"
    malformed = error_of(await bare.call_tool(SCOPE, name, {"intent": 42}))
    assert malformed["code"] == "INVALID_INPUT"  # a malformed call is told so first


@pytest.mark.parametrize("name", ["pml_execute", "pml:execute"])
async def test_pml_execute_runs_under_both_spellings(client: Client, name: str) -> None:
    result = await client.call_tool(name, {"intent": "add", "code": "return 1 + 1"})
    assert not result.is_error
    assert result.structured_content is not None
    assert result.structured_content["result"] == 2


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("pml_discover", {"intent": "x", "limit": 51}),
        ("pml_discover", {"intent": "x", "kind": "everything"}),
        ("cap_curate", {"mode": "apply"}),
    ],
)
async def test_malformed_discover_and_curate_calls_are_invalid_input(
    client: Client, name: str, arguments: dict[str, Any]
) -> None:
    assert error_of(await client.call_tool(name, arguments))["code"] == "INVALID_INPUT"
