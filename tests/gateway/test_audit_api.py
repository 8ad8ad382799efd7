"""``GET /api/audit`` on a real uvicorn with API keys: tenants, roles, paging, hostile
parameters. ``acme`` and ``globex`` are admin keys (every user's events of their project);
``agent`` is an agent key of acme.webapp, for ``erwan`` (his own events only)."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from pml.gateway.http import running_http
from pml.gateway.keys import ApiKeys
from pml.gateway.server import Gateway
from pml.policy.audit import AuditLog
from pml.registry.scope import Scope
from pml.storage.audit_repo import AuditEntry, AuditRepository
from pml.storage.tables import api_keys

pytestmark = pytest.mark.anyio

TIMEOUT = httpx.Timeout(10.0)
AT = datetime(2025, 6, 1, 12, 30, tzinfo=UTC)


@dataclass
class Served:
    url: str
    gateway: Gateway
    acme: str
    globex: str
    agent: str

    async def get(self, key: str | None, query: str = "") -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
        async with httpx.AsyncClient(timeout=TIMEOUT) as http:
            return await http.get(f"{self.url}/api/audit{query}", headers=headers)

    async def ok(self, query: str = "", key: str | None = None) -> dict[str, Any]:
        response = await self.get(key or self.acme, query)
        assert response.status_code == 200, response.text
        return response.json()

    async def insert(self, *entries: AuditEntry) -> None:
        await AuditRepository(self.gateway.db).insert_many(list(entries))


def entry(index: int, org: str = "acme", project: str = "webapp", **fields: Any) -> AuditEntry:
    values: dict[str, Any] = {"event": "TOOL_CALL_END", "details": {"n": index}}
    values.update(fields)
    return AuditEntry(ts=AT + timedelta(seconds=index), org=org, project=project, **values)


@pytest.fixture
async def served(gateway: Gateway) -> AsyncGenerator[Served]:
    keys = ApiKeys(gateway.db)
    acme = (await keys.create("acme", "webapp", user="ana", role="admin"))[0]
    globex = (await keys.create("globex", "site", user="gina", role="admin"))[0]
    agent = (await keys.create("acme", "webapp", user="erwan"))[0]
    async with running_http(gateway) as url:
        yield Served(url, gateway, acme, globex, agent)


@pytest.mark.parametrize("key", [None, "pml_not-a-real-key-000000000000000000", "x" * 600])
async def test_requests_without_a_valid_key_get_401_and_no_events(
    served: Served, key: str | None
) -> None:
    await served.insert(entry(1))
    response = await served.get(key)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "UNAUTHORIZED"
    assert "items" not in response.text


async def test_a_key_sees_only_its_own_org_and_project(served: Served) -> None:
    await served.insert(
        entry(1),
        entry(2, org="globex", project="site", details={"secret_plan": "globex only"}),
        entry(3, project="other"),
        entry(4),
    )
    acme = await served.ok()
    assert [item["id"] for item in acme["items"]] == [1, 4]
    assert {item["scope"] for item in acme["items"]} == {"acme.webapp"}
    globex = await served.ok(key=served.globex)
    assert [item["id"] for item in globex["items"]] == [2]
    assert "globex only" not in str(acme)
    # a parameter naming another tenant is refused, never obeyed
    response = await served.get(served.acme, "?org=globex&project=site")
    assert response.status_code == 400


async def test_items_carry_every_field_and_the_next_after_id(served: Served) -> None:
    await served.insert(
        entry(1, actor="erwan", request_id="r-1", decided_by="policy:file_task", details={"ü": "✓"})
    )
    page = await served.ok()
    assert page == {
        "items": [
            {
                "id": 1,
                "ts": "2025-06-01T12:30:01+00:00",
                "event": "TOOL_CALL_END",
                "actor": "erwan",
                "scope": "acme.webapp",
                "org": "acme",
                "project": "webapp",
                "request_id": "r-1",
                "details": {"ü": "✓"},
                "decided_by": "policy:file_task",
            }
        ],
        "next_after_id": 1,
    }


async def test_paging_with_after_id_visits_every_event_once(served: Served) -> None:
    await served.insert(*(entry(index) for index in range(1, 8)))
    await served.insert(entry(100, org="globex", project="site"))
    seen: list[int] = []
    after = 0
    while True:
        page = await served.ok(f"?after_id={after}&limit=3")
        if page["next_after_id"] is None:
            assert page["items"] == []
            break
        seen += [item["details"]["n"] for item in page["items"]]
        after = page["next_after_id"]
    assert seen == [1, 2, 3, 4, 5, 6, 7]
    newest = await served.ok("?limit=2")  # without after_id: the newest, oldest first
    assert [item["details"]["n"] for item in newest["items"]] == [6, 7]
    assert len((await served.ok())["items"]) == 7  # default limit 100


async def test_event_filters_repeat(served: Served) -> None:
    await served.insert(
        entry(1, event="POLICY_DENIED"),
        entry(2, event="ROUTER_OUTPUT"),
        entry(3, event="PERMISSION_DENIED"),
    )
    page = await served.ok("?event=POLICY_DENIED&event=PERMISSION_DENIED")
    assert [item["event"] for item in page["items"]] == ["POLICY_DENIED", "PERMISSION_DENIED"]
    assert (await served.ok("?event=CAPABILITY_CREATED"))["items"] == []


BAD_QUERIES = [
    "?limit=0",
    "?limit=1001",
    "?limit=abc",
    "?limit=",
    "?limit=%EF%BC%91",  # a fullwidth digit one, which int() would accept
    "?limit=1&limit=2",
    "?limit=1e3",
    "?after_id=-1",
    "?after_id=99999999999999999999",
    "?after_id=1%20OR%201=1",
    "?after_id=" + "9" * 5000,
    "?event=policy_denied",
    "?event=POLICY_DENIED%27;%20DROP%20TABLE%20audit_events;--",
    "?event=" + "A" * 100,
    "?" + "&".join(["event=A"] * 33),
    "?org=globex",
    "?%E2%80%AEevil=1",
]


@pytest.mark.parametrize("query", BAD_QUERIES, ids=lambda query: query[:30])
async def test_bad_parameters_get_400_invalid_input(served: Served, query: str) -> None:
    await served.insert(entry(1))
    response = await served.get(served.acme, query)
    assert response.status_code == 400
    body = response.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == "INVALID_INPUT"
    assert len(body["error"]["message"]) < 200
    assert len((await served.ok())["items"]) == 1  # nothing was changed


async def test_events_of_an_audit_log_come_back_scrubbed(served: Served) -> None:
    log = AuditLog(served.gateway.db, None)
    log.emit(
        "PERMISSION_DENIED",
        scope=Scope("acme", "webapp", "erwan"),
        details={"args": {"api_key": "sk-live-4f9a8b7c6d5e4f3a2b1c0d9e"}},
        decided_by="config:permissions.deny[0]",
    )
    await log.flush()
    [item] = (await served.ok("?event=PERMISSION_DENIED"))["items"]
    assert item["details"] == {"args": {"api_key": "[REDACTED]"}}
    assert item["decided_by"] == "config:permissions.deny[0]"


async def test_an_agent_key_sees_only_its_own_users_events(served: Served) -> None:
    await served.insert(
        entry(1, actor="erwan"),
        entry(2, actor="lea", details={"plan": "lea only"}),
        entry(3),  # no actor: a system event, an admin's to read
        entry(4, actor="pml"),
        entry(5, actor="erwan", event="PERMISSION_DENIED"),
        entry(6, org="globex", project="site", actor="erwan"),
        entry(7, project="other", actor="erwan"),
        entry(8, actor="Erwan"),
        entry(9, actor="erwan%"),
    )

    mine = await served.ok(key=served.agent)

    assert [item["details"]["n"] for item in mine["items"]] == [1, 5]
    assert {item["actor"] for item in mine["items"]} == {"erwan"}
    assert "lea only" not in str(mine)
    # the filters narrow what the key sees, never widen it
    denied = await served.ok("?event=PERMISSION_DENIED&event=TOOL_CALL_END", key=served.agent)
    assert [item["details"]["n"] for item in denied["items"]] == [1, 5]
    assert (await served.ok("?after_id=1", key=served.agent))["next_after_id"] == 5
    for query in ("?actor=lea", "?role=admin"):
        assert (await served.get(served.agent, query)).status_code == 400
    # asking for another user's events is a filter that matches none of the key's own
    assert (await served.ok("?user=lea", key=served.agent))["items"] == []
    assert [
        i["details"]["n"] for i in (await served.ok("?user=erwan", key=served.agent))["items"]
    ] == [
        1,
        5,
    ]


async def test_an_admin_key_sees_every_users_events_of_its_project_only(served: Served) -> None:
    await served.insert(
        entry(1, actor="erwan"),
        entry(2, actor="lea"),
        entry(3),
        entry(4, org="globex", project="site", actor="ana"),
        entry(5, project="other", actor="ana"),
    )

    every = await served.ok(key=served.acme)
    globex = await served.ok(key=served.globex)

    assert [item["details"]["n"] for item in every["items"]] == [1, 2, 3]
    assert [item["details"]["n"] for item in globex["items"]] == [4]


async def test_an_agent_sees_the_events_its_requests_recorded(served: Served) -> None:
    log = AuditLog(served.gateway.db, None)
    log.emit("TOOL_CALL_END", scope=Scope("acme", "webapp", "erwan"), details={"n": 1})
    log.emit("TOOL_CALL_END", scope=Scope("acme", "webapp", "lea"), details={"n": 2})
    await log.flush()

    mine = await served.ok(key=served.agent)
    every = await served.ok(key=served.acme)

    assert [item["details"] for item in mine["items"]] == [{"n": 1}]
    assert [item["details"] for item in every["items"]] == [{"n": 1}, {"n": 2}]


async def test_an_authenticator_returning_a_bare_scope_is_treated_as_an_agent(
    gateway: Gateway,
) -> None:
    async def scope_only(token: str) -> Scope | None:
        return Scope("acme", "webapp", "erwan") if token == "pml_token-of-an-older-kind" else None

    await AuditRepository(gateway.db).insert_many([entry(1, actor="erwan"), entry(2, actor="lea")])
    async with running_http(gateway, authenticate=scope_only) as url:
        served = Served(url, gateway, "pml_token-of-an-older-kind", "", "")
        page = await served.ok()
        refused = await served.get("pml_another-token-0000000000")

    assert [item["actor"] for item in page["items"]] == ["erwan"]
    assert refused.status_code == 401


async def test_a_key_whose_stored_role_is_unknown_gets_401(served: Served) -> None:
    await served.insert(entry(1, actor="erwan"))
    async with served.gateway.db.transaction() as conn:
        await conn.execute(
            api_keys.update().where(api_keys.c.user_id == "erwan").values(role="root")
        )

    response = await served.get(served.agent)

    assert response.status_code == 401
    assert "items" not in response.text
    # The admin key still works. The refusal itself is audited (AUTH_FAILED, written in the
    # background: it may or may not be there yet), and nothing else was added.
    items = (await served.ok())["items"]
    assert [item["actor"] for item in items if item["event"] != "AUTH_FAILED"] == ["erwan"]


async def test_the_dashboards_filters_narrow_the_api_too(served: Served) -> None:
    fqdn = "acme.webapp.fs.read_json.a7f3"
    await served.insert(
        entry(1, actor="erwan", details={"n": 1, "tool": "fs:write_file"}, decided_by="user:ana"),
        entry(2, actor="lea", details={"n": 2, "tool": "fs:read_file", "fqdn": fqdn}),
        entry(3, actor="erwan", details={"n": 3, "tool": "fs:write_file"}, request_id="r-1"),
        entry(4, details={"n": 4, "capability": fqdn}),
    )

    def numbers(answer: dict[str, Any]) -> list[int]:
        return [item["details"]["n"] for item in answer["items"]]

    assert numbers(await served.ok("?tool=fs:write_file")) == [1, 3]
    assert numbers(await served.ok(f"?capability={fqdn}")) == [2, 4]
    assert numbers(await served.ok("?decided_by=user:ana")) == [1]
    assert numbers(await served.ok("?request_id=r-1&user=erwan")) == [3]
    since = (AT + timedelta(seconds=2)).isoformat()
    until = (AT + timedelta(seconds=4)).isoformat().replace("+00:00", "Z")
    assert numbers(await served.ok(f"?since={since.replace('+', '%2B')}&until={until}")) == [2, 3]
    assert numbers(await served.ok("?before_id=3&limit=1")) == [2]
    assert numbers(await served.ok("?user=lea", key=served.globex)) == []


@pytest.mark.parametrize(
    "query",
    [
        "?since=yesterday",
        "?since=2026-11-01T00:00",  # no time zone
        "?until=" + "9" * 50,
        "?tool=" + "x" * 401,
        "?user=a%00b",
        "?decided_by=",
        "?before_id=-1",
        "?before_id=1&after_id=2",
        "?tool=a&tool=b",
    ],
)
async def test_bad_filters_get_400_invalid_input(served: Served, query: str) -> None:
    response = await served.get(served.acme, query)
    assert response.status_code == 400, query
    assert response.json()["error"]["code"] == "INVALID_INPUT"
