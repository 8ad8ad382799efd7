"""The audit page in a real browser: a person signs in through the login form, filters by
event with the keyboard-usable form, and sees the agent's next event appear at the bottom
without reloading; pausing the follow is one labelled checkbox. Screenshots at 1280 px and
390 px (``tests/web/artifacts/audit.png``, ``audit-phone.png``)."""

from __future__ import annotations

import re

import pytest
from playwright.async_api import Locator, Page, expect

from pml.gateway.http import running_http
from pml.gateway.keys import ApiKeys
from policy.conftest import SCOPE, PolicyGateway
from web.browser import open_browser, screenshot, sign_in_through_the_form

pytestmark = pytest.mark.anyio

READ = 'text = await mcp.filesystem.read_text_file(path=args["path"])\nreturn text'
DENIED = 'await mcp.filesystem.write_file(path="/w/x.txt", content="x")\nreturn 1'
INTENT = "read the note file"
LIVE_WAIT_MS = 10_000  # the page polls every 2 s


async def _agent_reads(pg: PolicyGateway, path: str) -> None:
    is_error, data = await pg.execute(intent=INTENT, code=READ, args={"path": path})
    assert is_error is False, data
    await pg.gateway.policy.audit.flush()


def _events(page: Page, name: str) -> Locator:
    """The event-name cells showing exactly ``name`` (details may mention it too)."""
    return page.locator("#audit-rows .event").filter(has_text=re.compile(rf"^{name}$"))


async def _sign_in(page: Page, url: str, pg: PolicyGateway) -> None:
    key, _ = await ApiKeys(pg.gateway.db).create(SCOPE.org, SCOPE.project, "ana", role="admin")
    await sign_in_through_the_form(page, url, key, "/ui/audit")


async def test_a_person_filters_by_event_and_sees_the_agents_next_event_appear_live(
    pg: PolicyGateway,
) -> None:
    await _agent_reads(pg, "/w/first.txt")
    is_error, _ = await pg.execute(intent=INTENT, code=DENIED)
    assert is_error is True
    await pg.gateway.policy.audit.flush()
    async with running_http(pg.gateway) as url, open_browser() as browser:
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        await _sign_in(page, url, pg)
        rows = page.locator("#audit-rows tr")
        await expect(page.get_by_role("heading", name="Audit log")).to_be_visible()
        await expect(_events(page, "POLICY_DENIED")).to_have_count(1)

        event = page.get_by_label("Event", exact=True)
        await event.fill("TOOL_CALL_END")
        await event.press("Enter")  # the keyboard submits the filters
        await expect(page).to_have_url(re.compile(r"/ui/audit\?event=TOOL_CALL_END"))
        await expect(rows).to_have_count(1)
        await expect(rows.first).to_contain_text("filesystem:read_text_file")
        follow = page.get_by_label("Follow live")
        await expect(follow).to_be_checked()

        await _agent_reads(pg, "/w/second.txt")
        await expect(rows).to_have_count(2, timeout=LIVE_WAIT_MS)  # no reload
        await expect(rows.last).to_contain_text("TOOL_CALL_END")
        await expect(_events(page, "ROUTER_OUTPUT")).to_have_count(0)
        await screenshot(page, "audit")

        await follow.press("Space")  # paused with the keyboard
        await expect(follow).not_to_be_checked()
        await expect(page.locator("#audit-rows")).to_have_attribute("data-live-paused", "1")
        await follow.press("Space")
        await expect(page.locator("#audit-rows")).to_have_attribute("data-live-paused", "0")

        request = rows.last.get_by_role("link")
        request_id = (await request.inner_text()).strip()
        await request.click()
        await expect(page).to_have_url(re.compile(rf"request_id={request_id}$"))
        await expect(_events(page, "ROUTER_OUTPUT")).to_have_count(1)
        await expect(_events(page, "POLICY_DENIED")).to_have_count(0)

        await page.set_viewport_size({"width": 390, "height": 844})
        await page.goto(f"{url}/ui/audit")
        await expect(page.locator("#audit-rows tr").first).to_be_visible()
        width = await page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, "nothing may scroll sideways on a phone"
        await screenshot(page, "audit-phone")
