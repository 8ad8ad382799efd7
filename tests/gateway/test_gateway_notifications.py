"""``tools/list_changed`` reaches clients of both protocol generations."""

from __future__ import annotations

import anyio
import pytest
from mcp import Client
from mcp.client.subscriptions import ToolsListChanged

from gateway.upstreams import ListChanged, Upstream, tool
from pml.gateway.server import Gateway
from pml.upstream.pool import ClientPool

pytestmark = pytest.mark.anyio

WAIT_S = 5.0


async def test_a_session_client_is_told_when_upstream_tools_change(
    gateway: Gateway, upstreams: dict[str, Upstream]
) -> None:
    changed = ListChanged()
    async with Client(gateway.server, mode="legacy", message_handler=changed) as client:
        await client.list_tools()
        await upstreams["a"].change_tools([tool("echo"), tool("new_one")])
        with anyio.fail_after(WAIT_S):
            await changed.event.wait()
        names = [t.name for t in (await client.list_tools(cache_mode="bypass")).tools]
    assert "a__new_one" in names
    assert "a__fail" not in names


async def test_a_listening_2026_client_is_told_when_upstream_tools_change(
    gateway: Gateway, upstreams: dict[str, Upstream]
) -> None:
    async with Client(gateway.server) as client, client.listen(tools_list_changed=True) as sub:
        assert client.protocol_version == "2026-07-28"
        await upstreams["b"].change_tools([tool("only")])
        with anyio.fail_after(WAIT_S):
            event = await anext(aiter(sub))
        assert isinstance(event, ToolsListChanged)
        names = [t.name for t in (await client.list_tools(cache_mode="bypass")).tools]
    assert "b__only" in names
    assert "b__echo" not in names


async def test_the_gateway_can_announce_a_change_of_its_own_tools(gateway: Gateway) -> None:
    changed = ListChanged()
    async with Client(gateway.server, mode="legacy", message_handler=changed) as client:
        await client.call_tool("cap_list", {})
        await gateway.notify_tools_changed()
        with anyio.fail_after(WAIT_S):
            await changed.event.wait()


async def test_without_expose_upstream_upstream_changes_are_not_announced(
    closed_gateway: Gateway, pool: ClientPool, upstreams: dict[str, Upstream]
) -> None:
    refreshed = anyio.Event()

    async def pool_refreshed(server: str) -> None:
        refreshed.set()

    pool.on_tools_changed(pool_refreshed)
    changed = ListChanged()
    async with Client(closed_gateway.server, mode="legacy", message_handler=changed) as client:
        await client.list_tools()
        await upstreams["a"].change_tools([tool("other")])
        with anyio.fail_after(WAIT_S):
            await refreshed.wait()
        await client.call_tool("cap_list", {})  # a round trip: a notification would be in
    assert changed.count == 0
