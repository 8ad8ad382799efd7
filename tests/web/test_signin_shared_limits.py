"""Failed dashboard sign-ins are failed API keys: one per-address budget shared with the API
(an IPv6 client by its /64), audited ``AUTH_FAILED`` coalesced, and a flood of new addresses
forgets the least recently failed one, never a locked-out address early."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from starlette.applications import Starlette

from pml.gateway.http import create_app
from pml.gateway.keys import ApiKeys
from pml.limits.keyed import DEFAULT_MAX_KEYS
from pml.sections_limits import LimitsSettings
from pml.web.dashboard.sessions import SESSION_COOKIE
from pml.web.dashboard.signin import LOGIN_CSRF_COOKIE
from policy.conftest import SCOPE, PolicyGateway
from web.conftest import BASE, sign_in

pytestmark = pytest.mark.anyio

SLOW = 0.5  # failures refilled a minute: nothing comes back while a test runs
NOT_A_KEY = "not-a-key"


def limits(burst: int) -> LimitsSettings:
    return LimitsSettings(auth_failures_per_minute=SLOW, auth_failure_burst=burst)


@asynccontextmanager
async def client_at(app: Starlette, address: str) -> AsyncIterator[httpx.AsyncClient]:
    """A browserless client whose requests reach ``app`` from ``address``."""
    transport = httpx.ASGITransport(app=app, client=(address, 50_000))
    async with httpx.AsyncClient(transport=transport, base_url=BASE) as http:
        yield http


async def failed_sign_in(http: httpx.AsyncClient, key: str = NOT_A_KEY) -> int:
    """A sign-in post with a wrong key, its double-submit token in order."""
    http.cookies.set(LOGIN_CSRF_COOKIE, "token")
    data = {"key": key, "login_csrf": "token", "next": "/"}
    answer = await http.post("/ui/login", data=data, headers={"Origin": BASE})
    return answer.status_code


async def admin_key(pg: PolicyGateway) -> str:
    return (await ApiKeys(pg.gateway.db).create(SCOPE.org, SCOPE.project, "ana", role="admin"))[0]


async def test_failed_sign_ins_and_bad_api_keys_spend_one_budget_per_address(
    pg: PolicyGateway,
) -> None:
    admin = await admin_key(pg)
    app = create_app(pg.gateway, limits=limits(burst=4))
    bad_bearer = {"Authorization": "Bearer pml_" + "x" * 43}
    async with client_at(app, "10.0.0.1") as http:
        signs = [await failed_sign_in(http) for _ in range(2)]
        apis = [(await http.get("/api/capabilities", headers=bad_bearer)).status_code for _ in "ab"]
        api_after = await http.get(
            "/api/capabilities", headers={"Authorization": f"Bearer {admin}"}
        )
        refused = await sign_in(http, admin)
        assert SESSION_COOKIE not in http.cookies
    async with client_at(app, "10.0.0.2") as other:
        elsewhere = await sign_in(other, admin)

    assert signs == [401, 401]
    assert apis == [401, 401]
    assert api_after.status_code == 429  # the dashboard's failures count on the API
    assert refused.status_code == 429  # and the API's on the dashboard
    assert 100 <= int(refused.headers["retry-after"]) <= 120
    assert "Too many failed" in refused.text
    assert elsewhere.status_code == 303


async def test_an_agent_key_at_the_login_form_takes_a_token_too(pg: PolicyGateway) -> None:
    agent, _ = await ApiKeys(pg.gateway.db).create(SCOPE.org, SCOPE.project, SCOPE.user)
    app = create_app(pg.gateway, limits=limits(burst=2))
    async with client_at(app, "10.0.0.5") as http:
        codes = [await failed_sign_in(http, agent) for _ in range(3)]
    assert codes == [403, 403, 429]


async def test_failed_sign_ins_are_audited_auth_failed_coalesced_without_the_key(
    pg: PolicyGateway,
) -> None:
    app = create_app(pg.gateway, limits=limits(burst=10))
    async with client_at(app, "10.0.0.3") as http:
        codes = [await failed_sign_in(http, f"pml_{n:043d}") for n in range(3)]
    assert codes == [401] * 3

    rows = await pg.events("AUTH_FAILED")
    assert len(rows) == 1  # three failures, coalesced: the first now, the rest with the window
    row = rows[0]
    assert row["details"] == {"address": "10.0.0.3"}
    assert (row["actor"], row["decided_by"]) == ("anonymous", "auth:api_key")
    assert (row["org"], row["project"]) == (pg.gateway.default_scope.org, SCOPE.project)
    assert "pml_000" not in str(row)


async def test_every_address_of_an_ipv6_64_shares_one_sign_in_budget(pg: PolicyGateway) -> None:
    admin = await admin_key(pg)
    app = create_app(pg.gateway, limits=limits(burst=3))
    codes: list[int] = []
    for host in ("2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2:ffff::9"):
        async with client_at(app, host) as http:
            codes.append(await failed_sign_in(http))
    async with client_at(app, "2001:db8:1:2::77") as http:
        same_block = await sign_in(http, admin)
    async with client_at(app, "2001:db8:1:3::1") as http:
        next_block = await sign_in(http, admin)

    assert codes == [401, 401, 401]
    assert same_block.status_code == 429
    assert next_block.status_code == 303
    addresses = {row["details"]["address"] for row in await pg.events("AUTH_FAILED")}
    assert "2001:db8:1:2::/64" in addresses


async def test_a_flood_of_new_addresses_forgets_the_least_recent_never_a_locked_out_one(
    pg: PolicyGateway,
) -> None:
    admin = await admin_key(pg)
    app = create_app(pg.gateway, limits=limits(burst=2))
    transport = httpx.ASGITransport(app=app, client=("10.1.0.0", 50_000))

    async def fail_from(host: str) -> int:
        transport.client = (host, 50_000)
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as http:
            return await failed_sign_in(http)

    flood = [f"10.1.{n // 250}.{n % 250 + 1}" for n in range(DEFAULT_MAX_KEYS)]
    for host in flood[:-2]:  # every one of them still holds a spent token
        assert await fail_from(host) == 401
    locked = [await fail_from("10.9.9.9") for _ in range(3)]
    for host in flood[-2:]:  # now more addresses are tracked than the limiter keeps
        assert await fail_from(host) == 401

    async with client_at(app, "10.9.9.9") as http:
        still = await sign_in(http, admin)
    # the least recently failed address was forgotten: a full budget again (2 tries, not 1)
    oldest = [await fail_from(flood[0]) for _ in range(3)]

    assert locked == [401, 401, 429]
    assert still.status_code == 429
    assert oldest == [401, 401, 429]
