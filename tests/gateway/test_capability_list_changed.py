"""Capability changes reach exactly the clients whose tool list changed (SPEC §3, §6.2)."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import anyio
import asyncpg  # pyright: ignore[reportMissingTypeStubs]
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ToolsListChanged
from mcp.shared._httpx_utils import create_mcp_http_client
from sqlalchemy.engine import make_url

from gateway.test_capability_tools import SCOPE, named
from gateway.upstreams import ListChanged, data_of, gateway_settings
from pml.gateway.http import running_http
from pml.gateway.keys import ApiKeys
from pml.gateway.server import Gateway, open_gateway
from pml.registry.models import CapabilityDraft, RenameChanges
from pml.registry.scope import Scope
from pml.registry.service import CapabilityRegistry
from pml.storage.database import Database
from pml.upstream.pool import ClientPool

pytestmark = pytest.mark.anyio


async def names_of(client: Client) -> set[str]:
    return {tool.name for tool in (await client.list_tools(cache_mode="bypass")).tools}


async def test_cap_rename_tells_a_session_client_and_the_next_list_shows_it(
    gateway: Gateway,
) -> None:
    await named(gateway, "math:add")
    changed = ListChanged()
    async with Client(gateway.server, mode="legacy", message_handler=changed) as client:
        assert "mcp__math__add" in await names_of(client)
        renamed = await client.call_tool("cap_rename", {"name": "math:add", "new_name": "calc:sum"})
        assert data_of(renamed)["display_name"] == "calc:sum"
        await changed.wait()
        names = await names_of(client)
        assert "mcp__calc__sum" in names
        assert "mcp__math__add" not in names
        by_old_name = await client.call_tool(
            "pml_execute", {"intent": "add", "capability": "math:add", "args": {"b": 2}}
        )
        assert data_of(by_old_name)["deprecatedAlias"]["currentName"] == "calc:sum"
        assert data_of(by_old_name)["result"] == {"sum": 3}
    assert changed.count == 1


async def test_a_listening_2026_client_is_told_of_a_rename(gateway: Gateway) -> None:
    await named(gateway, "math:add")
    async with Client(gateway.server) as client, client.listen(tools_list_changed=True) as sub:
        assert client.protocol_version == "2026-07-28"
        await client.call_tool("cap_rename", {"name": "math:add", "new_name": "math:plus"})
        with anyio.fail_after(5):
            event = await anext(aiter(sub))
        assert isinstance(event, ToolsListChanged)
        assert "mcp__math__plus" in await names_of(client)


async def test_naming_a_capability_through_pml_execute_is_announced(gateway: Gateway) -> None:
    changed = ListChanged()
    async with Client(gateway.server, mode="legacy", message_handler=changed) as client:
        before = await names_of(client)
        code = 'return {"double": args.get("n", 2) * 2}'
        ran = await client.call_tool("pml_execute", {"intent": "double it", "code": code})
        assert data_of(ran)["created"] is True  # unnamed: nothing to announce yet
        named_run = await client.call_tool(
            "pml_execute", {"intent": "double it", "code": code, "name": "math:double"}
        )
        assert data_of(named_run)["capabilityName"] == "math:double"
        await changed.wait()
        after = await names_of(client)
        called = await client.call_tool("mcp__math__double", {"n": 21})
    assert after - before == {"mcp__math__double"}
    assert changed.count == 1  # the unnamed capture did not disturb the client
    assert data_of(called) == {"double": 42}


async def test_a_new_version_with_a_new_schema_is_announced(gateway: Gateway) -> None:
    await named(gateway, "math:add")
    changed = ListChanged()
    async with Client(gateway.server, mode="legacy", message_handler=changed) as client:
        await names_of(client)
        schema = {"type": "object", "properties": {"c": {"type": "integer"}}, "required": ["c"]}
        draft = CapabilityDraft(code='return args["c"]', parameters_schema=schema)
        await gateway.registry.update_code(SCOPE, "math:add", draft)
        await changed.wait()
        tools = {t.name: t for t in (await client.list_tools(cache_mode="bypass")).tools}
    assert tools["mcp__math__add"].input_schema == schema


async def test_changes_that_leave_the_list_as_it_was_are_not_announced(gateway: Gateway) -> None:
    await named(gateway, "math:add")
    changed = ListChanged()
    async with Client(gateway.server, mode="legacy", message_handler=changed) as client:
        await names_of(client)
        # Another user's private capability, and a project the client is not in.
        other = Scope("acme", "webapp", "ana")
        await named(
            gateway, "ana:private", code="return 1", schema={}, scope=other, visibility="private"
        )
        await named(
            gateway, "x:elsewhere", code="return 2", schema={}, scope=Scope("acme", "x", "e")
        )
        await named(gateway, None, code="return 3", schema={})  # unnamed: not a tool
        await client.call_tool("cap_list", {})  # a round trip: a notification would be in
        assert changed.count == 0
        await gateway.registry.rename(other, "ana:private", RenameChanges(visibility="project"))
        await changed.wait()  # made visible to the client: now it is told
        assert "mcp__ana__private" in await names_of(client)
    assert changed.count == 1


@pytest.fixture
async def http_url(gateway: Gateway) -> AsyncGenerator[str]:
    async with running_http(gateway) as url:
        yield url


async def test_over_http_each_tenant_sees_and_hears_only_its_own_capability_tools(
    gateway: Gateway, http_url: str
) -> None:
    keys = ApiKeys(gateway.db)
    acme_key = (await keys.create("acme", "webapp", user="erwan"))[0]
    globex_key = (await keys.create("globex", "site", user="gina"))[0]
    globex = Scope("globex", "site", "gina")
    await named(gateway, "math:add")
    await named(gateway, "g:only", code="return 'globex'", schema={}, scope=globex)
    heard = {"acme": ListChanged(), "globex": ListChanged()}
    async with (
        create_mcp_http_client(headers={"Authorization": f"Bearer {acme_key}"}) as acme_http,
        create_mcp_http_client(headers={"Authorization": f"Bearer {globex_key}"}) as globex_http,
        Client(
            streamable_http_client(f"{http_url}/mcp", http_client=acme_http),
            mode="legacy",
            message_handler=heard["acme"],
        ) as acme,
        Client(
            streamable_http_client(f"{http_url}/mcp", http_client=globex_http),
            mode="legacy",
            message_handler=heard["globex"],
        ) as globex_client,
    ):
        acme_names, globex_names = await names_of(acme), await names_of(globex_client)
        assert "mcp__math__add" in acme_names
        assert "mcp__g__only" not in acme_names
        assert "mcp__g__only" in globex_names
        assert "mcp__math__add" not in globex_names
        stolen = await globex_client.call_tool("mcp__math__add", {"b": 1})
        assert stolen.is_error
        await acme.call_tool("cap_rename", {"name": "math:add", "new_name": "math:plus"})
        await heard["acme"].wait()
        await globex_client.call_tool("cap_rename", {"name": "g:only", "new_name": "g:mine"})
        await heard["globex"].wait()
        assert "mcp__g__mine" in await names_of(globex_client)
    assert (heard["acme"].count, heard["globex"].count) == (1, 1)


async def test_a_rename_by_another_process_on_the_same_sqlite_file_is_announced(
    gateway: Gateway, sqlite_url: str
) -> None:
    await named(gateway, "math:add")
    changed = ListChanged()
    async with Client(gateway.server, mode="legacy", message_handler=changed) as client:
        await names_of(client)
        other = await Database.open(sqlite_url)  # what `pml cap rename` does from a shell
        try:
            await CapabilityRegistry(other).rename(
                SCOPE, "math:add", RenameChanges(new_name="math:sum")
            )
        finally:
            await other.close()
        await changed.wait(timeout_s=10)
        assert "mcp__math__sum" in await names_of(client)


@pytest.fixture
async def replicas(postgres_url: str) -> AsyncGenerator[tuple[Gateway, Gateway]]:
    """Two gateways on one PostgreSQL database, ``math:add`` created through the first.

    It is created before the second replica listens: heard later, while a test's client is
    still listing for the first time, its announcement would pass for the change under test.
    """
    settings = gateway_settings(postgres_url, expose_upstream=False)
    async with open_gateway(settings, pool=ClientPool({})) as first:
        await named(first, "math:add")
        async with open_gateway(settings, pool=ClientPool({})) as second:
            yield first, second


@pytest.mark.postgres
async def test_a_rename_on_one_replica_reaches_the_sessions_of_another_within_a_second(
    replicas: tuple[Gateway, Gateway],
) -> None:
    first, second = replicas
    changed = ListChanged()
    async with Client(second.server, mode="legacy", message_handler=changed) as client:
        assert "mcp__math__add" in await names_of(client)
        started = anyio.current_time()
        await first.registry.rename(SCOPE, "math:add", RenameChanges(new_name="math:sum"))
        await changed.wait(timeout_s=1.0)
        elapsed = anyio.current_time() - started
        names = await names_of(client)
        called = await client.call_tool("mcp__math__sum", {"b": 4})
    assert elapsed < 1.0
    assert "mcp__math__sum" in names
    assert "mcp__math__add" not in names
    assert data_of(called) == {"sum": 5}
    assert changed.count == 1


async def terminate_listeners(url: str) -> int:
    """Cut every PML ``LISTEN`` connection to the database of ``url``; how many were cut."""
    parsed = make_url(url)
    conn: Any = await asyncpg.connect(  # pyright: ignore[reportUnknownMemberType]
        host=parsed.host, port=parsed.port or 5432, user=parsed.username, database=parsed.database
    )
    try:
        return int(
            await conn.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND query LIKE 'LISTEN %' "
                "AND pid <> pg_backend_pid()"
            )
        )
    finally:
        await conn.close()


@pytest.mark.postgres
async def test_a_replica_whose_listening_connection_dropped_reconnects_and_catches_up(
    replicas: tuple[Gateway, Gateway], postgres_url: str
) -> None:
    first, second = replicas
    changed = ListChanged()
    async with Client(second.server, mode="legacy", message_handler=changed) as client:
        await names_of(client)
        assert await terminate_listeners(postgres_url) == 2
        # Sent while the second replica may not be listening: caught up on reconnection.
        await first.registry.rename(SCOPE, "math:add", RenameChanges(new_name="math:sum"))
        await changed.wait(timeout_s=10)
        assert "mcp__math__sum" in await names_of(client)
        await first.registry.rename(SCOPE, "math:sum", RenameChanges(new_name="math:total"))
        await changed.wait(timeout_s=10)  # and it listens again
        assert "mcp__math__total" in await names_of(client)


async def test_a_stateless_2026_client_over_http_re_lists_and_hears_its_changes(
    gateway: Gateway, http_url: str
) -> None:
    key = (await ApiKeys(gateway.db).create("acme", "webapp", user="erwan"))[0]
    await named(gateway, "math:add")
    async with (
        create_mcp_http_client(headers={"Authorization": f"Bearer {key}"}) as http,
        Client(streamable_http_client(f"{http_url}/mcp", http_client=http)) as client,
        client.listen(tools_list_changed=True) as events,
    ):
        assert client.protocol_version == "2026-07-28"
        assert "mcp__math__add" in await names_of(client)
        await client.call_tool("cap_rename", {"name": "math:add", "new_name": "math:plus"})
        with anyio.fail_after(5):
            event = await anext(aiter(events))
        names = await names_of(client)
    assert isinstance(event, ToolsListChanged)
    assert "mcp__math__plus" in names
    assert "mcp__math__add" not in names
