"""The servers pages: the states ``pml status`` reports, definition drift shown as a diff,
and accepting a changed definition (deployment admins only, audited, CSRF-protected)."""

from __future__ import annotations

import json
import re
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import httpx
import mcp_types
import pytest
import sqlalchemy as sa

from pml.cli.status_cmd import collect_status
from pml.config import ServerSettings, Settings
from pml.gateway.keys import ApiKeys
from pml.storage.catalog_repo import CatalogStore, definition_hash, tool_definition
from pml.storage.database import Database
from pml.storage.tables import tool_schema
from pml.upstream.base import ServerStatus
from pml.web.dashboard.servers_view import server_rows
from pml.web.dashboard.sessions import SESSION_COOKIE, csrf_token
from pml.web.services import open_web_services
from web.conftest import BASE, WebHarness, sign_in

pytestmark = pytest.mark.anyio

HOSTILE = '<script>alert("x")</script>'
TIME_TOOL = "get_current_time"


class Rows(HTMLParser):
    """The cells of a table's body rows, by their ``data-label``."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, str]] = []
        self._label: str | None = None
        self._depth = 0
        self._body = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tbody":
            self._body = True
        elif self._body and tag == "tr":
            self.rows.append({})
        elif self._body and tag in ("td", "th"):
            self._label = dict(attrs).get("data-label")
            if self._label is not None:
                self.rows[-1][self._label] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "tbody":
            self._body = False
        elif tag in ("td", "th"):
            self._label = None

    def handle_data(self, data: str) -> None:
        if self._label is not None:
            self.rows[-1][self._label] += data


def table(html: str) -> dict[str, dict[str, str]]:
    """The servers table of a page, by server name (cell text, whitespace squeezed)."""
    parser = Rows()
    parser.feed(html)
    return {
        " ".join(row["Server"].split()): {k: " ".join(v.split()) for k, v in row.items()}
        for row in parser.rows
        if "Server" in row
    }


def time_tool(description: str = "The time now") -> mcp_types.Tool:
    return mcp_types.Tool(
        name=TIME_TOOL,
        description=description,
        input_schema={"type": "object", "properties": {"timezone": {"type": "string"}}},
    )


async def drifted(web: WebHarness, description: str = "The time now, and your files") -> str:
    """The time tool recorded, then changed: the new definition's hash."""
    store = CatalogStore(web.pg.gateway.db)
    await store.record_catalog("time", [time_tool()])
    assert await store.record_catalog("time", [time_tool(description)]) == [TIME_TOOL]
    return definition_hash(tool_definition(time_tool(description)))


async def audited(web: WebHarness, event: str) -> list[dict[str, object]]:
    return [dict(row) for row in await web.pg.events(event)]


async def test_the_list_shows_the_states_and_tool_counts_the_pool_and_pml_status_report(
    web: WebHarness,
) -> None:
    await web.pg.call("time__get_current_time", {})  # a latency to report
    statuses = {status.name: status for status in web.pg.gateway.pool.status()}
    page = await web.get("/ui/servers")
    assert page.status_code == 200
    shown = table(page.text)

    assert sorted(shown) == sorted(statuses) == ["custom", "filesystem", "shell", "time"]
    for name, status in statuses.items():
        assert shown[name]["State"] == status.state
        assert shown[name]["Transport"] == status.transport
        assert shown[name]["Tools"].split()[0] == str(status.tool_count)
    latency = statuses["time"].last_latency_ms
    assert latency is not None
    assert shown["time"]["Last latency"] == f"{latency:.1f} ms"

    # `pml status --json` over the same database, once the pool's report is written.
    db = web.pg.gateway.db
    await CatalogStore(db).record_status(list(statuses.values()), reported_by="test:1")
    settings = web.pg.gateway.settings.model_copy(
        update={"servers": {name: ServerSettings(command="x") for name in statuses}}
    )
    report = await collect_status(settings)
    for entry in report["servers"]:
        assert shown[entry["name"]]["State"] == entry["state"]
        assert shown[entry["name"]]["Tools"].split()[0] == str(entry["tool_count"])


async def test_pml_dashboard_without_a_gateway_shows_what_pml_status_shows(
    tmp_path: Path,
) -> None:
    settings = Settings.model_validate(
        {
            "database_url": f"sqlite:///{tmp_path / 'pml.db'}",
            "scope": {"org": "acme", "project": "webapp", "user": "erwan"},
            "discovery": {"embedder": "hashing"},
            "servers": {
                "time": {"command": "uvx", "args": ["mcp-server-time"]},
                "broken": {"command": "does-not-exist"},
                "lazyone": {"url": "http://127.0.0.1:9/mcp", "lazy": True},
                "off": {"command": "true", "disabled": True},
            },
        }
    )
    db = await Database.open(settings.database_url)
    store = CatalogStore(db)
    await store.record_status(
        [
            ServerStatus("time", "running", "stdio", 2, last_latency_ms=3.5),
            ServerStatus("broken", "failed", "stdio", 0, last_error=HOSTILE + "\x1b[2J"),
            ServerStatus("off", "running", "stdio", 1),
        ],
        reported_by="host:1",
    )
    await store.record_catalog("time", [time_tool()])
    await store.record_catalog("time", [time_tool("Changed.")])
    await db.close()

    async with open_web_services(settings, with_discovery=False) as services:
        rows = {row.name: row for row in await server_rows(services)}
    report = await collect_status(settings)

    for entry in report["servers"]:
        row = rows[entry["name"]]
        assert row.state == entry["state"]
        assert row.lazy == entry["lazy"]
        assert list(row.flagged) == entry["flagged_tools"]
        if entry["reported"]:
            assert row.tool_count == entry["tool_count"]
            assert row.last_latency_ms == entry["last_latency_ms"]
    assert rows["broken"].last_error is not None
    assert "\x1b" not in rows["broken"].last_error
    assert rows["lazyone"].state == "never started"


async def test_a_changed_definition_is_flagged_and_shown_as_a_diff(web: WebHarness) -> None:
    await drifted(web, f"Now {HOSTILE} too")

    listing = await web.get("/ui/servers")
    assert table(listing.text)["time"]["Changed"].startswith("1 changed")
    assert "1 tool definition has changed" in listing.text

    page = await web.get("/ui/servers/time")
    assert page.status_code == 200
    assert HOSTILE not in page.text
    diff = unescape(re.sub(r"<[^>]+>", "", page.text))
    assert '-  "description": "The time now",' in diff
    assert f'+  "description": {json.dumps(f"Now {HOSTILE} too")},' in diff
    assert 'name="definition_hash"' in page.text
    assert "Accept new definition" in page.text


async def test_accepting_clears_the_flag_pins_the_new_hash_and_is_audited(
    web: WebHarness,
) -> None:
    new_hash = await drifted(web)
    store = CatalogStore(web.pg.gateway.db)
    before = await store.stored_tool("time", TIME_TOOL)
    assert before is not None

    done = await web.post(
        f"/ui/servers/time/tools/{TIME_TOOL}/accept", {"definition_hash": new_hash}
    )

    assert done.status_code == 303
    assert done.headers["location"] == f"/ui/servers/time?accepted=time%3A{TIME_TOOL}"
    after = await store.stored_tool("time", TIME_TOOL)
    assert after is not None
    assert (after.flagged, after.pinned_hash) == (False, new_hash)
    assert after.pinned_definition == after.definition
    [event] = await audited(web, "TOOL_DEFINITION_ACCEPTED")
    assert event["decided_by"] == "user:ana"
    assert event["tool"] == f"time:{TIME_TOOL}"
    assert event["details"] == {
        "tool": f"time:{TIME_TOOL}",
        "server": "time",
        "previous_pinned_hash": before.pinned_hash,
        "accepted_hash": new_hash,
    }
    page = await web.get(done.headers["location"])
    assert "Accepted the new definition of time:get_current_time" in page.text
    assert "Changed definitions" not in page.text
    assert table((await web.get("/ui/servers")).text)["time"]["Changed"] == "none"


async def test_a_definition_that_changed_after_the_page_loaded_is_not_accepted(
    web: WebHarness,
) -> None:
    seen_hash = await drifted(web)
    await CatalogStore(web.pg.gateway.db).record_catalog("time", [time_tool("Swapped again.")])

    refused = await web.post(
        f"/ui/servers/time/tools/{TIME_TOOL}/accept", {"definition_hash": seen_hash}
    )

    assert refused.status_code == 409
    assert "changed again" in refused.text
    assert "Swapped again." in refused.text
    assert await CatalogStore(web.pg.gateway.db).flagged() == {"time": [TIME_TOOL]}
    assert await audited(web, "TOOL_DEFINITION_ACCEPTED") == []


async def test_an_admin_of_another_project_sees_the_reason_and_gets_403(
    web: WebHarness,
) -> None:
    new_hash = await drifted(web)
    key, _ = await ApiKeys(web.pg.gateway.db).create("acme", "other", "olga", role="admin")
    async with httpx.AsyncClient(transport=web.http._transport, base_url=BASE) as other:  # pyright: ignore[reportPrivateUsage]
        assert (await sign_in(other, key)).status_code == 303
        page = await other.get("/ui/servers/time")
        assert page.status_code == 200
        assert re.search(r"<button[^>]*disabled[^>]*>Accept new definition", page.text)
        assert "only its admins may accept" in page.text
        token = other.cookies.get(SESSION_COOKIE)
        assert token is not None
        refused = await other.post(
            f"/ui/servers/time/tools/{TIME_TOOL}/accept",
            data={"csrf": csrf_token(token), "definition_hash": new_hash},
            headers={"Origin": BASE},
        )
    assert refused.status_code == 403
    assert "acme/webapp" in refused.text
    assert await CatalogStore(web.pg.gateway.db).flagged() == {"time": [TIME_TOOL]}
    assert await audited(web, "TOOL_DEFINITION_ACCEPTED") == []


async def test_an_accept_without_csrf_or_from_another_site_changes_nothing(
    web: WebHarness,
) -> None:
    new_hash = await drifted(web)
    path = f"/ui/servers/time/tools/{TIME_TOOL}/accept"

    tokenless = await web.post(path, {"definition_hash": new_hash}, csrf=False)
    cross = await web.post(path, {"definition_hash": new_hash}, origin="https://evil.example")

    assert (tokenless.status_code, cross.status_code) == (403, 403)
    assert await CatalogStore(web.pg.gateway.db).flagged() == {"time": [TIME_TOOL]}


async def test_hostile_server_and_tool_names_are_refused_never_an_error(web: WebHarness) -> None:
    await drifted(web)
    names = [
        "%3Cscript%3Ealert(1)%3C%2Fscript%3E",
        "%00",
        "x" * 5000,
        "%E2%80%AE%F0%9F%92%A5",
        "..%2F..%2Fetc",
        "time%00",
    ]
    for name in names:
        page = await web.get(f"/ui/servers/{name}")
        assert page.status_code == 404, name
        assert "<script>alert" not in page.text
        for server, tool in ((name, TIME_TOOL), ("time", name), ("time", f"a/{name}/b")):
            done = await web.post(
                f"/ui/servers/{server}/tools/{tool}/accept", {"definition_hash": "0" * 64}
            )
            assert done.status_code == 404, (server, tool)
            assert "<script>alert" not in done.text
    short = await web.post(f"/ui/servers/time/tools/{TIME_TOOL}/accept", {"definition_hash": "x"})
    assert short.status_code == 400
    assert await CatalogStore(web.pg.gateway.db).flagged() == {"time": [TIME_TOOL]}


async def test_a_row_without_its_pinned_definition_says_so_instead_of_a_diff(
    web: WebHarness,
) -> None:
    await drifted(web, "Changed.")
    async with web.pg.gateway.db.transaction() as conn:  # as migration 0010 leaves such a row
        await conn.execute(sa.update(tool_schema).values(pinned_definition=None))

    page = await web.get("/ui/servers/time")

    assert "the pinned definition was not kept" in page.text.lower()
    assert '"description": "Changed."' in unescape(page.text)
    assert 'class="add"' not in page.text


async def test_a_definition_changed_and_changed_back_says_so_and_can_be_accepted(
    web: WebHarness,
) -> None:
    await drifted(web)
    store = CatalogStore(web.pg.gateway.db)
    await store.record_catalog("time", [time_tool()])

    page = await web.get("/ui/servers/time")
    assert "changed it back" in page.text
    done = await web.post(
        f"/ui/servers/time/tools/{TIME_TOOL}/accept",
        {"definition_hash": definition_hash(tool_definition(time_tool()))},
    )

    assert done.status_code == 303
    assert await store.flagged() == {}


async def test_a_crafted_accepted_notice_is_not_shown(web: WebHarness) -> None:
    await drifted(web)
    for crafted in (f"time:{TIME_TOOL}", "time:everything, trust me", "other:x"):
        page = await web.get("/ui/servers/time", accepted=crafted)
        assert page.status_code == 200
        assert "Accepted the new definition" not in page.text  # still flagged, or not a tool
