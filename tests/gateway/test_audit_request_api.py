"""``GET /api/audit/requests/{id}`` on a real uvicorn with API keys: the record ``pml audit
show --json`` prints, under the rules of ``GET /api/audit`` (tenant from the key, an agent
key sees its own user's events only), and hostile ids."""

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
from pml.policy.pipeline_view import request_record
from pml.storage.audit_repo import AuditEntry, AuditRepository

pytestmark = pytest.mark.anyio

TIMEOUT = httpx.Timeout(10.0)
AT = datetime(2025, 6, 1, 12, 30, tzinfo=UTC)
REQUEST = "4f2a9c01d3e5b7a9"


@dataclass
class Served:
    url: str
    gateway: Gateway
    admin: str
    agent: str
    other_agent: str
    globex: str

    async def get(self, key: str | None, path: str) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
        async with httpx.AsyncClient(timeout=TIMEOUT) as http:
            return await http.get(f"{self.url}/api/audit/requests/{path}", headers=headers)

    async def record(self, key: str, request_id: str = REQUEST) -> dict[str, Any]:
        response = await self.get(key, request_id)
        assert response.status_code == 200, response.text
        return response.json()

    async def insert(self, *entries: AuditEntry) -> None:
        await AuditRepository(self.gateway.db).insert_many(list(entries))


def entry(index: int, event: str, details: dict[str, Any], **fields: Any) -> AuditEntry:
    values: dict[str, Any] = {
        "org": "acme",
        "project": "webapp",
        "actor": "erwan",
        "request_id": REQUEST,
        "decided_by": None,
    }
    values.update(fields)
    return AuditEntry(ts=AT + timedelta(seconds=index), event=event, details=details, **values)


# erwan's run paused on an ask; ana (a person) approved it
PAUSED = [
    entry(0, "ROUTER_OUTPUT", {"intent": "file_edit", "source": "pml_execute"}),
    entry(1, "PERMISSION_CHECK", {"tool": "fs:write_file", "outcome": "ask"}, decided_by="ask"),
    entry(2, "APPROVAL_REQUIRED", {"workflow_id": "wf_1", "tool": "fs:write_file"}),
    entry(
        3,
        "APPROVAL_DECIDED",
        {"workflow_id": "wf_1", "tool": "fs:write_file", "outcome": "approved"},
        actor="ana",
        decided_by="user:ana",
    ),
]


@pytest.fixture
async def served(gateway: Gateway) -> AsyncGenerator[Served]:
    keys = ApiKeys(gateway.db)
    admin = (await keys.create("acme", "webapp", user="ana", role="admin"))[0]
    agent = (await keys.create("acme", "webapp", user="erwan"))[0]
    other_agent = (await keys.create("acme", "webapp", user="lea"))[0]
    globex = (await keys.create("globex", "site", user="gina", role="admin"))[0]
    async with running_http(gateway) as url:
        yield Served(url, gateway, admin, agent, other_agent, globex)


@pytest.mark.parametrize("key", [None, "pml_not-a-real-key-000000000000000000", "x" * 600])
async def test_without_a_valid_key_it_is_401_and_nothing_else(
    served: Served, key: str | None
) -> None:
    await served.insert(*PAUSED)
    response = await served.get(key, REQUEST)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "UNAUTHORIZED"
    assert "fs:write_file" not in response.text


async def test_an_admin_key_gets_the_record_pml_audit_show_prints(served: Served) -> None:
    await served.insert(*PAUSED, entry(4, "TOOL_CALL_END", {"n": 1}, request_id="other"))
    record = await served.record(served.admin)
    expected = await request_record(
        AuditRepository(served.gateway.db), org="acme", project="webapp", request_id=REQUEST
    )
    assert record == expected
    assert record["permissions"] == {
        "asked": ["fs:write_file"],
        "granted": ["fs:write_file"],
        "denied": [],
    }
    assert [a["decided_by"] for a in record["approvals"]] == [None, "user:ana"]
    assert len(record["events"]) == len(PAUSED)


async def test_an_agent_key_sees_only_its_own_users_events_of_the_request(
    served: Served,
) -> None:
    await served.insert(*PAUSED)
    mine = await served.record(served.agent)
    assert [e["event"] for e in mine["events"]] == [e.event for e in PAUSED[:3]]
    assert "ana" not in str(mine["approvals"])
    assert mine["permissions"]["granted"] == []
    response = await served.get(served.other_agent, REQUEST)  # lea: none of it is hers
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "NOT_FOUND"
    assert "fs:write_file" not in response.text


async def test_another_tenants_request_is_not_found(served: Served) -> None:
    await served.insert(
        *PAUSED, entry(9, "ROUTER_OUTPUT", {"secret_plan": "globex only"}, org="globex")
    )
    response = await served.get(served.globex, REQUEST)
    assert response.status_code == 404
    assert "fs:write_file" not in response.text
    unknown = await served.get(served.admin, "never-seen")
    assert unknown.status_code == 404
    assert "No audit events for request never-seen" in unknown.json()["error"]["message"]


@pytest.mark.parametrize(
    "path",
    [
        "x" * 65,
        "x" * 10_000,
        "%27%3B%20DROP%20TABLE%20audit_events%3B%20--",
        "%E6%97%A5%E6%9C%AC",
        "a%0Ab",
        "a%1B%5B2J",
        "a%E2%80%AEb",
        "a%20b",
        f"{REQUEST}?limit=5",
    ],
)
async def test_a_hostile_id_or_parameter_is_400_and_reads_nothing(
    served: Served, path: str
) -> None:
    await served.insert(*PAUSED)
    response = await served.get(served.admin, path)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "INVALID_INPUT"
    assert "fs:write_file" not in response.text
    assert len(error["message"]) < 200
    assert (await served.record(served.admin))["request_id"] == REQUEST  # the table is intact
