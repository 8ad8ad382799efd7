"""2025-11-25 sessions recorded in the database: served by any gateway on it, and by the same
gateway after a restart (real uvicorn on 127.0.0.1, in-process upstream servers)."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import AsyncExitStack
from urllib.parse import urlsplit

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from gateway.raw_mcp import delete, post
from gateway.upstreams import Upstream, gateway_settings
from pml.gateway.http import running_http
from pml.gateway.keys import ApiKeys
from pml.gateway.server import Gateway, open_gateway
from pml.sections_limits import LimitsSettings
from pml.storage.session_repo import mcp_sessions
from pml.upstream.pool import ClientPool

pytestmark = pytest.mark.anyio

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "shared-sessions-test", "version": "1"},
    },
}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}


ORG_CAP = 2  # [limits] sessions_per_org of both gateways


@pytest.fixture
async def two_gateways(
    postgres_url: str, upstreams: dict[str, Upstream]
) -> AsyncGenerator[tuple[str, str, ApiKeys]]:
    """Two gateways on one PostgreSQL database, each served on its own port."""
    async with AsyncExitStack() as stack:
        urls: list[str] = []
        keys: ApiKeys | None = None
        for _ in range(2):
            pool = ClientPool({name: upstream.server for name, upstream in upstreams.items()})
            settings = gateway_settings(postgres_url, expose_upstream=True)
            gateway = await stack.enter_async_context(open_gateway(settings, pool=pool))
            limits = LimitsSettings(sessions_per_org=ORG_CAP)
            urls.append(await stack.enter_async_context(running_http(gateway, limits=limits)))
            keys = keys or ApiKeys(gateway.db)
        assert keys is not None
        yield urls[0], urls[1], keys


@pytest.mark.postgres
async def test_sessions_adopted_from_another_gateway_count_for_their_org(
    two_gateways: tuple[str, str, ApiKeys],
) -> None:
    first, second, keys = two_gateways
    alice, bob, eve = [(await keys.create("acme", "webapp", user=u))[0] for u in ("ana", "bo", "e")]
    zed = (await keys.create("globex", "webapp", user="zed"))[0]

    opened = [await post(first, key, INIT) for key in (alice, bob)]
    sessions = [answer.headers["mcp-session-id"] for answer in opened]
    adopted = [
        await post(second, key, LIST, session)
        for key, session in zip((alice, bob), sessions, strict=True)
    ]
    refused = await post(second, eve, INIT)  # the org's places on the second are taken
    elsewhere = await post(second, zed, INIT)

    assert [answer.status_code for answer in opened] == [200, 200]
    assert [answer.status_code for answer in adopted] == [200, 200]
    assert refused.status_code == 429
    assert refused.json()["error"]["data"]["limit"] == "sessions_per_org"
    assert elsewhere.status_code == 200


@pytest.mark.postgres
async def test_a_session_opened_on_one_gateway_is_served_by_another_on_the_same_database(
    two_gateways: tuple[str, str, ApiKeys],
) -> None:
    first, second, keys = two_gateways
    alice = (await keys.create("acme", "webapp", user="alice"))[0]
    bob = (await keys.create("acme", "webapp", user="bob"))[0]

    opened = await post(first, alice, INIT)
    session = opened.headers["mcp-session-id"]
    listed = await post(second, alice, LIST, session)
    as_bob = await post(second, bob, LIST, session)
    stream_headers = {
        "Accept": "text/event-stream",
        "Authorization": f"Bearer {alice}",
        "Mcp-Session-Id": session,
        "Mcp-Protocol-Version": "2025-11-25",
    }
    with anyio.fail_after(15):
        async with (
            httpx.AsyncClient(timeout=15.0) as http,
            http.stream("GET", f"{first}/mcp", headers=stream_headers) as stream,
        ):
            ended = await delete(second, alice, session)
            async for _ in stream.aiter_bytes():  # ends once the first gateway heard of it
                pass
    after = await post(first, alice, LIST, session)

    assert opened.status_code == 200
    assert stream.status_code == 200
    assert listed.status_code == 200
    assert "a__echo" in listed.text
    assert as_bob.status_code == 404
    assert "a__echo" not in as_bob.text
    assert ended.status_code == 200
    assert after.status_code == 404


async def test_a_session_goes_on_after_its_gateway_restarts(gateway: Gateway) -> None:
    key = (await ApiKeys(gateway.db).create("acme", "webapp", user="erwan"))[0]
    urls: list[str] = []
    before: set[str] = set()
    after: set[str] = set()

    async def serve(
        started: anyio.Event, stop: anyio.Event, done: anyio.Event, port: int = 0
    ) -> None:
        try:
            async with running_http(gateway, port=port) as url:
                urls.append(url)
                started.set()
                await stop.wait()
        finally:
            done.set()

    with anyio.fail_after(30):
        async with anyio.create_task_group() as servers:
            first_up, first_stop, first_done = anyio.Event(), anyio.Event(), anyio.Event()
            servers.start_soon(serve, first_up, first_stop, first_done)
            await first_up.wait()
            async with (
                create_mcp_http_client(headers={"Authorization": f"Bearer {key}"}) as http,
                Client(
                    streamable_http_client(f"{urls[0]}/mcp", http_client=http), mode="legacy"
                ) as client,
            ):
                before = {tool.name for tool in (await client.list_tools()).tools}
                first_stop.set()  # the gateway stops; the client keeps its session id
                await first_done.wait()
                second_up, second_stop = anyio.Event(), anyio.Event()
                port = urlsplit(urls[0]).port
                assert port is not None
                servers.start_soon(serve, second_up, second_stop, anyio.Event(), port)
                await second_up.wait()
                after = {tool.name for tool in (await client.list_tools()).tools}
            second_stop.set()
        async with gateway.db.read() as conn:
            recorded = (await conn.execute(mcp_sessions.select())).all()

    assert "a__echo" in before
    assert after == before
    assert urls[1] == urls[0]
    assert [row.protocol_version for row in recorded] == ["2025-11-25"]
    assert recorded[0].client["clientInfo"]["name"] == "mcp"
    assert recorded[0].closed_at is not None  # the client ended it when it left
