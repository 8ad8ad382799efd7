"""Capability tools end to end: real gateways (stdio and HTTP processes), real servers, clients.

Two processes share one SQLite file (a stdio gateway and an HTTP one), and two HTTP
replicas share one PostgreSQL database; a rename through either reaches the other's
clients as ``tools/list_changed``, and the renamed capability is an ordinary tool.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client

from e2e.support import (
    Upstream,
    create_key,
    http_client,
    pml_http,
    pml_stdio,
    result_json,
    sqlite_url,
    write_config,
)
from gateway.upstreams import ListChanged

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

# A read through the real filesystem server: the literal path becomes a parameter.
READ_NOTE = 'text = await mcp.filesystem.read_text_file(path="{path}")\nreturn {{"text": text}}'
TOKYO = (
    "converted = await mcp.time.convert_time(\n"
    '    source_timezone="UTC", time="12:00", target_timezone="Asia/Tokyo"\n'
    ")\n"
    'return {"at": converted["target"]["datetime"][11:16]}'
)


async def tool_names(client: Client) -> dict[str, mcp_types.Tool]:
    listed = await client.list_tools(cache_mode="bypass")
    return {tool.name: tool for tool in listed.tools}


async def test_a_capability_named_over_http_is_a_tool_over_stdio_and_http(
    tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    files = tmp_path / "files"
    # One database, a config file per process (the harness finds processes by config path).
    config, stdio_config = (
        write_config(
            tmp_path / name,
            [servers["time"], servers["filesystem"]],
            database_url=sqlite_url(tmp_path),
            expose_upstream=False,
        )
        for name in ("pml.toml", "stdio.toml")
    )
    key = create_key(config, "local", "default", "e2e")["key"]
    other_key = create_key(config, "globex", "site", "gina")["key"]
    heard = {"stdio": ListChanged(), "http": ListChanged(), "other": ListChanged()}
    with pml_http(config, tmp_path / "http.log") as served:
        async with (
            pml_stdio(
                stdio_config, tmp_path / "stdio.log", mode="legacy", message_handler=heard["stdio"]
            ) as stdio,
            http_client(served.mcp_url, key, mode="legacy", message_handler=heard["http"]) as http,
            http_client(
                served.mcp_url, other_key, mode="legacy", message_handler=heard["other"]
            ) as other,
        ):
            before = {name for name in await tool_names(stdio.client)}
            await tool_names(http)
            await tool_names(other)
            learned = result_json(
                await stdio.client.call_tool(
                    "pml_execute",
                    {"intent": "noon UTC in Tokyo", "code": TOKYO},
                )
            )
            assert learned["created"] is True
            renamed = result_json(
                await http.call_tool(
                    "cap_rename", {"name": learned["capabilityName"], "new_name": "clock:tokyo"}
                )
            )
            assert renamed["tool_name"] == "mcp__clock__tokyo"
            await heard["http"].wait()
            await heard["stdio"].wait(timeout_s=10)  # another process: seen by its poll
            over_stdio = await tool_names(stdio.client)
            over_http = await tool_names(http)
            assert set(over_stdio) - before == {"mcp__clock__tokyo"}
            assert "mcp__clock__tokyo" in over_http
            schema = over_stdio["mcp__clock__tokyo"].input_schema
            assert schema["properties"]["target_timezone"]["default"] == "Asia/Tokyo"
            paris = await stdio.client.call_tool(
                "mcp__clock__tokyo", {"target_timezone": "Europe/Paris"}
            )
            tokyo = await http.call_tool("mcp__clock__tokyo", {})
            assert (paris.is_error, paris.structured_content) == (False, {"at": "13:00"})
            assert (tokyo.is_error, tokyo.structured_content) == (False, {"at": "21:00"})
            bad = await http.call_tool("mcp__clock__tokyo", {"target_timezone": 7})
            assert bad.is_error
            assert result_json(bad)["error"]["code"] == "INVALID_ARGS"

            # Rename again, over stdio: the old tool name leaves both lists, the old display
            # name still resolves (an alias), and the other tenant saw nothing of it all.
            await stdio.client.call_tool(
                "cap_rename", {"name": "clock:tokyo", "new_name": "clock:noon"}
            )
            await heard["stdio"].wait()
            await heard["http"].wait(timeout_s=10)
            for client in (stdio.client, http):
                names = await tool_names(client)
                assert "mcp__clock__noon" in names
                assert "mcp__clock__tokyo" not in names
            by_alias = result_json(
                await http.call_tool(
                    "pml_execute", {"intent": "noon in Tokyo", "capability": "clock:tokyo"}
                )
            )
            assert by_alias["deprecatedAlias"]["currentName"] == "clock:noon"
            assert not any(name.startswith("mcp__clock") for name in await tool_names(other))
            stolen = await other.call_tool("mcp__clock__noon", {})
            assert stolen.is_error
            note = result_json(
                await stdio.client.call_tool(
                    "pml_execute",
                    {"intent": "read the note", "code": READ_NOTE.format(path=files / "note.txt")},
                )
            )
            assert note["result"] == {"text": {"content": "PML end-to-end note\n"}}
    assert heard["other"].count == 0
    # Both gateways stopped cleanly: every call they counted is in tool_usage.
    with sqlite3.connect(tmp_path / "pml.db") as conn:
        rows = dict(
            conn.execute(
                "SELECT server_id, count(*) FROM tool_usage WHERE org = 'local' GROUP BY server_id"
            ).fetchall()
        )
        capability_calls = conn.execute(
            "SELECT count(*), sum(success) FROM tool_usage WHERE server_id = 'pml-capabilities'"
        ).fetchone()
        usage = conn.execute(
            "SELECT usage_count, success_count FROM capability_records "
            "WHERE display_name = 'clock:noon'"
        ).fetchone()
    assert capability_calls == (4, 3)  # two tool calls, one refused, one call by alias
    assert rows["time"] == 4  # the snippet, then the three capability runs that ran
    assert rows["filesystem"] == 1
    assert usage == (5, 4)  # the run that created it, then the four calls above


@pytest.mark.postgres
async def test_two_http_replicas_on_one_postgresql_tell_each_other_within_a_second(
    tmp_path: Path, servers: dict[str, Upstream], postgres_url: str
) -> None:
    config = write_config(
        tmp_path / "pml.toml", [servers["time"]], database_url=postgres_url, expose_upstream=False
    )
    key = create_key(config, "acme", "web", "ana")["key"]
    heard = {"one": ListChanged(), "two": ListChanged()}
    with (
        pml_http(config, tmp_path / "one.log") as one,
        pml_http(config, tmp_path / "two.log") as two,
    ):
        async with (
            http_client(one.mcp_url, key, mode="legacy", message_handler=heard["one"]) as first,
            http_client(two.mcp_url, key, mode="legacy", message_handler=heard["two"]) as second,
        ):
            await tool_names(first)
            await tool_names(second)
            created = result_json(
                await first.call_tool(
                    "pml_execute", {"intent": "noon in Tokyo", "code": TOKYO, "name": "clock:jp"}
                )
            )
            assert created["capabilityName"] == "clock:jp"
            await heard["one"].wait()
            await heard["two"].wait(timeout_s=1.0)
            assert "mcp__clock__jp" in await tool_names(second)
            started = anyio.current_time()
            await second.call_tool("cap_rename", {"name": "clock:jp", "new_name": "clock:tokyo"})
            await heard["one"].wait(timeout_s=1.0)
            elapsed = anyio.current_time() - started
            names: dict[str, Any] = await tool_names(first)
            called = await first.call_tool("mcp__clock__tokyo", {})
    assert elapsed < 1.0
    assert "mcp__clock__tokyo" in names
    assert "mcp__clock__jp" not in names
    assert called.structured_content == {"at": "21:00"}
