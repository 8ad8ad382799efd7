"""``POST /api/approvals/{workflow_id}`` on a real uvicorn with API keys."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from pml.gateway.http import running_http
from pml.gateway.keys import ApiKeys
from policy.conftest import OpenPolicyGateway, PolicyGateway

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


async def _paused(pg: PolicyGateway) -> str:
    is_error, paused = await pg.execute(intent="copy the note to a new file", code=SAVE)
    assert is_error is False
    assert paused["status"] == "approval_required"
    return str(paused["workflowId"])


async def test_approving_over_http_resumes_the_run(open_policy_gateway: OpenPolicyGateway) -> None:
    async with open_policy_gateway() as pg:
        keys = ApiKeys(pg.gateway.db)
        owner = (await keys.create("acme", "webapp", user="erwan"))[0]
        stranger = (await keys.create("acme", "webapp", user="mallory"))[0]
        other_org = (await keys.create("globex", "webapp", user="erwan"))[0]
        workflow = await _paused(pg)
        async with running_http(pg.gateway) as url:
            missing = await _post(url, None, workflow, {"approved": True})
            foreign = [
                await _post(url, k, workflow, {"approved": True}) for k in (stranger, other_org)
            ]
            bad = [
                await _post(url, owner, workflow, body)
                for body in (
                    {"approved": "yes"},
                    {"approved": True, "grant": "forever"},
                    {"approved": True, "extra": 1},
                    [True],
                    b"{not json",
                    b"x" * 10_000,
                    b"[" * 4_000,  # nested deeper than the JSON parser goes
                    {},
                )
            ]
            done = await _post(url, owner, workflow, {"approved": True, "grant": "session"})
            again = await _post(url, owner, workflow, {"approved": True})
    assert missing.status_code == 401
    assert [r.status_code for r in foreign] == [404, 404]
    assert all(r.json()["error"]["code"] == "NOT_FOUND" for r in foreign)
    assert [r.status_code for r in bad] == [400] * len(bad)
    assert all(r.json()["error"]["code"] == "INVALID_INPUT" for r in bad)
    assert done.status_code == 200, done.text
    assert done.json()["status"] == "success"
    assert done.json()["result"] == "saved"
    assert pg.sent("filesystem") == ["read_text_file", "write_file"]
    assert again.status_code == 404
    [grant] = await pg.gateway.policy.grants.list(pg.gateway.default_scope)
    assert grant.max_uses is None  # session


async def test_refusing_over_http_is_403_and_runs_nothing_more(
    open_policy_gateway: OpenPolicyGateway,
) -> None:
    async with open_policy_gateway() as pg:
        owner = (await ApiKeys(pg.gateway.db).create("acme", "webapp", user="erwan"))[0]
        workflow = await _paused(pg)
        async with running_http(pg.gateway) as url:
            refused = await _post(url, owner, workflow, {"approved": False})
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "PERMISSION_DENIED"
    assert pg.sent("filesystem") == ["read_text_file"]
    assert await pg.capabilities() == 0
