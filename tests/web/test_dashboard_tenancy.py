"""The dashboard as one person uses it: what they do there (approve, rename, revoke) is on
the audit page with their name as the decider, and an admin of another org sees none of
it on any page."""

from __future__ import annotations

import httpx
import pytest

from pml.gateway.http import create_app
from pml.gateway.keys import ApiKeys
from policy.conftest import SCOPE
from web.conftest import BASE, WebHarness, sign_in

pytestmark = pytest.mark.anyio

WRITE = 'await mcp.filesystem.write_file(path="/w/notes.md", content="hello")\nreturn "ok"'
READ = 'return await mcp.filesystem.read_text_file(path="/w/notes.md")'
PAGES = ("/ui/approvals", "/ui/capabilities", "/ui/audit", "/ui/usage")


async def act_as_a_person(web: WebHarness) -> dict[str, str]:
    """The agent learns a capability and waits for an approval; the person approves it
    "always", renames the capability, then revokes the grant; returns what was touched."""
    failed, learned = await web.pg.execute(code=READ, intent="read the report file")
    assert not failed, learned
    failed, paused = await web.pg.execute(code=WRITE, intent="write the report file")
    assert not failed, paused
    assert paused["status"] == "approval_required", paused
    workflow_id = str(paused["workflowId"])
    decided = await web.post(f"/ui/approvals/{workflow_id}/decide", {"decision": "always"})
    assert decided.status_code == 303
    failed, done = await web.pg.execute(
        intent="go on", continue_workflow={"workflow_id": workflow_id, "approved": True}
    )
    assert not failed, done
    fqdn = str(learned["capabilityFqdn"])
    renamed = await web.post(f"/ui/capabilities/{fqdn}/rename", {"new_name": "notes:read_mine"})
    assert renamed.status_code == 303
    [grant] = await web.pg.gateway.policy.grants.list(SCOPE)
    revoked = await web.post(f"/ui/usage/grants/{grant.id}/revoke", {})
    assert revoked.status_code == 303
    await web.pg.gateway.policy.audit.flush()
    return {"workflow": workflow_id, "fqdn": fqdn, "grant": grant.id}


async def test_what_a_person_did_on_the_dashboard_is_on_its_audit_page(web: WebHarness) -> None:
    touched = await act_as_a_person(web)
    page = await web.get("/ui/audit", decided_by="user:ana")
    assert page.status_code == 200
    for event in ("APPROVAL_DECIDED", "PERMISSION_GRANTED", "PERMISSION_REVOKED"):
        assert event in page.text, event
    renamed = await web.get("/ui/audit", event="CAPABILITY_RENAMED", capability=touched["fqdn"])
    assert "CAPABILITY_RENAMED" in renamed.text
    assert "notes:read_mine" in renamed.text
    written = await web.get("/ui/audit", tool="filesystem:write_file", event="TOOL_CALL_END")
    assert "TOOL_CALL_END" in written.text


async def test_an_admin_of_another_org_sees_nothing_of_it_on_any_page(web: WebHarness) -> None:
    touched = await act_as_a_person(web)
    key, _ = await ApiKeys(web.pg.gateway.db).create("globex", "webapp", "gus", role="admin")
    transport = httpx.ASGITransport(app=create_app(web.pg.gateway))
    async with httpx.AsyncClient(transport=transport, base_url=BASE) as http:
        assert (await sign_in(http, key)).status_code == 303
        for path in PAGES:
            page = await http.get(path)
            assert page.status_code == 200, path
            for secret in (touched["fqdn"], "notes:read_mine", "erwan", touched["grant"][:8]):
                assert secret not in page.text, (path, secret)
            assert "acme" not in page.text.replace("acme.example", ""), path
        for path in (
            f"/ui/capabilities/{touched['fqdn']}",
            f"/ui/approvals/{touched['workflow']}",
        ):
            assert (await http.get(path)).status_code == 404, path
