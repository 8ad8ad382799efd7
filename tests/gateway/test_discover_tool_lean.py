"""Lean ``pml_discover`` answers through a real SDK client: long, huge and unicode upstream
descriptions come back short, schemas without ``$schema``, and every result is still called
with nothing but what it carries (``callName`` + ``inputSchema``, or ``toolName``)."""

from __future__ import annotations

import json
from typing import Any

import mcp_types
import pytest
from mcp import Client

from gateway.upstreams import Upstream, data_of
from pml.discovery.lean import CUT_MARK, DESCRIPTION_CHARS
from pml.gateway.server import Gateway
from pml.registry.models import CapabilityDraft
from pml.registry.scope import Scope

pytestmark = pytest.mark.anyio

SCOPE = Scope("acme", "webapp", "erwan")
DRAFT_07 = "http://json-schema.org/draft-07/schema#"
READ = (
    "Read the complete contents of a file from the file system as text. Handles various "
    "text encodings and provides detailed error messages if the file cannot be read. Only "
    "works within allowed directories."
)


def schema(**properties: Any) -> dict[str, Any]:
    return {
        "$schema": DRAFT_07,
        "$id": "urn:example:args",
        "title": "Arguments",
        "type": "object",
        "properties": properties,
        "required": sorted(properties),
    }


TOOLS = [
    mcp_types.Tool(
        name="read_text_file",
        description=READ,
        input_schema=schema(path={"type": "string", "description": "The file to read"}),
    ),
    mcp_types.Tool(
        name="get-sum",  # not an identifier: called as mcp.docs["get-sum"]
        description="Add two numbers " + "and explain every step of the addition " * 3_000,
        input_schema=schema(a={"type": "number"}, b={"type": "integer"}),
    ),
    mcp_types.Tool(
        name="lire_fichier",
        description="Lit le contenu complet d'un fichier texte, ça gère les accents " * 10,
        input_schema=schema(chemin={"type": "string"}, mode={"enum": ["r", "rb"]}),
    ),
    mcp_types.Tool(
        name="flag_file",
        description="Marks a file as read",
        input_schema=schema(path={"type": "string"}, on={"type": "boolean"}),
    ),
]


@pytest.fixture
def upstreams() -> dict[str, Upstream]:
    return {"docs": Upstream("docs", TOOLS)}


async def discover(client: Client, **arguments: Any) -> list[dict[str, Any]]:
    return data_of(await client.call_tool("pml_discover", arguments))["results"]


def example(spec: dict[str, Any]) -> object:
    """A value that fits a property's schema."""
    if "enum" in spec:
        return spec["enum"][0]
    return {"number": 1.5, "integer": 2, "boolean": True, "string": "notes.txt"}[spec["type"]]


async def test_descriptions_come_back_short_and_schemas_without_their_noise(
    client: Client,
) -> None:
    results = await discover(client, intent="read a text file", limit=10)
    assert {r["name"] for r in results} == {f"docs:{t.name}" for t in TOOLS}
    by_name = {r["name"]: r for r in results}
    assert by_name["docs:read_text_file"]["description"] == READ.split(". ")[0] + "."
    assert by_name["docs:flag_file"]["description"] == "Marks a file as read"
    for name in ("docs:get-sum", "docs:lire_fichier"):
        description = by_name[name]["description"]
        assert description.endswith(CUT_MARK)
        assert len(description) <= DESCRIPTION_CHARS
        tool = next(t for t in TOOLS if f"docs:{t.name}" == name)
        kept = description.removesuffix(CUT_MARK)
        assert (tool.description or "").startswith(kept)
        assert (tool.description or "")[len(kept)] == " "  # a whole word, never part of one
    for result in results:
        assert not {"$schema", "$id", "title"} & set(result["inputSchema"])
        assert result["score"] == round(result["score"], 3)
    assert by_name["docs:lire_fichier"]["inputSchema"]["properties"]["mode"] == {
        "enum": ["r", "rb"]
    }
    answer = json.dumps({"results": results}, ensure_ascii=False)
    assert len(answer) < 3_000  # a 120 KB description is not sent


async def test_every_result_is_called_with_only_what_it_carries(
    client: Client, gateway: Gateway, upstreams: dict[str, Upstream]
) -> None:
    draft = CapabilityDraft(
        code="return 'flagged'", intent="flag the notes file as read", name="notes:flag_read"
    )
    await gateway.registry.capture(SCOPE, draft, latency_ms=1.0)
    results = await discover(client, intent="mark a file as read", limit=10)
    assert {r["kind"] for r in results} == {"tool", "capability"}
    for result in results:
        if result["kind"] == "capability":
            called = await client.call_tool(result["toolName"], {})
            assert not called.is_error, called
            assert called.structured_content == {"result": "flagged"}
            continue
        properties = result["inputSchema"]["properties"]
        arguments = {name: example(properties[name]) for name in result["inputSchema"]["required"]}
        code = f"return await {result['callName']}(**{arguments!r})"
        answer = data_of(await client.call_tool("pml_execute", {"intent": "try", "code": code}))
        assert answer["result"]["tool"] == result["name"].split(":", 1)[1], answer
        assert answer["result"]["args"] == arguments
    called_tools = {name for name, _ in upstreams["docs"].calls}
    assert called_tools == {t.name for t in TOOLS}
