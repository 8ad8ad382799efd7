"""The approvals page: a person sees what an agent's paused run waits for, in full and
escaped, decides it with a form only this session can post, and the run goes on (or stops)
when the agent calls continue_workflow."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from pml.gateway.http import create_app
from pml.gateway.keys import ApiKeys
from pml.storage.tables import workflow_state
from pml.storage.types import utc_now
from policy.conftest import SCOPE
from web.conftest import BASE, WebHarness, sign_in

pytestmark = pytest.mark.anyio

WRITE = """
await mcp.filesystem.write_file(path=args.get("dst", "/w/out.txt"), content=args.get("text", "x"))
return "written"
"""
INTENT = "write the report file"
LIVE_REGION = re.compile(r'<div id="approvals-live"[^>]*>(.*)</div>\n</main>', re.DOTALL)


async def _pause(web: WebHarness, *, intent: str = INTENT, **args: Any) -> str:
    is_error, paused = await web.pg.execute(intent=intent, code=WRITE, args=args)
    assert is_error is False
    assert paused["status"] == "approval_required", paused
    return str(paused["workflowId"])


async def _continue(web: WebHarness, workflow_id: str) -> tuple[bool, dict[str, Any]]:
    answer = {"workflow_id": workflow_id, "approved": True}
    return await web.pg.execute(intent="go on", continue_workflow=answer)


async def _status(web: WebHarness, workflow_id: str) -> str:
    desk = web.pg.gateway.policy.approvals.desk
    view = await desk.show(workflow_id, org=SCOPE.org, project=SCOPE.project)
    return str(view["status"])


def _card(page: str, workflow_id: str) -> str:
    start = page.index(f'<article class="approval card status-pending" id="{workflow_id}"')
    return page[start : page.index("</article>", start)]


async def test_a_paused_write_shows_everything_a_person_must_see_with_the_path_first(
    web: WebHarness,
) -> None:
    workflow_id = await _pause(web, dst="/srv/app/main.py", text="print('hi')")
    page = await web.get("/ui/approvals")
    assert page.status_code == 200
    card = _card(page.text, workflow_id)
    for shown in (
        "<code>filesystem:write_file</code>",
        "on server <code>filesystem</code>",
        "<code>file_write</code>",
        "<code>file_edit</code>",  # the classified intent
        INTENT,  # the stated one
        "<code>default:ask:file_write</code>",  # the rule that asked
        "<dt>Requested by</dt><dd>erwan</dd>",
        "<dt>Requested</dt><dd><time datetime=",
        "<dt>Expires</dt><dd><time datetime=",
        "within 15 min",  # what "once" covers
        "every call of filesystem:write_file by erwan, with any arguments, for 8 h",
        "until revoked",
        f'value="{web.csrf}"',
    ):
        assert shown in card, shown
    assert card.index("/srv/app/main.py") < card.index("print('hi')")
    assert '<li class="arg target">' in card
    assert card.count('class="tag">target</span>') == 1  # the path only
    for label in ("Approve once", "Approve for the session", "Always approve", "Deny"):
        assert f'aria-label="{label}: filesystem:write_file"' in card
    assert web.pg.sent("filesystem") == []


async def test_approving_once_on_the_page_lets_the_agents_run_write_exactly_once(
    web: WebHarness,
) -> None:
    workflow_id = await _pause(web)
    _, waiting = await _continue(web, workflow_id)
    assert waiting["pending"] is True  # nobody decided yet
    assert web.pg.sent("filesystem") == []
    decided = await web.post(f"/ui/approvals/{workflow_id}/decide", {"decision": "once"})
    assert decided.status_code == 303
    assert decided.headers["location"] == f"/ui/approvals?decided={workflow_id}&as=once"
    after = await web.get(decided.headers["location"])
    assert f"Approval {workflow_id} approved once." in after.text
    assert "Decided, waiting for the agent" in after.text
    assert "by user:ana" in after.text
    is_error, done = await _continue(web, workflow_id)
    assert is_error is False, done
    assert done["status"] == "success"
    assert web.pg.sent("filesystem") == ["write_file"]
    [event] = await web.pg.events("APPROVAL_DECIDED")
    assert (event["decided_by"], event["details"]["grant"]) == ("user:ana", "once")
    assert "Nothing waits for you" in (await web.get("/ui/approvals")).text


@pytest.mark.parametrize("decision", ["session", "always"])
async def test_a_lasting_approval_issues_the_grant_the_button_named(
    web: WebHarness, decision: str
) -> None:
    workflow_id = await _pause(web)
    decided = await web.post(f"/ui/approvals/{workflow_id}/decide", {"decision": decision})
    assert decided.status_code == 303
    [grant] = await web.pg.gateway.policy.grants.list(SCOPE)
    assert grant.principal == "erwan"
    assert grant.max_uses is None
    assert (grant.expires_at is None) is (decision == "always")
    [event] = await web.pg.events("APPROVAL_DECIDED")
    assert event["details"]["grant"] == decision


async def test_denying_on_the_page_ends_the_agents_run_and_writes_nothing(
    web: WebHarness,
) -> None:
    workflow_id = await _pause(web)
    decided = await web.post(f"/ui/approvals/{workflow_id}/decide", {"decision": "deny"})
    assert decided.status_code == 303
    assert f"Approval {workflow_id} denied." in (await web.get(decided.headers["location"])).text
    is_error, answer = await _continue(web, workflow_id)
    assert is_error is True
    assert answer["error"]["code"] == "PERMISSION_DENIED"
    assert "denied by user:ana" in answer["error"]["message"]
    assert web.pg.sent("filesystem") == []
    assert await web.pg.gateway.policy.grants.list(SCOPE) == []


@pytest.mark.parametrize(
    "fields",
    [
        {"decision": "approve"},
        {"decision": "ONCE"},
        {"decision": "once "},
        {"decision": ""},
        {"decision": "<script>alert(1)</script>"},
        {},
    ],
)
async def test_a_decision_that_is_not_once_session_always_or_deny_changes_nothing(
    web: WebHarness, fields: dict[str, str]
) -> None:
    workflow_id = await _pause(web)
    refused = await web.post(f"/ui/approvals/{workflow_id}/decide", fields)
    assert refused.status_code == 400
    assert "<script>alert" not in refused.text
    assert await _status(web, workflow_id) == "pending"
    assert await web.pg.gateway.policy.grants.list(SCOPE) == []


async def test_unknown_and_expired_approvals_are_not_found(web: WebHarness) -> None:
    for unknown in ("wf_000000000000000000000000", "%3Cscript%3Ealert(1)", "x" * 200):
        shown = await web.get(f"/ui/approvals/{unknown}")
        assert shown.status_code == 404
        assert "<script>alert" not in shown.text
        posted = await web.post(f"/ui/approvals/{unknown}/decide", {"decision": "once"})
        assert posted.status_code == 404
    workflow_id = await _pause(web)
    async with web.pg.gateway.db.transaction() as conn:
        await conn.execute(
            sa.update(workflow_state)
            .where(workflow_state.c.workflow_id == workflow_id)
            .values(expires_at=utc_now() - timedelta(seconds=1))
        )
    assert (await web.get(f"/ui/approvals/{workflow_id}")).status_code == 404
    expired = await web.post(f"/ui/approvals/{workflow_id}/decide", {"decision": "once"})
    assert expired.status_code == 404
    assert await web.pg.gateway.policy.grants.list(SCOPE) == []


async def test_a_second_decision_is_refused_and_the_first_one_stands(web: WebHarness) -> None:
    workflow_id = await _pause(web)
    first = await web.post(f"/ui/approvals/{workflow_id}/decide", {"decision": "deny"})
    assert first.status_code == 303
    second = await web.post(f"/ui/approvals/{workflow_id}/decide", {"decision": "always"})
    assert second.status_code == 409
    assert "already denied by user:ana" in second.text
    assert await _status(web, workflow_id) == "denied"
    assert await web.pg.gateway.policy.grants.list(SCOPE) == []


async def test_a_person_of_another_org_neither_sees_nor_decides_the_approval(
    web: WebHarness,
) -> None:
    workflow_id = await _pause(web)
    key, _ = await ApiKeys(web.pg.gateway.db).create("evil", SCOPE.project, "eve", role="admin")
    transport = httpx.ASGITransport(app=create_app(web.pg.gateway))
    async with httpx.AsyncClient(transport=transport, base_url=BASE) as http:
        assert (await sign_in(http, key)).status_code == 303
        eve = WebHarness(web.pg, http, key, web.agent_key)
        listed = await eve.get("/ui/approvals")
        assert listed.status_code == 200
        assert workflow_id not in listed.text
        assert "Nothing waits for you" in listed.text
        assert workflow_id not in (await eve.get("/ui/approvals/live")).text
        assert (await eve.get(f"/ui/approvals/{workflow_id}")).status_code == 404
        for decision in ("always", "deny"):
            posted = await eve.post(f"/ui/approvals/{workflow_id}/decide", {"decision": decision})
            assert posted.status_code == 404
    assert await _status(web, workflow_id) == "pending"
    assert await web.pg.gateway.policy.grants.list(SCOPE) == []
    assert await web.pg.events("APPROVAL_DECIDED") == []


async def test_a_decision_without_the_csrf_token_or_from_another_site_decides_nothing(
    web: WebHarness,
) -> None:
    workflow_id = await _pause(web)
    path = f"/ui/approvals/{workflow_id}/decide"
    tokenless = await web.post(path, {"decision": "always"}, csrf=False)
    assert tokenless.status_code == 403
    forged = await web.post(path, {"decision": "always", "csrf": "0" * 64}, csrf=False)
    assert forged.status_code == 403
    cross = await web.post(path, {"decision": "always"}, origin="https://evil.example")
    assert cross.status_code == 403
    assert await _status(web, workflow_id) == "pending"
    assert await web.pg.gateway.policy.grants.list(SCOPE) == []


async def test_hostile_argument_values_are_shown_escaped_and_shortened(web: WebHarness) -> None:
    content = "<script>alert(1)</script>" + "A" * 10_000
    workflow_id = await _pause(
        web,
        intent="write \u202etxt.exe the file",
        dst="/w/report\u200b.txt\u202e",
        text=content,
    )
    for path in ("/ui/approvals", f"/ui/approvals/{workflow_id}", "/ui/approvals/live"):
        page = (await web.get(path)).text
        for raw in ("\u202e", "\u200b", "<script>alert"):
            assert raw not in page, (path, raw)
        assert "/w/report\\u200b.txt\\u202e" in page
        assert "write \\u202etxt.exe the file" in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
        assert "A" * 200 not in page
        assert f"[{len(content)} bytes]" in page
        assert f"{len(content)} bytes, <strong>shortened</strong>" in page


async def test_the_live_list_shows_a_new_approval_with_its_form_and_refuses_without_a_session(
    web: WebHarness,
) -> None:
    before = await web.http.get("/ui/approvals/live", headers={"X-PML-Fragment": "1"})
    assert before.status_code == 200
    assert "Nothing waits for you" in before.text
    page = await web.get("/ui/approvals")
    assert 'data-live="/ui/approvals/live" data-interval="1500"' in page.text
    workflow_id = await _pause(web)
    live = await web.get("/ui/approvals/live")
    assert live.status_code == 200
    assert "<html" not in live.text
    assert f'action="/ui/approvals/{workflow_id}/decide"' in live.text
    assert f'<input type="hidden" name="csrf" value="{web.csrf}">' in live.text
    assert "Nothing waits for you" not in live.text
    region = LIVE_REGION.search((await web.get("/ui/approvals")).text)
    assert region is not None
    assert region.group(1) == live.text  # identical: the browser keeps what did not change
    async with httpx.AsyncClient(transport=web.http._transport, base_url=BASE) as stranger:  # pyright: ignore[reportPrivateUsage]
        polled = await stranger.get("/ui/approvals/live", headers={"X-PML-Fragment": "1"})
        assert polled.status_code == 401
        assert workflow_id not in polled.text
        visited = await stranger.get("/ui/approvals")
        assert visited.status_code == 303
        assert visited.headers["location"].startswith("/ui/login")


async def test_the_detail_page_shows_one_approval_and_then_who_decided_it(web: WebHarness) -> None:
    workflow_id = await _pause(web, dst="/w/detail.txt")
    shown = await web.get(f"/ui/approvals/{workflow_id}")
    assert shown.status_code == 200
    assert "<dt>Approval id</dt>" in shown.text
    assert workflow_id in shown.text
    assert "/w/detail.txt" in shown.text
    assert 'aria-label="Approve once: filesystem:write_file"' in shown.text
    await web.post(f"/ui/approvals/{workflow_id}/decide", {"decision": "session"})
    decided = await web.get(f"/ui/approvals/{workflow_id}")
    assert "<strong>Approved</strong> (session) by user:ana" in decided.text
    assert 'aria-label="Approve once' not in decided.text


@pytest.mark.parametrize(
    "query",
    [
        "decided=<script>alert(1)</script>&as=once",
        "decided=wf_0a1b&as=<b>",
        "decided=wf_0a1b&as=approve",
        "decided=../etc&as=deny",
    ],
)
async def test_the_confirmation_shows_only_a_well_formed_id_and_decision(
    web: WebHarness, query: str
) -> None:
    page = await web.get(f"/ui/approvals?{query}")
    assert page.status_code == 200
    assert 'class="notice ok"' not in page.text
    assert "<script>alert" not in page.text
    assert "<b>" not in page.text
    good = await web.get("/ui/approvals?decided=wf_0a1b&as=always")
    assert "Approval wf_0a1b approved until revoked." in good.text
