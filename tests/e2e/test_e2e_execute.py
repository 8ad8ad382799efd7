"""``pml_execute`` end to end: ``pml serve --stdio`` with real upstream servers, a real client."""

from __future__ import annotations

import re
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

FQDN = r"^[a-z0-9_-]+\.[a-z0-9_-]+\.[a-z0-9_-]+\.[A-Za-z0-9_-]+\.[0-9a-f]{4,}$"

TWO_SERVERS = """
converted = await mcp.time.convert_time(
    source_timezone="UTC", time="12:00", target_timezone=args.get("zone", "Asia/Tokyo")
)
said = await mcp.everything["get-sum"](a=2, b=40)
total = int(said.split(" is ")[1].rstrip("."))
echo = await mcp.everything.echo(message="hi")
print("sum is", total)
return {"tokyo": converted["target"]["datetime"][11:16], "sum": total, "echo": echo}
"""


def config(tmp_path: Path, servers: dict[str, Upstream]) -> Path:
    chosen = [servers["time"], servers["everything"], servers["filesystem"]]
    return write_config(tmp_path / "pml.toml", chosen, database_url=sqlite_url(tmp_path))


async def test_a_snippet_over_two_real_servers_becomes_a_capability_callable_by_name(
    tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    async with pml_stdio(config(tmp_path, servers), tmp_path / "pml.log") as gw:
        first = result_json(
            await gw.client.call_tool(
                "pml_execute", {"intent": "noon in Tokyo", "code": TWO_SERVERS}
            )
        )
        reformatted = "# same thing\n" + TWO_SERVERS.replace("a=2, b=40", "a = 2,  b = 40")
        again = result_json(
            await gw.client.call_tool("pml_execute", {"intent": "again", "code": reformatted})
        )
        named = result_json(
            await gw.client.call_tool(
                "pml_execute",
                {"intent": "name it", "code": TWO_SERVERS, "name": "clock:noon"},
            )
        )
        by_name = result_json(
            await gw.client.call_tool(
                "pml_execute",
                {
                    "intent": "noon in Paris",
                    "capability": "clock:noon",
                    "args": {"zone": "Europe/Paris", "b": 1},
                },
            )
        )
    assert first["status"] == "success"
    assert first["result"]["tokyo"] == "21:00"
    assert first["result"]["sum"] == 42
    assert first["logs"] == ["sum is 42"]
    assert first["toolsUsed"] == ["time:convert_time", "everything:get-sum", "everything:echo"]
    assert re.fullmatch(FQDN, first["capabilityFqdn"])
    assert first["created"] is True
    assert again["created"] is False
    assert again["capabilityFqdn"] == first["capabilityFqdn"]
    assert named["capabilityName"] == "clock:noon"
    assert by_name["result"]["tokyo"] == "13:00"
    assert by_name["result"]["sum"] == 3  # the lifted literal b, generalised
    assert by_name["capabilityFqdn"] == first["capabilityFqdn"]


async def test_errors_over_stdio_carry_the_spec_codes(
    tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    async with pml_stdio(config(tmp_path, servers), tmp_path / "pml.log") as gw:
        calls: dict[str, dict[str, Any]] = {
            "UNKNOWN_TOOL": {"code": "return await mcp.time.get_curent_time(timezone='UTC')"},
            "NOT_FOUND": {"capability": "nobody:here"},
            "SYNTAX_ERROR": {"code": "return (("},
            "TOOL_ERROR": {
                "code": "return await mcp.filesystem.read_text_file(path='/etc/passwd')"
            },
        }
        errors = {
            code: error_of(await gw.client.call_tool("pml_execute", {"intent": "x", **arguments}))
            for code, arguments in calls.items()
        }
        listed = result_json(await gw.client.call_tool("cap_list", {}))
    assert {code: error["code"] for code, error in errors.items()} == {c: c for c in calls}
    assert "did you mean mcp.time.get_current_time" in errors["UNKNOWN_TOOL"]["message"]
    assert errors["NOT_FOUND"]["message"] == "Capability not found: nobody:here"
    assert listed["total"] == 0


def test_pml_execute_on_the_command_line(tmp_path: Path, servers: dict[str, Upstream]) -> None:
    path = config(tmp_path, servers)
    snippet = tmp_path / "snippet.py"
    snippet.write_text("s = await mcp.everything['get-sum'](a=args['x'], b=1)\nreturn s\n")
    out = pml_cli(path, "execute", "add one", "--code", str(snippet), "--arg", "x=41", "--json")
    assert '"result": "The sum of 41 and 1 is 42."' in out
    assert '"created": true' in out
