"""PML's own tools are terse in ``tools/list`` yet teach their use, and stay as strict.

The advertised schemas leave out rules not worth an agent's tokens; the pydantic models
behind them still check every call (SPEC §3, §5).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from mcp import Client

from gateway.upstreams import error_of
from pml.errors import InvalidInput
from pml.gateway.schemas import (
    STATIC_TOOLS,
    STATIC_WIRE,
    CurateParams,
    DiscoverParams,
    ExecuteParams,
    json_schema,
)
from pml.registry.tools import ListParams, parse_params

pytestmark = pytest.mark.anyio

READ_ONLY = {"pml_discover", "cap_list", "cap_lookup", "cap_whois", "cap_history"}


def test_all_eight_tools_are_listed_in_the_spec_order() -> None:
    assert list(STATIC_TOOLS) == [
        "pml_discover",
        "pml_execute",
        "cap_list",
        "cap_lookup",
        "cap_whois",
        "cap_rename",
        "cap_history",
        "cap_curate",
    ]
    assert [json.loads(text)["name"] for text in STATIC_WIRE] == list(STATIC_TOOLS)


def test_pml_execute_teaches_snippets_capture_and_calls_by_name() -> None:
    description = STATIC_TOOLS["pml_execute"].description or ""
    for taught in ("await mcp.<server>.<tool>(", "`args`", "`return`", "saved", "`capability`"):
        assert taught in description, taught
    discover = STATIC_TOOLS["pml_discover"].description or ""
    assert "callName" in discover
    assert "inputSchema" in discover


def test_no_tool_repeats_itself_in_a_title_or_advertises_unchecked_noise() -> None:
    for text in STATIC_WIRE:
        tool: dict[str, Any] = json.loads(text)
        assert set(tool) <= {"name", "description", "inputSchema", "annotations"}
        assert tool["inputSchema"]["type"] == "object"
        flat = json.dumps(tool["inputSchema"])
        for noise in ('"title"', "$ref", "$defs", "additionalProperties", "\\\\x00"):
            assert noise not in flat, (tool["name"], noise)
        expected = {"readOnlyHint": True} if tool["name"] in READ_ONLY else None
        assert tool.get("annotations") == expected, tool["name"]


def test_meaningful_bounds_and_defaults_are_still_advertised() -> None:
    discover = json_schema(DiscoverParams)["properties"]
    assert discover["limit"] == {"default": 5, "maximum": 50, "minimum": 1, "type": "integer"}
    assert discover["min_score"] == {"maximum": 1, "minimum": 0, "type": "number"}
    curate = json_schema(CurateParams)["properties"]
    assert curate["filter"]["properties"]["unnamed_only"]["default"] is True
    assert curate["renames"]["maxItems"] == 500
    listing = json_schema(ListParams)["properties"]
    assert listing["tags"]["maxItems"] == 64
    assert "default" not in listing["offset"]  # 0 goes without saying
    assert json_schema(ExecuteParams)["properties"]["version_tag"] == {
        "maxLength": 64,
        "type": "string",
    }


HOSTILE_EXECUTE: list[dict[str, Any]] = [
    {"intent": "x", "bogus": 1},  # an unknown field: closed objects, not advertised
    {"intent": "nul \x00 inside"},  # the no-NUL rule of stored text
    {"intent": "x" * 10_001},  # the shared text bound
    {"intent": ""},
    {"intent": "   "},
    {"intent": "x", "options": {"timeout_ms": 5, "extra": True}},
    {"intent": "x", "continue_workflow": {"workflow_id": "w", "approved": True, "x": 1}},
    {"intent": "x", "name": "bad\x00name"},
    {"intent": 7},
    {"intent": "x", "update": "yes"},
]
HOSTILE_LIST: list[dict[str, Any]] = [
    {"pattern": "fs:*\x1b[31m"},  # control characters in a filter
    {"pattern": "a" * 1_001},
    {"created_by": "\x00"},
    {"tags": ["ok"] * 65},
    {"tags": ["line\nbreak"]},
    {"offset": 10_000_001},
    {"limit": 0},
    {"archived": 1},
    {"sort_by": "'; DROP TABLE capability_records; --"},
    {"unknown": True},
]


@pytest.mark.parametrize("arguments", HOSTILE_EXECUTE)
def test_execute_arguments_are_checked_as_strictly_as_before(arguments: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput):
        parse_params(ExecuteParams, arguments)


@pytest.mark.parametrize("arguments", HOSTILE_LIST)
def test_cap_list_arguments_are_checked_as_strictly_as_before(arguments: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput):
        parse_params(ListParams, arguments)


def test_valid_unicode_and_injection_text_is_accepted() -> None:
    params = parse_params(
        ExecuteParams, {"intent": "lire « fichier » 🙂 '; DROP TABLE x; --", "code": "return 1"}
    )
    assert params.intent.startswith("lire")
    assert parse_params(ListParams, {"pattern": "fs:*é"}).pattern == "fs:*é"


async def test_the_gateway_refuses_what_the_schema_no_longer_advertises(client: Client) -> None:
    cases: list[tuple[str, dict[str, Any]]] = [
        ("cap_list", {"pattern": "a\x00b"}),
        ("cap_list", {"nope": 1}),
        ("pml_discover", {"intent": "x", "extra": 1}),
        ("cap_lookup", {"name": "x" * 10_001}),
        ("cap_curate", {"mode": "apply", "renames": [{"id": "a", "name": "b", "x": 1}]}),
    ]
    for name, arguments in cases:
        error = error_of(await client.call_tool(name, arguments))
        assert error["code"] == "INVALID_INPUT", (name, arguments)
    ran = await client.call_tool("pml_execute", {"intent": "x", "surprise": 1})
    assert ran.is_error is True
    assert ran.structured_content is not None
    assert ran.structured_content["error"]["code"] == "INVALID_INPUT"
