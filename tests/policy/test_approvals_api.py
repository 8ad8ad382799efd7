"""``/api/approvals`` on a real uvicorn with API keys: only an admin key decides."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from pml.gateway.http import running_http
from pml.gateway.keys import ApiKeys
from policy.conftest import SCOPE, OpenPolicyGateway, PolicyGateway

pytestmark = pytest.mark.anyio

SAVE = """
note = await mcp.filesystem.read_text_file(path="/w/note.txt")
await mcp.filesystem.write_file(path="/w/copy.txt", content=note)
return "saved"
"""


async def _post(url: str, key: str | None, workflow_id: str, body: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    async with httpx.AsyncClient(timeout=10.0) as http:
        if isinstance(body, bytes):
            return await http.post(
                f"{url}/api/approvals/{workflow_id}", headers=headers, content=body
            )
        return await http.post(f"{url}/api/approvals/{workflow_id}", headers=headers, json=body)


async def _get(url: str, key: str, path: str = "") -> httpx.Response:
    async with httpx.AsyncClient(timeout=10.0) as http:
        return await http.get(
            f"{url}/api/approvals{path}", headers={"Authorization": f"Bearer {key}"}
        )


async def _paused(pg: PolicyGateway) -> str:
    is_error, paused = await pg.execute(intent="copy the note to a new file", code=SAVE)
    assert is_error is False
    assert paused["status"] == "approval_required"
    return str(paused["workflowId"])


async def _resume(pg: PolicyGateway, workflow: str) -> tuple[bool, dict[str, Any]]:
    return await pg.execute(
        intent="resume", continue_workflow={"workflow_id": workflow, "approved": True}
    )


async def test_an_admin_key_approves_and_the_agent_then_resumes_the_run(
    open_policy_gateway: OpenPolicyGateway,
) -> None:
    async with open_policy_gateway() as pg:
        keys = ApiKeys(pg.gateway.db)
        admin = (await keys.create("acme", "webapp", user="ana", role="admin"))[0]
        agent = (await keys.create("acme", "webapp", user="erwan"))[0]
        second_agent = (await keys.create("acme", "webapp", user="erwan", role="agent"))[0]
        other_admin = (await keys.create("globex", "webapp", user="boss", role="admin"))[0]
        workflow = await _paused(pg)
        async with running_http(pg.gateway) as url:
            missing = await _post(url, None, workflow, {"approved": True})
            as_agents = [
                await _post(url, key, workflow, {"approved": True, "grant": "always"})
                for key in (agent, second_agent)
            ]
            agent_list = await _get(url, agent)
            foreign = await _post(url, other_admin, workflow, {"approved": True})
            listed = await _get(url, admin)
            shown = await _get(url, admin, f"/{workflow}")
            still_pending = await _resume(pg, workflow)
            done = await _post(url, admin, workflow, {"approved": True, "grant": "session"})
            twice = await _post(url, admin, workflow, {"approved": False})
            resumed = await _resume(pg, workflow)
            replayed = await _post(url, admin, workflow, {"approved": True})
    assert missing.status_code == 401
    assert [r.status_code for r in as_agents] == [403, 403]
    assert all(r.json()["error"]["code"] == "FORBIDDEN" for r in as_agents)
    assert agent_list.status_code == 403
    assert foreign.status_code == 404
    assert listed.status_code == 200
    [item] = listed.json()["items"]
    assert (item["workflowId"], item["tool"], item["user"]) == (
        workflow,
        "filesystem:write_file",
        "erwan",
    )
    assert shown.json()["arguments"][0]["name"] == "path"
    assert still_pending[1]["status"] == "approval_required"
    assert still_pending[1]["pending"] is True
    assert done.status_code == 200, done.text
    assert (done.json()["status"], done.json()["grant"], done.json()["decidedBy"]) == (
        "approved",
        "session",
        "user:ana",
    )
    assert twice.status_code == 409
    assert twice.json()["error"]["code"] == "ALREADY_DECIDED"
    assert resumed[1]["status"] == "success", resumed
    assert resumed[1]["result"] == "saved"
    assert pg.sent("filesystem") == ["read_text_file", "write_file"]
    assert replayed.status_code == 404  # the workflow resumed: nothing left to decide
    [grant] = await pg.gateway.policy.grants.list(SCOPE)
    assert grant.max_uses is None  # session
    [decided] = await pg.events("APPROVAL_DECIDED")
    assert (decided["decided_by"], decided["actor"], decided["details"]["outcome"]) == (
        "user:ana",
        "ana",
        "approved",
    )


async def test_hostile_bodies_and_ids_are_400_or_404_and_decide_nothing(
    open_policy_gateway: OpenPolicyGateway,
) -> None:
    async with open_policy_gateway() as pg:
        admin = (await ApiKeys(pg.gateway.db).create("acme", "webapp", user="ana", role="admin"))[0]
        workflow = await _paused(pg)
        async with running_http(pg.gateway) as url:
            bad = [
                await _post(url, admin, workflow, body)
                for body in (
                    {"approved": "yes"},
                    {"approved": True, "grant": "forever"},
                    {"approved": True, "extra": 1},
                    {"approved": False, "grant": "always"},
                    [True],
                    b"{not json",
                    b"x" * 10_000,
                    b"[" * 4_000,  # nested deeper than the JSON parser goes
                    {},
                )
            ]
            unknown = [
                await _post(url, admin, wid, {"approved": True})
                for wid in ("wf_' OR 1=1 --", "wf_\u202egnp.exe", "x" * 3000, "wf_" + "0" * 24)
            ]
            listed = await _get(url, admin, "?user=mallory")
    assert [r.status_code for r in bad] == [400] * len(bad)
    assert all(r.json()["error"]["code"] == "INVALID_INPUT" for r in bad)
    assert [r.status_code for r in unknown] == [404] * len(unknown)
    assert listed.status_code == 400
    assert await pg.gateway.policy.grants.list(SCOPE) == []
    assert await pg.events("APPROVAL_DECIDED") == []


async def test_a_persons_denial_over_http_ends_the_run_at_its_resume(
    open_policy_gateway: OpenPolicyGateway,
) -> None:
    async with open_policy_gateway() as pg:
        admin = (await ApiKeys(pg.gateway.db).create("acme", "webapp", user="ana", role="admin"))[0]
        workflow = await _paused(pg)
        async with running_http(pg.gateway) as url:
            refused = await _post(url, admin, workflow, {"approved": False})
        is_error, answer = await _resume(pg, workflow)
    assert refused.status_code == 200
    assert refused.json()["status"] == "denied"
    assert is_error is True
    assert answer["error"]["code"] == "PERMISSION_DENIED"
    assert "denied by user:ana" in answer["error"]["message"]
    assert pg.sent("filesystem") == ["read_text_file"]
    assert await pg.capabilities() == 0
