"""The capabilities pages in a real browser: a person signs in, finds a capability the agent
taught the gateway by searching for what it does, reads its page and renames it with the
form; the pages stay readable on a phone and break no rule of the Content-Security-Policy."""

from __future__ import annotations

import pytest
from playwright.async_api import ConsoleMessage, Page, expect

from pml.gateway.http import running_http
from pml.gateway.keys import ApiKeys
from policy.conftest import SCOPE, PolicyGateway
from web.browser import open_browser, screenshot, sign_in_through_the_form

pytestmark = pytest.mark.anyio

READ = 'r = await mcp.filesystem.read_text_file(path="/data/config.json")\nreturn r'
READ_V2 = 'r = await mcp.filesystem.read_text_file(path="/data/config.json")\nreturn r["args"]'


async def _teach(pg: PolicyGateway) -> str:
    """What the agent does: a named reader (two versions, called by name) and a doubler."""
    runs = [
        {"code": READ, "intent": "read the config file", "name": "fs:read_config"},
        {"code": 'return {"double": args.get("n", 2) * 2}', "intent": "double a number"},
        {"capability": "fs:read_config", "intent": "load settings"},
        {"code": READ_V2, "intent": "read config args", "name": "fs:read_config", "update": True},
        {"capability": "fs:read_config", "intent": "load settings"},
    ]
    fqdn = ""
    for arguments in runs:
        failed, answer = await pg.execute(**arguments)
        assert not failed, answer
        fqdn = fqdn or answer["capabilityFqdn"]
    await pg.gateway.executor.flush()
    return fqdn


async def _sign_in(page: Page, url: str, key: str) -> None:
    await sign_in_through_the_form(page, url, key, "/ui/capabilities")


async def _fits(page: Page, width: int) -> None:
    """Nothing wider than the screen but what scrolls inside its own box."""
    scroll_width = await page.evaluate("document.documentElement.scrollWidth")
    assert scroll_width <= width, scroll_width


async def test_a_person_searches_opens_and_renames_a_capability_in_a_browser(
    pg: PolicyGateway,
) -> None:
    fqdn = await _teach(pg)
    key, _ = await ApiKeys(pg.gateway.db).create(SCOPE.org, SCOPE.project, "ana", role="admin")
    refused: list[str] = []

    def watch(message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text:
            refused.append(message.text)

    async with running_http(pg.gateway) as url, open_browser() as browser:
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        page.on("console", watch)
        await _sign_in(page, url, key)
        table = page.get_by_role("table")
        await expect(table.get_by_role("link", name="fs:read_config")).to_be_visible()
        await expect(table.get_by_role("row")).to_have_count(3)  # the header and two
        await screenshot(page, "capabilities")

        # search by what it does, with the keyboard
        search = page.get_by_role("searchbox", name="Search")
        await search.fill("read the config file")
        await search.press("Enter")
        await expect(page).to_have_url(
            f"{url}/ui/capabilities?q=read+the+config+file&visibility=&sort_by=usage"
        )
        first = page.get_by_role("table").get_by_role("row").nth(1)
        await expect(first.get_by_role("link")).to_have_text("fs:read_config")
        await first.get_by_role("link").click()

        await expect(page).to_have_url(f"{url}/ui/capabilities/{fqdn}")
        await expect(page.get_by_role("heading", level=1)).to_have_text("fs:read_config")
        code = page.get_by_role("region", name="Code of fs:read_config")
        await expect(code.locator(".k", has_text="return")).to_have_css(
            "color", "rgb(255, 123, 114)"
        )
        newest = page.locator("pre.diff .add").first  # v2's diff, open; v1's is folded
        await expect(newest).to_have_text('+return r["args"]')
        await expect(newest).to_be_visible()
        await expect(page.get_by_role("img", name="Calls per day, last 30 days")).to_be_visible()
        await screenshot(page, "capability-detail")

        # rename through the form
        await page.get_by_label("New name").fill("config:load")
        await page.get_by_role("button", name="Rename").click()
        await expect(page).to_have_url(f"{url}/ui/capabilities/{fqdn}?notice=renamed")
        await expect(page.get_by_role("heading", level=1)).to_have_text("config:load")
        await expect(page.get_by_role("status")).to_contain_text("old name still works")
        aliases = page.get_by_role("region", name="Aliases")
        await expect(aliases).to_contain_text("fs:read_config")
        await expect(page.get_by_text("mcp__config__load")).to_be_visible()

        # a refused rename says why, and the name stays
        await page.get_by_label("New name").fill("bad name!")
        await page.get_by_role("button", name="Rename").click()
        await expect(page.get_by_role("alert")).to_contain_text("INVALID_NAME")
        await expect(page.get_by_role("heading", level=1)).to_have_text("config:load")

        # on a phone
        await page.set_viewport_size({"width": 390, "height": 844})
        await page.goto(f"{url}/ui/capabilities")
        await expect(page.get_by_role("link", name="config:load")).to_be_visible()
        await expect(page.get_by_role("columnheader", name="Namespace")).to_be_hidden()
        await _fits(page, 390)
        await screenshot(page, "capabilities-phone")
        await page.get_by_role("link", name="config:load").click()
        await expect(page.get_by_role("heading", level=1)).to_have_text("config:load")
        await _fits(page, 390)
        await screenshot(page, "capability-detail-phone")
    assert refused == [], refused
