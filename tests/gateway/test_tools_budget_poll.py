"""The SQLite change poll and budget-cut listings (SPEC §6.6): other processes' changes to
named capabilities are caught; this process's unnamed captures never re-rank a listing.

Real gateways over SQLite files, real SDK clients, the watcher's real poll (1 s).
"""

from __future__ import annotations

import json

import anyio
import pytest
from mcp import Client

from gateway.test_tools_budget import (
    Cap,
    capability_tools,
    insert,
    insert_before,
    runs,
    settings_with,
)
from gateway.upstreams import ListChanged, data_of
from pml.gateway.server import open_gateway
from pml.gateway.tools_budget import estimate_tokens
from pml.gateway.watch import POLL_INTERVAL_S
from pml.upstream.pool import ClientPool

pytestmark = pytest.mark.anyio

ONE_TOOL = estimate_tokens(
    json.dumps(
        {
            "name": "mcp__bulk__xx",
            "description": "bulk capability xx (PML capability bulk:xx)",
            "inputSchema": {"type": "object", "properties": {}},
        },
        separators=(",", ":"),
    )
)


async def past_two_polls(client: Client) -> None:
    await client.list_tools(cache_mode="bypass")
    await anyio.sleep(2 * POLL_INTERVAL_S + 0.5)
    await client.list_tools(cache_mode="bypass")


async def test_new_unnamed_captures_do_not_re_rank_a_budget_cut_listing(
    sqlite_url: str, pool: ClientPool
) -> None:
    settings = settings_with(sqlite_url, ONE_TOOL + 1)  # one fits
    await insert_before(sqlite_url, [Cap("aa", usage=5), Cap("zz", usage=0)])
    async with open_gateway(settings, pool=pool) as gateway:
        changed = ListChanged()
        async with Client(gateway.server, mode="legacy", message_handler=changed) as client:
            assert capability_tools((await client.list_tools()).tools) == ["mcp__bulk__aa"]
            await runs(client, "bulk:zz", 8)  # zz now outranks aa in the database ...
            await gateway.executor.flush()
            for n in range(3):  # ... and new code is captured, unnamed
                result = await client.call_tool(
                    "pml_execute", {"intent": f"sum {n}", "code": f"return {n} + 100"}
                )
                assert data_of(result)["result"] == n + 100
            await gateway.executor.flush()
            await past_two_polls(client)
            assert changed.count == 0  # no re-rank before usage stats are refreshed
            listed = capability_tools((await client.list_tools(cache_mode="bypass")).tools)
            assert listed == ["mcp__bulk__aa"]
            await gateway.watcher.rerank()  # the refresh: now it is said
            await changed.wait()
            listed = capability_tools((await client.list_tools(cache_mode="bypass")).tools)
    assert listed == ["mcp__bulk__zz"]


async def test_a_named_capability_written_by_another_process_is_caught_by_the_poll(
    sqlite_url: str, pool: ClientPool
) -> None:
    settings = settings_with(sqlite_url, 10 * ONE_TOOL)
    await insert_before(sqlite_url, [Cap("aa", usage=1)])
    async with (
        open_gateway(settings, pool=pool) as gateway,
        open_gateway(settings, pool=ClientPool({})) as other,  # the same file, as a CLI command is
    ):
        changed = ListChanged()
        async with Client(gateway.server, mode="legacy", message_handler=changed) as client:
            assert capability_tools((await client.list_tools()).tools) == ["mcp__bulk__aa"]
            await insert(other, [Cap("bb", usage=0)], namespace="late")  # unseen by ours
            await changed.wait(timeout_s=10 * POLL_INTERVAL_S)
            listed = capability_tools((await client.list_tools(cache_mode="bypass")).tools)
    assert listed == ["mcp__bulk__aa", "mcp__late__bb"]
