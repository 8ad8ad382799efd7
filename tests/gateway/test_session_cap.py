"""Open MCP sessions capped per API key (``[limits] sessions_per_key``) and for the whole
process, on a real uvicorn (127.0.0.1, a free port) with keys on SQLite: one key cannot
lock the others out, and every way a session ends frees its place."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator
from typing import Any, Unpack

import anyio
import httpx
import pytest
import sqlalchemy as sa

from gateway.raw_mcp import INIT, delete, post
from pml.gateway.http import _serving, _session_owner, base_url, listen_socket, running_http
from pml.gateway.http_lane_app import mcp_app
from pml.gateway.keys import ApiKeys
from pml.gateway.server import Gateway
from pml.gateway.session_caps import SessionCaps
from pml.limits.edge import RequestLimits
from pml.limits.refusal import JSONRPC_RATE_LIMITED
from pml.sections_limits import LimitsSettings
from pml.storage.session_repo import mcp_sessions
from pml.web.auth import ApiKeyMiddleware

pytestmark = pytest.mark.anyio

CAP = 3


@contextlib.asynccontextmanager
async def serving(gateway: Gateway, **caps: Unpack[SessionCaps]) -> AsyncGenerator[str]:
    """``/mcp`` as ``pml serve --http`` serves it (API keys, their rate limits, the HTTP
    lane), its sessions capped by ``caps``; yields the base URL."""
    app = mcp_app(
        gateway.server,
        db=gateway.db,
        notifier=gateway.server.notifier,
        tools=gateway.tools,
        limits=LimitsSettings(sessions_per_key=CAP),
        **caps,
    )
    app.add_middleware(
        ApiKeyMiddleware,
        authenticate=ApiKeys(gateway.db).principal,
        owner=_session_owner,
        limits=RequestLimits(LimitsSettings()),
    )
    with contextlib.closing(listen_socket("127.0.0.1", 0)) as sock:
        async with _serving(app, sock, gateway.server.notifier):
            yield base_url(sock)


async def new_key(gateway: Gateway, user: str, org: str = "acme") -> str:
    return (await ApiKeys(gateway.db).create(org, "webapp", user=user))[0]


async def initialize(url: str, key: str, body: object = INIT) -> httpx.Response:
    return await post(url, key, body)


async def open_sessions(url: str, key: str, count: int) -> list[str]:
    sessions: list[str] = []
    for _ in range(count):
        answer = await initialize(url, key)
        assert answer.status_code == 200, answer.text
        sessions.append(answer.headers["mcp-session-id"])
    return sessions


async def stored(gateway: Gateway) -> int:
    async with gateway.db.read() as conn:
        return len((await conn.execute(sa.select(mcp_sessions.c.session_hash))).all())


def pml_error(answer: httpx.Response) -> dict[str, Any]:
    return answer.json()["error"]["data"]


async def test_a_key_at_its_cap_gets_429_rate_limited_and_nothing_is_stored(
    gateway: Gateway,
) -> None:
    key = await new_key(gateway, "mallory")
    with anyio.fail_after(20):
        async with serving(gateway) as url:
            sessions = await open_sessions(url, key, CAP)
            before = await stored(gateway)
            refused = await initialize(url, key)
            after = await stored(gateway)

    assert len(set(sessions)) == CAP
    assert before == CAP
    assert refused.status_code == 429
    assert "mcp-session-id" not in refused.headers
    assert 1 <= int(refused.headers["retry-after"]) <= 1800
    body = refused.json()
    assert body["error"]["code"] == JSONRPC_RATE_LIMITED  # as the key's rate limit answers
    error = pml_error(refused)
    assert error["code"] == "RATE_LIMITED"
    assert error["limit"] == "sessions_per_key"
    assert error["openSessions"] == CAP
    assert 0 < error["retryAfterS"] <= 1800
    assert "too many open MCP sessions: 3" in error["message"]
    assert "DELETE /mcp" in error["message"]
    assert "Mcp-Session-Id" in error["message"]
    assert "expire" in error["message"]
    assert key not in refused.text
    assert after == before  # nothing new recorded


async def test_other_keys_even_another_orgs_admin_still_open_sessions(gateway: Gateway) -> None:
    mallory = await new_key(gateway, "mallory")
    ana = await new_key(gateway, "ana")
    admin = (await ApiKeys(gateway.db).create("globex", "ops", user="root", role="admin"))[0]
    with anyio.fail_after(20):
        async with serving(gateway) as url:
            await open_sessions(url, mallory, CAP)
            refused = await initialize(url, mallory)
            others = [await initialize(url, ana), await initialize(url, admin)]
            again = await initialize(url, mallory)

    assert refused.status_code == 429
    assert [answer.status_code for answer in others] == [200, 200]
    assert all(answer.headers.get("mcp-session-id") for answer in others)
    assert again.status_code == 429


async def test_deleting_a_session_frees_its_place_for_the_same_key(gateway: Gateway) -> None:
    key = await new_key(gateway, "erwan")
    with anyio.fail_after(20):
        async with serving(gateway) as url:
            sessions = await open_sessions(url, key, CAP)
            refused = await initialize(url, key)
            ended = await delete(url, key, sessions[0])
            reopened = await initialize(url, key)
            full_again = await initialize(url, key)
            gone = await delete(url, key, sessions[0])  # ended already: frees nothing more
            still_full = await initialize(url, key)

    assert refused.status_code == 429
    assert ended.status_code == 200
    assert reopened.status_code == 200
    assert reopened.headers["mcp-session-id"] not in sessions
    assert full_again.status_code == 429
    assert gone.status_code == 404
    assert still_full.status_code == 429


async def test_idle_sessions_expire_and_free_their_places(gateway: Gateway) -> None:
    key = await new_key(gateway, "erwan")
    waits: list[float] = []
    with anyio.fail_after(15):
        async with serving(gateway, session_idle_timeout=0.5) as url:
            await open_sessions(url, key, CAP)
            answer = await initialize(url, key)
            while answer.status_code == 429:  # a client honouring the answer's delay
                waits.append(pml_error(answer)["retryAfterS"])
                await anyio.sleep(waits[-1])
                answer = await initialize(url, key)
            reopened = await open_sessions(url, key, CAP - 1)

    assert waits  # the first was refused
    assert all(0 < wait <= 0.5 for wait in waits)  # never longer than the idle timeout
    assert answer.status_code == 200
    assert len(reopened) == CAP - 1


async def test_openings_that_fail_never_keep_a_place(gateway: Gateway) -> None:
    key = await new_key(gateway, "erwan")
    not_initialize = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    huge = json.loads(json.dumps(INIT))
    huge["params"]["clientInfo"]["name"] = "x" * (70 * 1024)  # over what is recorded
    with anyio.fail_after(20):
        async with serving(gateway) as url:
            failed = [
                await initialize(url, key, body)
                for body in [not_initialize, huge, {"jsonrpc": "2.0"}, [], "{"] * 2
            ]
            opened = await open_sessions(url, key, CAP)
            refused = await initialize(url, key)

    # Refused by the transport (400), or an initialize answered with an error (oversized).
    assert all(answer.status_code == 400 or '"error"' in answer.text for answer in failed)
    assert [answer.status_code for answer in failed].count(200) == 2
    assert len(opened) == CAP
    assert refused.status_code == 429


async def test_concurrent_openings_from_one_key_stop_at_its_cap(gateway: Gateway) -> None:
    key = await new_key(gateway, "mallory")
    statuses: list[int] = []

    async def one(url: str) -> None:
        statuses.append((await initialize(url, key)).status_code)

    with anyio.fail_after(20):
        async with serving(gateway) as url, anyio.create_task_group() as group:
            for _ in range(12):
                group.start_soon(one, url)

    assert sorted(statuses) == [200] * CAP + [429] * (12 - CAP)


async def test_a_full_process_answers_busy_503_with_retry_after(gateway: Gateway) -> None:
    mallory = await new_key(gateway, "mallory")
    ana = await new_key(gateway, "ana")
    bob = await new_key(gateway, "bob")
    with anyio.fail_after(20):
        async with serving(gateway, max_sessions=CAP + 1) as url:
            await open_sessions(url, mallory, CAP)
            ana_session = (await open_sessions(url, ana, 1))[0]
            full = await initialize(url, bob)
            capped = await initialize(url, mallory)
            ended = await delete(url, ana, ana_session)
            served = await initialize(url, bob)

    assert full.status_code == 503
    assert full.headers["retry-after"] == "60"
    assert full.json()["error"]["code"] == -32053
    error = pml_error(full)
    assert error["code"] == "BUSY"
    assert error["limit"] == "max_sessions"
    assert error["retryAfterS"] == 60.0
    assert f"holds {CAP + 1} MCP sessions" in error["message"]
    assert "Too many open sessions" not in full.text  # not the SDK's bare -32603
    assert capped.status_code == 503  # full for everyone, whatever the key holds
    assert ended.status_code == 200
    assert served.status_code == 200


async def test_pml_serve_http_applies_the_configured_cap(gateway: Gateway) -> None:
    # The app ``pml serve --http`` builds (create_app) reads ``[limits] sessions_per_key``.
    key = await new_key(gateway, "mallory")
    with anyio.fail_after(20):
        async with running_http(gateway, limits=LimitsSettings(sessions_per_key=2)) as url:
            await open_sessions(url, key, 2)
            refused = await initialize(url, key)
            other = await initialize(url, await new_key(gateway, "ana"))
    assert refused.status_code == 429
    assert pml_error(refused)["limit"] == "sessions_per_key"
    assert other.status_code == 200


async def test_the_keys_of_one_org_together_stop_at_its_cap(gateway: Gateway) -> None:
    first, second, third = [await new_key(gateway, user) for user in ("ana", "bob", "eve")]
    other_org = await new_key(gateway, "zed", org="globex")
    with anyio.fail_after(20):
        async with serving(gateway, sessions_per_org=4) as url:
            opened = [*await open_sessions(url, first, 2), *await open_sessions(url, second, 2)]
            before = await stored(gateway)
            refused = await initialize(url, third)
            after = await stored(gateway)
            elsewhere = await initialize(url, other_org)
            ended = await delete(url, first, opened[0])
            reopened = await initialize(url, third)
            full_again = await initialize(url, second)

    assert refused.status_code == 429
    assert "mcp-session-id" not in refused.headers
    assert refused.json()["error"]["code"] == JSONRPC_RATE_LIMITED
    error = pml_error(refused)
    assert error["code"] == "RATE_LIMITED"
    assert error["limit"] == "sessions_per_org"
    assert error["openSessions"] == 4
    assert 0 < error["retryAfterS"] <= 1800
    assert "This organisation has too many open MCP sessions: 4" in error["message"]
    assert "[limits] sessions_per_org" in error["message"]
    assert after == before  # nothing recorded for the refused opening
    assert elsewhere.status_code == 200  # another organisation keeps its places
    assert ended.status_code == 200
    assert reopened.status_code == 200  # the ended session's place is the org's again
    assert full_again.status_code == 429


async def test_an_org_cap_of_zero_leaves_only_the_per_key_cap(gateway: Gateway) -> None:
    keys = [await new_key(gateway, user) for user in ("ana", "bob", "eve")]
    with anyio.fail_after(20):
        async with serving(gateway, sessions_per_org=0) as url:
            opened = [session for key in keys for session in await open_sessions(url, key, CAP)]
            capped = await initialize(url, keys[0])

    assert len(set(opened)) == 3 * CAP
    assert pml_error(capped)["limit"] == "sessions_per_key"


async def test_concurrent_openings_from_many_keys_of_one_org_stop_at_its_cap(
    gateway: Gateway,
) -> None:
    keys = [await new_key(gateway, f"user{index}") for index in range(6)]
    statuses: list[int] = []
    limits: list[str] = []

    async def one(url: str, key: str) -> None:
        answer = await initialize(url, key)
        statuses.append(answer.status_code)
        if answer.status_code == 429:
            limits.append(pml_error(answer)["limit"])

    with anyio.fail_after(30):
        async with serving(gateway, sessions_per_org=5) as url:
            async with anyio.create_task_group() as group:
                for key in keys:
                    for _ in range(2):
                        group.start_soon(one, url, key)
            opened = await stored(gateway)

    assert sorted(statuses) == [200] * 5 + [429] * 7
    assert set(limits) == {"sessions_per_org"}
    assert opened == 5


async def test_pml_serve_http_applies_the_configured_org_cap(gateway: Gateway) -> None:
    with anyio.fail_after(20):
        limits = LimitsSettings(sessions_per_org=2)
        async with running_http(gateway, limits=limits) as url:
            for user in ("ana", "bob"):
                await open_sessions(url, await new_key(gateway, user), 1)
            refused = await initialize(url, await new_key(gateway, "eve"))
            other = await initialize(url, await new_key(gateway, "zed", org="globex"))
    assert refused.status_code == 429
    assert pml_error(refused)["limit"] == "sessions_per_org"
    assert other.status_code == 200
