"""Rate limits at the HTTP edge, on a real uvicorn (127.0.0.1, a free port): per API key,
and per source address for failed keys, with their audit (``pml.limits``)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncGenerator
from typing import Any

import anyio
import httpx
import pytest
import sqlalchemy as sa
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from gateway.upstreams import Upstream, gateway_settings
from pml.gateway.http import running_http
from pml.gateway.keys import ApiKeys
from pml.gateway.server import Gateway, open_gateway
from pml.limits.refusal import JSONRPC_RATE_LIMITED
from pml.sections import AuditSettings
from pml.sections_limits import LimitsSettings
from pml.storage.tables import audit_events
from pml.telemetry.metrics import process_metrics
from pml.upstream.pool import ClientPool

pytestmark = pytest.mark.anyio

TIMEOUT = httpx.Timeout(10.0)
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}
# Slow refills: next to nothing comes back while a test runs, so counts are exact.
SLOW_KEY = 0.01
SLOW_ADDRESS = 0.5
CALL = {
    "jsonrpc": "2.0",
    "id": 7,
    "method": "tools/call",
    "params": {"name": "a__echo", "arguments": {}},
}


@pytest.fixture
def upstream() -> Upstream:
    return Upstream("a")


@pytest.fixture
async def gateway(sqlite_url: str, upstream: Upstream) -> AsyncGenerator[Gateway]:
    settings = gateway_settings(sqlite_url, expose_upstream=True)
    settings = settings.model_copy(update={"audit": AuditSettings(file="", coalesce_window_s=1.0)})
    async with open_gateway(settings, pool=ClientPool({"a": upstream.server})) as gw:
        yield gw


async def new_key(gateway: Gateway, user: str = "erwan") -> str:
    return (await ApiKeys(gateway.db).create("acme", "webapp", user=user))[0]


def bad_key() -> str:
    return "pml_" + secrets.token_urlsafe(32)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def from_address(address: str) -> httpx.AsyncClient:
    """A client whose connections leave from ``address`` (any 127.0.0.0/8 one on Linux)."""
    transport = httpx.AsyncHTTPTransport(local_address=address)
    return httpx.AsyncClient(timeout=TIMEOUT, transport=transport)


def counted(name: str, **labels: str) -> float:
    return process_metrics().registry.get_sample_value(name, labels) or 0.0


async def test_a_key_over_its_burst_gets_429_with_retry_after_and_another_key_is_not(
    gateway: Gateway,
) -> None:
    limits = LimitsSettings(
        key_rate_per_s=SLOW_KEY, auth_failures_per_minute=SLOW_ADDRESS, key_burst=3
    )
    first, second = await new_key(gateway), await new_key(gateway, "ana")
    before = counted("pml_rate_limit_refusals_total", limit="api_key")
    async with running_http(gateway, limits=limits) as url, from_address("127.0.0.1") as http:
        served = [
            (await http.get(f"{url}/api/capabilities", headers=bearer(first))).status_code
            for _ in range(3)
        ]
        refused = await http.get(f"{url}/api/capabilities", headers=bearer(first))
        other = await http.get(f"{url}/api/capabilities", headers=bearer(second))
        health = [(await http.get(f"{url}/health")).status_code for _ in range(20)]
        ready = (await http.get(f"{url}/ready")).status_code
    assert served == [200, 200, 200]
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "100"  # 1 token at 0.01/s, whole seconds
    error = refused.json()["error"]
    assert error["code"] == "RATE_LIMITED"
    assert 90.0 < error["retryAfterS"] <= 100.0  # what refilled meanwhile is counted
    assert error["limit"] == "key_rate_per_s"
    assert first not in refused.text
    assert other.status_code == 200
    assert health == [200] * 20  # open paths take no token
    assert ready == 200
    assert counted("pml_rate_limit_refusals_total", limit="api_key") == before + 1


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_an_mcp_client_over_its_rate_gets_a_rate_limited_json_rpc_error(
    gateway: Gateway, upstream: Upstream, mode: str
) -> None:
    limits = LimitsSettings(
        key_rate_per_s=SLOW_KEY, auth_failures_per_minute=SLOW_ADDRESS, key_burst=8
    )
    key = await new_key(gateway)
    answered = 0
    async with running_http(gateway, limits=limits) as url:
        async with create_mcp_http_client(headers=bearer(key)) as http:
            transport = streamable_http_client(f"{url}/mcp", http_client=http)
            async with Client(transport, mode=mode) as client:
                with pytest.raises(MCPError) as refused:  # noqa: PT012 - calls until refused
                    for _ in range(20):
                        await client.call_tool("a__echo", {"text": "hi"})
                        answered += 1
            # ending the session is not refused: it frees what the key holds
        async with httpx.AsyncClient(timeout=TIMEOUT) as raw:
            posted = await raw.post(f"{url}/mcp", json=CALL, headers=MCP_HEADERS | bearer(key))
    data: Any = refused.value.error.data
    assert refused.value.error.code == JSONRPC_RATE_LIMITED
    assert data["code"] == "RATE_LIMITED"
    assert data["retryAfterS"] > 0
    assert 0 < answered < 8
    assert len(upstream.calls) == answered  # a refused call never reached the server
    assert posted.status_code == 429
    assert int(posted.headers["retry-after"]) >= 1
    body = posted.json()
    assert body["jsonrpc"] == "2.0"
    assert body["id"] is None
    assert body["error"]["code"] == JSONRPC_RATE_LIMITED
    assert body["error"]["data"]["code"] == "RATE_LIMITED"


async def test_limits_off_refuse_no_key(gateway: Gateway) -> None:
    limits = LimitsSettings(key_rate_per_s=0, key_burst=1)
    key = await new_key(gateway)
    async with running_http(gateway, limits=limits) as url, httpx.AsyncClient() as http:
        for _ in range(30):
            response = await http.get(f"{url}/api/capabilities", headers=bearer(key))
            assert response.status_code == 200


def attempts(row: Any) -> int:
    """The attempts an AUTH_FAILED row stands for: the first of a window is written at
    once; the one written when the window closes counts the ``repeated`` ones after it."""
    return int(row.details.get("repeated", 1))


async def audit_rows(gateway: Gateway, total: int) -> list[Any]:
    """The AUTH_FAILED rows once they account for ``total`` attempts (windows closed)."""
    rows: list[Any] = []
    with anyio.fail_after(20):
        while True:
            await gateway.policy.audit.flush()  # closes windows older than the coalescing
            async with gateway.db.read() as conn:
                statement = sa.select(audit_events).where(audit_events.c.event == "AUTH_FAILED")
                rows = list((await conn.execute(statement)).all())
            if sum(attempts(row) for row in rows) >= total:
                return rows
            await anyio.sleep(0.2)


async def test_200_bad_keys_are_refused_after_the_burst_and_audited_coalesced(
    gateway: Gateway, upstream: Upstream
) -> None:
    limits = LimitsSettings(auth_failures_per_minute=SLOW_ADDRESS, auth_failure_burst=10)
    good = await new_key(gateway)
    keys = [bad_key() for _ in range(200)]
    invalid = counted("pml_auth_failures_total", reason="invalid")
    refused_auth = counted("pml_rate_limit_refusals_total", limit="auth")
    async with running_http(gateway, limits=limits) as url:
        async with from_address("127.0.0.1") as attacker:
            statuses = [
                (await attacker.post(f"{url}/mcp", json=CALL, headers=MCP_HEADERS | bearer(key)))
                for key in keys
            ]
            same_address = await attacker.get(f"{url}/api/capabilities", headers=bearer(good))
        async with from_address("127.0.0.2") as neighbour:
            elsewhere = await neighbour.get(f"{url}/api/capabilities", headers=bearer(good))
            failed_elsewhere = await neighbour.get(
                f"{url}/api/capabilities", headers=bearer(bad_key())
            )
    codes = [response.status_code for response in statuses]
    assert codes[:10] == [401] * 10
    assert codes[10:] == [429] * 190
    last = statuses[-1]
    assert 100 <= int(last.headers["retry-after"]) <= 120  # 0.5 a minute: one every 2 min
    assert last.json()["error"]["data"]["code"] == "RATE_LIMITED"
    assert same_address.status_code == 429  # everything from the address waits
    assert elsewhere.status_code == 200  # a valid key from another address is served
    assert failed_elsewhere.status_code == 401
    assert upstream.calls == []
    assert counted("pml_auth_failures_total", reason="invalid") == invalid + 11
    assert counted("pml_rate_limit_refusals_total", limit="auth") == refused_auth + 191

    rows = await audit_rows(gateway, 202)  # 200 + 1 from here + 1 from the neighbour
    by_address: dict[str, int] = {}
    for row in rows:
        address = row.details["address"]
        by_address[address] = by_address.get(address, 0) + attempts(row)
    assert by_address == {"127.0.0.1": 201, "127.0.0.2": 1}
    assert len(rows) <= 10  # coalesced: a handful of rows, not 202
    assert any(row.details.get("repeated", 0) >= 100 for row in rows)
    assert {(row.org, row.project) for row in rows} == {("acme", "webapp")}  # [scope]
    assert {row.actor for row in rows} == {"anonymous"}
    written = " ".join(str(tuple(row)) for row in rows)
    assert not any(key[:12] in written for key in keys)  # never the key, nor its prefix


SPOOFS = [
    {"X-Forwarded-For": "203.0.113.1"},
    {"X-Forwarded-For": "203.0.113.2, 198.51.100.9"},
    {"Forwarded": "for=203.0.113.3"},
    {"X-Real-IP": "203.0.113.4"},
    {"X-Forwarded-For": "127.0.0.9"},
    {"X-Client-IP": "203.0.113.5"},
    {"True-Client-IP": "203.0.113.6"},
    {"X-Forwarded-For": "not an address"},
]


async def test_a_spoofed_forwarded_header_does_not_escape_the_address_limit(
    gateway: Gateway,
) -> None:
    limits = LimitsSettings(
        key_rate_per_s=SLOW_KEY, auth_failures_per_minute=SLOW_ADDRESS, auth_failure_burst=3
    )
    async with running_http(gateway, limits=limits) as url, from_address("127.0.0.1") as http:
        codes = [
            (
                await http.get(f"{url}/api/capabilities", headers=spoof | bearer(bad_key()))
            ).status_code
            for spoof in SPOOFS
        ]
    assert codes == [401] * 3 + [429] * (len(SPOOFS) - 3)


async def test_behind_a_trusted_proxy_the_forwarded_client_is_the_address(
    gateway: Gateway,
) -> None:
    limits = LimitsSettings(
        key_rate_per_s=SLOW_KEY,
        auth_failures_per_minute=SLOW_ADDRESS,
        auth_failure_burst=2,
        trusted_proxies=["127.0.0.1"],
    )
    good = await new_key(gateway)
    async with running_http(gateway, limits=limits) as url, from_address("127.0.0.1") as proxy:

        async def get(client: str, key: str) -> int:
            headers = {"X-Forwarded-For": client} | bearer(key)
            return (await proxy.get(f"{url}/api/capabilities", headers=headers)).status_code

        attacker = [await get("203.0.113.7", bad_key()) for _ in range(4)]
        other_client = await get("203.0.113.8", good)
        attacker_again = await get("203.0.113.7", good)
    assert attacker == [401, 401, 429, 429]
    assert other_client == 200
    assert attacker_again == 429
