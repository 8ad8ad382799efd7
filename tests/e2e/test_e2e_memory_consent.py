"""Memory writes from ``pml_execute`` snippets (SPEC §13): the real memory server behind
``pml serve --stdio``, a real MCP client. What a write would store decides who consents:
nobody for a preference, a person for personal data, and a credential is never stored.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from e2e.support import (
    Upstream,
    error_of,
    pml_cli,
    pml_stdio,
    result_json,
    sqlite_url,
    write_config,
)

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

WRITE = """
await mcp.memory.create_entities(entities=[
    {"name": args["name"], "entityType": "fact", "observations": [args["fact"]]}
])
return "stored"
"""
DELETE = """
await mcp.memory.delete_entities(entityNames=[args["name"]])
return "deleted"
"""


def _config(tmp_path: Path, servers: dict[str, Upstream], **extra: Any) -> Path:
    return write_config(
        tmp_path / "pml.toml",
        [servers["memory"]],
        database_url=sqlite_url(tmp_path),
        extra=extra,
    )


def _graph(tmp_path: Path) -> str:
    path = tmp_path / "memory.jsonl"
    return path.read_text() if path.exists() else ""


def _memory_events(config: Path) -> list[dict[str, Any]]:
    lines = pml_cli(config, "audit", "tail", "--json", "--event", "POSTHOOK_MEMORY").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


async def test_a_preference_is_stored_without_asking_and_audited(
    tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    config = _config(tmp_path, servers)
    arguments = {"name": "units", "fact": "the user prefers metric units"}
    async with pml_stdio(config, tmp_path / "pml.log") as gw:
        result = await gw.client.call_tool(
            "pml_execute",
            {"intent": "remember my preferred units", "code": WRITE, "args": arguments},
        )
    answer = result_json(result)
    assert not result.is_error, answer
    assert answer["result"] == "stored"
    assert "metric units" in _graph(tmp_path)
    [event] = _memory_events(config)
    assert event["details"]["outcome"] == "applied"
    assert event["details"]["sensitivity"] == "low"
    assert event["decided_by"] == "memory:low-sensitivity"


@pytest.mark.parametrize(
    "fact",
    [
        "my card number is 4111 1111 1111 1111",
        "I was diagnosed with type 2 diabetes last year",
        "my sister's phone number is +33 6 12 34 56 78",
    ],
)
async def test_personal_data_waits_for_a_person_even_where_a_rule_allows_memory(
    tmp_path: Path, servers: dict[str, Upstream], fact: str
) -> None:
    config = _config(tmp_path, servers, permissions={"allow": ["memory:*"]})
    arguments = {"name": "private", "fact": fact}
    async with pml_stdio(config, tmp_path / "pml.log") as gw:
        result = await gw.client.call_tool(
            "pml_execute", {"intent": "remember this fact", "code": WRITE, "args": arguments}
        )
    answer = result_json(result)
    assert answer["status"] == "approval_required", answer
    assert answer["approvals"][0]["tool"] == "memory:create_entities"
    assert answer["approvals"][0]["rule"].startswith("memory:sensitive (")  # says why it asks
    assert fact not in _graph(tmp_path)


async def test_a_credential_is_refused_and_never_reaches_the_memory_server_or_the_audit(
    tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    secret = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    config = _config(tmp_path, servers, permissions={"allow": ["memory:*"]})
    arguments = {"name": "token", "fact": f"the deploy token is {secret}"}
    async with pml_stdio(config, tmp_path / "pml.log") as gw:
        result = await gw.client.call_tool(
            "pml_execute", {"intent": "remember the token", "code": WRITE, "args": arguments}
        )
    assert result.is_error is True
    error = error_of(result)
    assert error["code"] == "PERMISSION_DENIED"
    assert "memory:credential" in error["message"]
    assert secret not in _graph(tmp_path)
    events = _memory_events(config)
    assert [e["details"]["outcome"] for e in events] == ["refused"]
    dumped = pml_cli(config, "audit", "tail", "--json", "--limit", "1000")
    assert secret not in dumped


async def test_forgetting_asks_a_person_even_for_a_harmless_fact(
    tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    config = _config(tmp_path, servers)
    async with pml_stdio(config, tmp_path / "pml.log") as gw:
        stored = await gw.client.call_tool(
            "pml_execute",
            {
                "intent": "remember my preferred units",
                "code": WRITE,
                "args": {"name": "units", "fact": "metric"},
            },
        )
        assert not stored.is_error
        forget = await gw.client.call_tool(
            "pml_execute",
            {"intent": "forget my preferred units", "code": DELETE, "args": {"name": "units"}},
        )
    answer = result_json(forget)
    assert answer["status"] == "approval_required", answer
    assert "units" in _graph(tmp_path)


async def test_auto_store_none_asks_for_every_memory_write(
    tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    config = _config(tmp_path, servers, memory={"auto_store": "none"})
    async with pml_stdio(config, tmp_path / "pml.log") as gw:
        result = await gw.client.call_tool(
            "pml_execute",
            {
                "intent": "remember my preferred units",
                "code": WRITE,
                "args": {"name": "units", "fact": "metric units"},
            },
        )
    assert result_json(result)["status"] == "approval_required"
    assert "metric" not in _graph(tmp_path)
