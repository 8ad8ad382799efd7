"""The life of a capability end to end: a real stdio gateway with the real time server, a
real MCP client, and the real ``pml cap`` commands of a person's shell on the same
database. Archiving takes a tool away from the connected client (``tools/list_changed``),
frees its name and keeps its FQDN; a tagged version and the returned ``capabilityId`` are
names; a deprecated capability warns every caller.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from pathlib import Path

import anyio
import mcp_types
import pytest
from mcp import Client

from e2e.support import (
    Upstream,
    error_of,
    pml_cli,
    pml_stdio,
    result_json,
    sqlite_url,
    write_config,
)
from e2e.test_e2e_capability_tools import TOKYO, tool_names
from gateway.upstreams import ListChanged

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

PARIS = TOKYO.replace("Asia/Tokyo", "Europe/Paris")
# The same call written differently (another name): another capability.
PARIS_TOO = PARIS.replace("converted", "in_paris")


async def _cli(config: Path, *args: str) -> dict[str, object]:
    out = await anyio.to_thread.run_sync(partial(pml_cli, config, *args, "--json"))
    return json.loads(out)


async def _listed_after_notice(
    client: Client, heard: ListChanged, shows: Callable[[dict[str, mcp_types.Tool]], bool]
) -> dict[str, mcp_types.Tool]:
    """The client's tools once a ``tools/list_changed`` led to a list that ``shows`` the
    change (notifications of earlier changes may still be on their way)."""
    with anyio.fail_after(15):
        while True:
            await heard.wait(timeout_s=15)
            tools = await tool_names(client)
            if shows(tools):
                return tools


async def test_archive_tag_id_and_deprecation_through_a_real_client_and_the_cli(
    tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    config = write_config(
        tmp_path / "pml.toml",
        [servers["time"]],
        database_url=sqlite_url(tmp_path),
        expose_upstream=False,
    )
    heard = ListChanged()
    async with pml_stdio(
        config, tmp_path / "stdio.log", mode="legacy", message_handler=heard
    ) as gateway:
        client = gateway.client
        assert "mcp__clock__noon" not in await tool_names(client)
        created = result_json(
            await client.call_tool(
                "pml_execute", {"intent": "noon UTC in Tokyo", "code": TOKYO, "name": "clock:noon"}
            )
        )
        await heard.wait()
        assert "mcp__clock__noon" in await tool_names(client)

        # A new version with a tag, then a tag on the first one from the shell.
        updated = result_json(
            await client.call_tool(
                "pml_execute",
                {
                    "intent": "noon UTC in Paris",
                    "code": PARIS,
                    "name": "clock:noon",
                    "update": True,
                    "version_tag": "v2.0.0",
                },
            )
        )
        assert updated["status"] == "success"
        await _cli(config, "cap", "tag", "clock:noon@v1", "v1.2.0")
        old = result_json(
            await client.call_tool(
                "pml_execute", {"intent": "the first noon", "capability": "clock:noon@v1.2.0"}
            )
        )
        new = result_json(
            await client.call_tool(
                "pml_execute", {"intent": "the tagged noon", "capability": "clock:noon@v2.0.0"}
            )
        )
        assert (old["result"], new["result"]) == ({"at": "21:00"}, {"at": "13:00"})

        # The capabilityId is a name too.
        by_id = result_json(
            await client.call_tool(
                "pml_execute", {"intent": "by id", "capability": created["capabilityId"]}
            )
        )
        assert by_id["capabilityFqdn"] == created["capabilityFqdn"]
        looked = result_json(
            await client.call_tool("cap_lookup", {"name": created["capabilityId"]})
        )
        assert looked["fqdn"] == created["capabilityFqdn"]

        # Deprecated: the tool says so, and every answer warns.
        replacement = result_json(
            await client.call_tool(
                "pml_execute",
                {"intent": "noon in Paris", "code": PARIS_TOO, "name": "clock:paris"},
            )
        )
        assert replacement["status"] == "success"
        await _cli(config, "cap", "deprecate", "clock:noon", "--replaced-by", "clock:paris")
        # another process: seen by the gateway's poll, then told to the client
        tools = await _listed_after_notice(
            client,
            heard,
            lambda tools: (tools["mcp__clock__noon"].description or "").startswith("DEPRECATED: "),
        )
        assert "clock:paris" in (tools["mcp__clock__noon"].description or "")
        called = await client.call_tool("mcp__clock__noon", {})
        assert called.is_error is False
        assert any("Warning: Capability 'clock:noon' is deprecated" in getattr(block, "text", "")
                   for block in called.content)  # fmt: skip
        answered = result_json(
            await client.call_tool("pml_execute", {"intent": "noon", "capability": "clock:noon"})
        )
        assert answered["replacedBy"].startswith("local.default.")
        assert "clock:paris" in answered["deprecated"]

        # Archived from the shell: the tool leaves the client's list, the name is free, the
        # FQDN still answers for history.
        archived = await _cli(config, "cap", "archive", "clock:noon")
        assert archived["archived"] is True
        await _listed_after_notice(client, heard, lambda tools: "mcp__clock__noon" not in tools)
        gone = await client.call_tool("pml_execute", {"intent": "noon", "capability": "clock:noon"})
        assert error_of(gone)["code"] == "NOT_FOUND"
        whois = result_json(
            await client.call_tool("cap_whois", {"fqdn": created["capabilityFqdn"]})
        )
        assert whois["archived"] is True
        assert whois["version_count"] == 2
        listed = result_json(await client.call_tool("cap_list", {"archived": True}))
        assert [item["display_name"] for item in listed["items"]] == ["clock:noon"]
        again = result_json(
            await client.call_tool(
                "pml_execute",
                {"intent": "noon in Tokyo, again", "code": TOKYO, "name": "clock:noon"},
            )
        )
        assert again["created"] is True
        assert again["capabilityFqdn"] != created["capabilityFqdn"]
