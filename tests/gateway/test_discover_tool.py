"""``pml_discover`` through a real SDK client: results, filters, scopes and bad input."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client

from gateway.upstreams import data_of, error_of
from pml.gateway.server import Gateway
from pml.registry.models import CapabilityDraft
from pml.registry.scope import Scope

pytestmark = pytest.mark.anyio

SCOPE = Scope("acme", "webapp", "erwan")  # the test gateway's caller


async def discover(client: Client, **arguments: Any) -> list[dict[str, Any]]:
    return data_of(await client.call_tool("pml_discover", arguments))["results"]


async def test_upstream_tools_come_with_what_is_needed_to_call_them(client: Client) -> None:
    results = await discover(client, intent="echo my arguments back", kind="tool", limit=2)
    assert {r["name"] for r in results} == {"a:echo", "b:echo"}
    first = results[0]
    assert set(first) == {
        "kind",
        "name",
        "callName",
        "description",
        "inputSchema",
        "score",
        "routing",
    }
    assert first["callName"] in ("mcp.a.echo", "mcp.b.echo")
    assert first["inputSchema"]["properties"] == {"text": {"type": "string"}}
    assert first["routing"] == "local"
    assert 0 < first["score"] <= 1


async def test_capabilities_are_found_and_callable_by_their_tool_name(
    client: Client, gateway: Gateway
) -> None:
    draft = CapabilityDraft(
        code="return 'sent'", intent="post the daily standup summary to the team chat",
        name="chat:post_standup",
    )  # fmt: skip
    await gateway.registry.capture(SCOPE, draft, latency_ms=1.0)
    results = await discover(client, intent="share today's standup notes with the team")
    assert results[0]["kind"] == "capability"
    assert results[0]["name"] == "chat:post_standup"
    assert results[0]["toolName"] == "mcp__chat__post_standup"
    called = await client.call_tool(results[0]["toolName"], {})
    assert not called.is_error
    assert called.structured_content == {"result": "sent"}
    only_tools = await discover(client, intent="post the daily standup summary", kind="tool")
    assert all(r["kind"] == "tool" for r in only_tools)


async def test_limit_and_min_score_bound_the_results(client: Client) -> None:
    assert len(await discover(client, intent="echo", limit=1)) == 1
    assert len(await discover(client, intent="echo")) == 5  # the default, with 6 tools here
    assert await discover(client, intent="echo", min_score=1.0) == []
    everything = await discover(client, intent="echo", limit=50)
    assert len(everything) == 6
    assert [r["score"] for r in everything] == sorted(
        (r["score"] for r in everything), reverse=True
    )


async def test_another_tenants_capabilities_are_never_found(
    client: Client, gateway: Gateway
) -> None:
    other = Scope("globex", "webapp", "erwan")
    draft = CapabilityDraft(code="return 1", intent="wire the payroll to the bank", name="pay:run")
    await gateway.registry.capture(other, draft, latency_ms=1.0)
    results = await discover(client, intent="wire the payroll to the bank", limit=50)
    assert all(r["kind"] == "tool" for r in results)


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({}, "intent"),
        ({"intent": ""}, "intent"),
        ({"intent": "   "}, "intent"),
        ({"intent": 42}, "intent"),
        ({"intent": ["read"]}, "intent"),
        ({"intent": "x" * 10_001}, "intent"),
        ({"intent": "read", "limit": 0}, "limit"),
        ({"intent": "read", "limit": 51}, "limit"),
        ({"intent": "read", "limit": "five"}, "limit"),
        ({"intent": "read", "kind": "server"}, "kind"),
        ({"intent": "read", "min_score": 2}, "min_score"),
        ({"intent": "read", "min_score": -0.1}, "min_score"),
        ({"intent": "read", "unknown": True}, "unknown"),
    ],
)
async def test_bad_arguments_are_refused_with_the_field_named(
    client: Client, arguments: dict[str, Any], field: str
) -> None:
    error = error_of(await client.call_tool("pml_discover", arguments))
    assert error["code"] == "INVALID_INPUT"
    assert field in error["message"]


@pytest.mark.parametrize(
    "intent",
    ["'; DROP TABLE capability_records; --", "📄 ‮ read", "\x00", "{{7*7}} ${jndi:ldap://x}"],
)
async def test_hostile_intents_are_just_searched(client: Client, intent: str) -> None:
    results = await discover(client, intent=intent, limit=50)
    assert all(r["kind"] == "tool" for r in results)
