"""``tools/list`` stays within budget with thousands of named capabilities, end to end.

A real ``pml serve --stdio`` on an SQLite file already holding 3 000 named capabilities
(written through the registry's repository before the gateway starts), the real ``time``
reference server, and the official SDK client: the list fits the goal (counted with the real
cl100k tokenizer), and a capability learned beyond the budget is still called as a tool, by
name through ``pml_execute``, and found by ``pml_discover`` — without a ``list_changed``,
since the listed set did not change.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from e2e.support import Upstream, pml_stdio, result_json, sqlite_url, write_config
from gateway.tools_budget_bench import encoder, fill_named
from gateway.upstreams import ListChanged
from pml.storage.database import Database

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

NAMED = 3000
TOKYO = (
    "converted = await mcp.time.convert_time(\n"
    '    source_timezone="UTC", time="12:00", target_timezone="Asia/Tokyo"\n'
    ")\n"
    'return {"at": converted["target"]["datetime"][11:16]}'
)


async def test_thousands_of_named_capabilities_list_within_budget_and_the_rest_still_work(
    tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    url = sqlite_url(tmp_path)
    db = await Database.open(url)
    try:
        await fill_named(db, NAMED, seed=5)
    finally:
        await db.close()
    config = write_config(
        tmp_path / "pml.toml",
        [servers["time"]],
        database_url=url,
        expose_upstream=False,
        extra={"discovery": {"embedder": "hashing"}},  # 3 000 capabilities embed at start
    )
    heard = ListChanged()
    async with pml_stdio(config, tmp_path / "pml.log", mode="legacy", message_handler=heard) as gw:
        client = gw.client
        with anyio.fail_after(60):
            listed = await client.list_tools(cache_mode="bypass")
        learned = result_json(
            await client.call_tool(
                "pml_execute",
                {"intent": "convert noon UTC to Tokyo time", "code": TOKYO, "name": "clock:tokyo"},
            )
        )
        after = await client.list_tools(cache_mode="bypass")
        as_tool = await client.call_tool("mcp__clock__tokyo", {})
        by_name = result_json(
            await client.call_tool(
                "pml_execute", {"intent": "noon in Tokyo", "capability": "clock:tokyo"}
            )
        )
        found = result_json(
            await client.call_tool(
                "pml_discover",
                {"intent": "convert noon UTC to Tokyo time", "kind": "capability", "limit": 5},
            )
        )
        await anyio.sleep(1.5)  # the SQLite change poll (1 s) has looked at the new name
    tools = [
        tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in listed.tools
    ]
    capability_tools = [tool["name"] for tool in tools if tool["name"].startswith("mcp__")]
    tokens = len(
        encoder().encode(json.dumps({"tools": tools}, separators=(",", ":"), ensure_ascii=False))
    )
    assert tokens <= 6000, tokens
    assert 10 <= len(capability_tools) < NAMED
    assert len(tools) == 8 + len(capability_tools)
    assert learned["status"] == "success", learned
    assert learned["capabilityName"] == "clock:tokyo"
    assert "mcp__clock__tokyo" not in {tool.name for tool in after.tools}  # beyond the budget
    assert [tool.name for tool in after.tools] == [tool.name for tool in listed.tools]
    assert as_tool.is_error is not True, as_tool
    assert as_tool.structured_content == {"at": "21:00"}
    assert by_name["result"] == {"at": "21:00"}
    assert "mcp__clock__tokyo" in [result.get("toolName") for result in found["results"]]
    assert heard.count == 0  # the listed set never changed
