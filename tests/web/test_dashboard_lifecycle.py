"""A capability's lifecycle on the dashboard, in a real browser: a person tags a version,
deprecates a capability in favour of another and sees the mark, tries to archive one that
another uses (refused, the user named), archives it anyway, finds it in the Archived view,
restores it under a new name when its own was taken, and purges an archived one after a
confirmation step. Forms post through the lifecycle service (audited with the person's
name); the pages break no rule of the Content-Security-Policy."""

from __future__ import annotations

import pytest
from playwright.async_api import ConsoleMessage, Page, expect

from pml.gateway.http import running_http
from pml.gateway.keys import ApiKeys
from policy.conftest import SCOPE, PolicyGateway
from web.browser import open_browser, screenshot, sign_in_through_the_form
from web.conftest import WebHarness

pytestmark = pytest.mark.anyio

READ = 'return await mcp.filesystem.read_text_file(path="/data/config.json")'
READ_V2 = 'r = await mcp.filesystem.read_text_file(path="/data/config.json")\nreturn r["args"]'
LOAD = 'r = await mcp.filesystem.read_text_file(path="/data/config.json")\nreturn r["server"]'
DOUBLE = 'return {"double": args.get("n", 2) * 2}'


async def _learn(pg: PolicyGateway, name: str, code: str, **extra: object) -> str:
    failed, answer = await pg.execute(code=code, intent=f"learn {name}", name=name, **extra)
    assert not failed, answer
    await pg.gateway.executor.flush()
    return str(answer["capabilityFqdn"])


async def _names_in_list(page: Page) -> list[str]:
    return await page.locator("table.cap-list td.name > a").all_inner_texts()


async def test_a_person_retires_and_brings_back_a_capability_in_a_browser(
    pg: PolicyGateway,
) -> None:
    reader = await _learn(pg, "fs:read_config", READ)
    await _learn(pg, "fs:read_config", READ_V2, update=True)
    loader = await _learn(pg, "fs:load_config", LOAD)
    await _learn(pg, "fs:use_config", f'return await mcp["{reader}"]()')
    key, _ = await ApiKeys(pg.gateway.db).create(SCOPE.org, SCOPE.project, "ana", role="admin")
    refused: list[str] = []

    def watch(message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text:
            refused.append(message.text)

    async with running_http(pg.gateway) as url, open_browser() as browser:
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        page.on("console", watch)
        await sign_in_through_the_form(page, url, key, f"/ui/capabilities/{reader}")
        detail = f"{url}/ui/capabilities/{reader}"

        # tag version 1 from the versions list
        tagging = page.get_by_role("form", name="Tag a version")
        await tagging.get_by_label("Version", exact=True).select_option("1")
        await tagging.get_by_label("Tag", exact=True).fill("1.0.0")
        await tagging.get_by_role("button", name="Tag version").click()
        await expect(page).to_have_url(f"{detail}?notice=tagged")
        await expect(page.locator("ol.versions li").nth(1)).to_contain_text("v1.0.0")
        remaining = page.get_by_role("form", name="Tag a version").get_by_label(
            "Version", exact=True
        )
        await expect(remaining).to_have_text("v2 (current)")

        # deprecate in favour of fs:load_config: the page and the list carry the mark
        await page.get_by_label("Replaced by").fill("fs:load_config")
        await page.get_by_label("Message").fill("Reads the whole file: use fs:load_config.")
        await page.get_by_role("button", name="Deprecate", exact=True).click()
        await expect(page).to_have_url(f"{detail}?notice=deprecated")
        note = page.get_by_role("note", name="Deprecated")
        await expect(note).to_contain_text("Reads the whole file: use fs:load_config.")
        await expect(note.get_by_role("link", name="fs:load_config")).to_have_attribute(
            "href", f"/ui/capabilities/{loader}"
        )
        await expect(page.get_by_role("heading", level=1)).to_contain_text("deprecated")
        await screenshot(page, "lifecycle-deprecated")
        await page.goto(f"{url}/ui/capabilities?sort_by=name")
        row = page.get_by_role("row").filter(has=page.get_by_role("link", name="fs:read_config"))
        await expect(row.locator(".mark-deprecated")).to_have_text("deprecated")
        await expect(row).to_contain_text("Use fs:load_config instead.")
        other = page.get_by_role("row").filter(has=page.get_by_role("link", name="fs:use_config"))
        await expect(other.locator(".mark")).to_have_count(0)
        await screenshot(page, "lifecycle-list-deprecated")

        # archive: refused while fs:use_config uses it, then archived anyway
        await page.goto(detail)
        await page.get_by_role("button", name="Archive", exact=True).click()
        blocked = page.get_by_role("alert")
        await expect(blocked).to_contain_text("Not archived: 1 other capability uses it")
        await expect(blocked.get_by_role("link", name="fs:use_config")).to_be_visible()
        await screenshot(page, "lifecycle-archive-blocked")
        assert "fs:read_config" in await _names_in_list_of(page, url)
        await page.goto(detail)
        await page.get_by_role("button", name="Archive", exact=True).click()
        await page.get_by_role("button", name="Archive anyway").click()
        await expect(page).to_have_url(f"{detail}?notice=archived")
        archived_note = page.get_by_role("note", name="Archived")
        await expect(archived_note).to_contain_text("by ana")
        await expect(page.get_by_text("mcp__fs__read_config")).to_have_count(0)  # no tool now
        await expect(page.get_by_role("button", name="Rename")).to_have_count(0)
        await screenshot(page, "lifecycle-archived")

        # gone from the list, in the Archived view
        await page.goto(f"{url}/ui/capabilities")
        assert "fs:read_config" not in await _names_in_list(page)
        await page.get_by_role("link", name="Archived", exact=True).click()
        await expect(page).to_have_url(f"{url}/ui/capabilities?archived=1")
        assert await _names_in_list(page) == ["fs:read_config"]
        await expect(page.get_by_role("row").nth(1)).to_contain_text("by ana")
        await screenshot(page, "lifecycle-archived-view")

        # the name is taken meanwhile: restore asks for a new one
        await _learn(pg, "fs:read_config", DOUBLE)
        await page.get_by_role("link", name="fs:read_config").click()
        await expect(page).to_have_url(detail)
        await page.get_by_role("button", name="Restore").click()
        await expect(page.get_by_role("alert")).to_contain_text("NAME_TAKEN")
        await expect(page.get_by_role("alert")).to_contain_text("give it a new name")
        await expect(page.get_by_label("New name")).to_have_attribute("aria-invalid", "true")
        await screenshot(page, "lifecycle-restore-taken")
        await page.get_by_label("New name").fill("fs:read_config_old")
        await page.get_by_role("button", name="Restore").click()
        await expect(page).to_have_url(f"{detail}?notice=restored")
        await expect(page.get_by_role("heading", level=1)).to_contain_text("fs:read_config_old")
        await expect(page.get_by_role("note", name="Archived")).to_have_count(0)

        # undo the deprecation, archive it again (forced) and purge it after confirming
        await page.get_by_role("button", name="Undo deprecation").click()
        await expect(page).to_have_url(f"{detail}?notice=undeprecated")
        await expect(page.get_by_role("note", name="Deprecated")).to_have_count(0)
        await page.get_by_role("button", name="Archive", exact=True).click()
        await page.get_by_role("button", name="Archive anyway").click()
        await page.get_by_role("button", name="Purge…").click()
        await expect(page).to_have_url(f"{detail}/purge?")
        await expect(
            page.get_by_role("heading", name="Purge fs:read_config_old for good?")
        ).to_be_visible()
        await screenshot(page, "lifecycle-purge-confirm")
        assert await pg.gateway.registry.whois(SCOPE, reader)  # still there until confirmed
        await page.get_by_role("button", name="Purge for good").click()
        await expect(page).to_have_url(f"{url}/ui/capabilities?archived=1&notice=purged")
        await expect(page.get_by_role("status").first).to_contain_text("Purged")
        assert await _names_in_list(page) == []

        # on a phone
        await page.set_viewport_size({"width": 390, "height": 844})
        await page.goto(f"{url}/ui/capabilities/{loader}")
        width = await page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, width
        await screenshot(page, "lifecycle-detail-phone")
    assert refused == [], refused

    events = await pg.events(
        "CAPABILITY_TAGGED",
        "CAPABILITY_DEPRECATED",
        "CAPABILITY_ARCHIVED",
        "CAPABILITY_RESTORED",
        "CAPABILITY_PURGED",
    )
    assert [event["event"] for event in events] == [
        "CAPABILITY_TAGGED",
        "CAPABILITY_DEPRECATED",
        "CAPABILITY_ARCHIVED",
        "CAPABILITY_RESTORED",
        "CAPABILITY_DEPRECATED",
        "CAPABILITY_ARCHIVED",
        "CAPABILITY_PURGED",
    ]
    assert {event["decided_by"] for event in events} == {"user:ana"}


async def _names_in_list_of(page: Page, url: str) -> list[str]:
    await page.goto(f"{url}/ui/capabilities")
    return await _names_in_list(page)


async def test_lifecycle_forms_refuse_forged_or_malformed_posts(web: WebHarness) -> None:
    fqdn = await _learn(web.pg, "fs:read_config", READ)
    path = f"/ui/capabilities/{fqdn}"
    before = await web.pg.gateway.registry.whois(SCOPE, fqdn)
    forged = await web.post(f"{path}/archive", {}, origin="https://evil.example")
    assert forged.status_code == 403
    no_csrf = await web.post(f"{path}/archive", {}, csrf=False)
    assert no_csrf.status_code == 403
    extra = await web.post(f"{path}/archive", {"force": "1", "why": "x"})
    assert extra.status_code == 400
    assert "unexpected field" in extra.text
    bad_flag = await web.post(f"{path}/archive", {"force": "yes"})
    assert bad_flag.status_code == 400
    unconfirmed = await web.post(f"{path}/purge", {"confirm": "yes"})
    assert unconfirmed.status_code == 400
    bad_version = await web.post(f"{path}/tag", {"version": "1e3", "tag": "v1.0.0"})
    assert bad_version.status_code == 400
    control = await web.post(f"{path}/deprecate", {"replaced_by": "", "message": "a\x00b"})
    assert control.status_code == 400
    assert "a\x00b" not in control.text
    missing = await web.post(f"{path}/deprecate", {"replaced_by": "fs:nope", "message": ""})
    assert missing.status_code == 400
    assert "Replacement not found" in missing.text
    assert await web.pg.gateway.registry.whois(SCOPE, fqdn) == before
    assert await web.pg.events("CAPABILITY_ARCHIVED", "CAPABILITY_DEPRECATED") == []
