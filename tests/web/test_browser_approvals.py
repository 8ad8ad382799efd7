"""The approvals page in a real browser: a person signs in with an admin key, sees an agent's
paused write appear without reloading, decides it with the keyboard or a click, and the
agent's run finishes (or stops) when it calls continue_workflow."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.async_api import Page, expect

from pml.gateway.http import running_http
from pml.gateway.keys import ApiKeys
from policy.conftest import SCOPE, PolicyGateway
from web.browser import open_browser, screenshot, sign_in_through_the_form

pytestmark = pytest.mark.anyio

WRITE = """
await mcp.filesystem.write_file(path=args["dst"], content=args["text"])
return "written"
"""
REPORT = (
    '# Weekly report\n\nSales & "returns" <b>up</b> 4 %.\n'
    + "Line of the report that goes on for a while. " * 60
)
APPROVE_ONCE = "Approve once: filesystem:write_file"
LIVE_MS = 2000  # SPEC: a person watching sees a new request within 2 s


async def _admin_key(pg: PolicyGateway) -> str:
    key, _ = await ApiKeys(pg.gateway.db).create(SCOPE.org, SCOPE.project, "ana", role="admin")
    return key


async def _sign_in(page: Page, url: str, key: str) -> None:
    await sign_in_through_the_form(page, url, key, "/ui/approvals")


async def _pause(pg: PolicyGateway, dst: str, text: str = REPORT) -> str:
    args = {"dst": dst, "text": text}
    is_error, paused = await pg.execute(intent="write the weekly report", code=WRITE, args=args)
    assert is_error is False
    assert paused["status"] == "approval_required", paused
    return str(paused["workflowId"])


async def _continue(pg: PolicyGateway, workflow_id: str) -> tuple[bool, dict[str, Any]]:
    answer = {"workflow_id": workflow_id, "approved": True}
    return await pg.execute(intent="go on", continue_workflow=answer)


async def _live_refreshes(page: Page, count: int) -> None:
    """Wait for ``count`` polls of the live region (the page's own timer)."""
    for _ in range(count):
        async with page.expect_response(lambda r: r.url.endswith("/ui/approvals/live")) as got:
            pass
        assert (await got.value).status == 200


async def test_a_person_sees_a_paused_write_live_and_approves_it_with_the_keyboard(
    pg: PolicyGateway,
) -> None:
    key = await _admin_key(pg)
    async with running_http(pg.gateway) as url, open_browser() as browser:
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        await _sign_in(page, url, key)
        await expect(page.get_by_text("Nothing waits for you")).to_be_visible()
        await screenshot(page, "approvals-empty")

        workflow_id = await _pause(pg, "/srv/reports/weekly.md")
        approve = page.get_by_role("button", name=APPROVE_ONCE)
        await expect(approve).to_be_visible(timeout=LIVE_MS)  # no reload: the live region
        card = page.locator(f"article#{workflow_id}")
        await expect(card.locator(".arg.target .arg-value")).to_have_text("/srv/reports/weekly.md")
        await expect(card.locator(".arg-size").last).to_contain_text("shortened")

        # A list that did not change is left alone: the focused button keeps its focus.
        await approve.focus()
        await _live_refreshes(page, 2)
        focused = await page.evaluate("document.activeElement.getAttribute('aria-label')")
        assert focused == APPROVE_ONCE
        await screenshot(page, "approvals")
        await _live_refreshes(page, 1)  # the screenshot marks inputs (style=""): re-rendered

        await approve.focus()
        await page.keyboard.press("Enter")
        await expect(page).to_have_url(f"{url}/ui/approvals?decided={workflow_id}&as=once")
        await expect(page.get_by_role("status").first).to_contain_text(
            f"Approval {workflow_id} approved once."
        )
        assert pg.sent("filesystem") == []  # approved, but the agent has not continued yet
        is_error, done = await _continue(pg, workflow_id)
        assert is_error is False, done
        assert done["status"] == "success"
        assert pg.sent("filesystem") == ["write_file"]
        await expect(page.get_by_text("Nothing waits for you")).to_be_visible(timeout=LIVE_MS)


async def test_a_person_denies_from_the_detail_page_and_the_run_stops(pg: PolicyGateway) -> None:
    key = await _admin_key(pg)
    async with running_http(pg.gateway) as url, open_browser() as browser:
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        await _sign_in(page, url, key)
        workflow_id = await _pause(pg, "/etc/cron.d/cleanup", "* * * * * root rm -rf /tmp/*\n")
        details = page.get_by_role("link", name=f"Details of filesystem:write_file ({workflow_id})")
        await expect(details).to_be_visible(timeout=LIVE_MS)
        await details.click()
        await expect(page).to_have_url(f"{url}/ui/approvals/{workflow_id}")
        await expect(page.get_by_text(workflow_id).first).to_be_visible()
        await screenshot(page, "approval-detail")

        await page.get_by_role("button", name="Deny: filesystem:write_file").click()
        await expect(page).to_have_url(f"{url}/ui/approvals?decided={workflow_id}&as=deny")
        await expect(page.get_by_role("status").first).to_contain_text("denied")
        is_error, answer = await _continue(pg, workflow_id)
        assert is_error is True
        assert answer["error"]["code"] == "PERMISSION_DENIED"
        assert pg.sent("filesystem") == []


async def test_the_approvals_page_is_readable_at_phone_width(pg: PolicyGateway) -> None:
    key = await _admin_key(pg)
    async with running_http(pg.gateway) as url, open_browser() as browser:
        page = await browser.new_page(viewport={"width": 390, "height": 844})
        await _sign_in(page, url, key)
        await _pause(pg, "/srv/app/config/production/settings/very_long_file_name_here.yaml")
        approve = page.get_by_role("button", name=APPROVE_ONCE)
        await expect(approve).to_be_visible(timeout=LIVE_MS)
        await screenshot(page, "approvals-phone")
        width = await page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390  # nothing scrolls sideways
        box = await approve.bounding_box()
        assert box is not None
        assert box["width"] >= 300  # a full-width button, easy to hit
