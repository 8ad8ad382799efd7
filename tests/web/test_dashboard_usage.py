"""The usage page: figures that equal the ``tool_usage`` rows of the viewer's org/project,
computed in SQL the same way on both backends, and the live grants with a revoke button
after which the agent's next covered call asks a person again."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from pml.gateway.keys import ApiKeys
from pml.storage.database import Database
from pml.storage.tables import tool_usage
from pml.storage.types import utc_now
from pml.storage.usage_repo import CAPABILITY_SERVER_ID, SqlToolUsageRepository, ToolUsageRow
from pml.storage.usage_stats_repo import usage_overview
from pml.web.dashboard.sessions import SESSION_COOKIE, csrf_token
from policy.conftest import SCOPE, PolicyGateway
from web.conftest import BASE, WebHarness, sign_in

pytestmark = pytest.mark.anyio

WRITE = """
await mcp.filesystem.write_file(path="/w/report.txt", content="x")
return "written"
"""
FQDN = "acme.webapp.reports.weekly.0123abcd"


class Tables(HTMLParser):
    """Every table of a page: its caption, and its body rows as cell texts."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._caption: str | None = None
        self._current: list[list[str]] | None = None
        self._in_caption = False
        self._in_cell = False
        self._in_body = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "caption":
            self._in_caption, self._caption = True, ""
        elif tag == "tbody":
            self._in_body, self._current = True, []
            self.tables[" ".join((self._caption or "").split())] = self._current
        elif tag == "tr" and self._in_body and self._current is not None:
            self._current.append([])
        elif tag in ("td", "th") and self._in_body and self._current is not None:
            self._in_cell = True
            self._current[-1].append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "caption":
            self._in_caption = False
        elif tag == "tbody":
            self._in_body = False
        elif tag in ("td", "th"):
            self._in_cell = False

    def handle_data(self, data: str) -> None:
        if self._in_caption and self._caption is not None:
            self._caption += data
        elif self._in_cell and self._current:
            self._current[-1][-1] += data


def tables(html: str) -> dict[str, list[list[str]]]:
    parser = Tables()
    parser.feed(html)
    return {
        caption: [[" ".join(cell.split()) for cell in row] for row in rows]
        for caption, rows in parser.tables.items()
    }


def row(
    server: str,
    tool: str,
    *,
    ok: bool = True,
    latency: float = 5.0,
    at: datetime | None = None,
    org: str = "acme",
    project: str = "webapp",
) -> ToolUsageRow:
    return ToolUsageRow(server, tool, latency, ok, org, project, "erwan", at or utc_now())


async def insert(db: Database, rows: list[ToolUsageRow]) -> None:
    async with db.transaction() as conn:
        await SqlToolUsageRepository(conn).insert_many(rows)


async def stored_rows(db: Database) -> list[dict[str, Any]]:
    async with db.read() as conn:
        return [dict(r._mapping) for r in await conn.execute(sa.select(tool_usage))]  # pyright: ignore[reportPrivateUsage]


async def test_the_usage_numbers_equal_the_tool_usage_rows_of_the_project(
    web: WebHarness,
) -> None:
    pg, db = web.pg, web.pg.gateway.db
    for _ in range(3):
        await pg.call("time__get_current_time", {})
    await pg.call("filesystem__read_text_file", {"path": "/w/a.txt"})
    now = utc_now()
    await insert(
        db,
        [
            row("time", "get_current_time", ok=False, latency=40.0, at=now - timedelta(days=2)),
            row(CAPABILITY_SERVER_ID, FQDN, latency=80.0, at=now - timedelta(days=1)),
            row(CAPABILITY_SERVER_ID, FQDN, ok=False, latency=20.0),
            row("time", "get_current_time", at=now - timedelta(days=45)),  # outside the window
            row("time", "get_current_time", org="evil"),  # other tenants
            row("shell", "run", project="other"),
        ],
    )
    await pg.gateway.executor.flush()

    page = await web.get("/ui/usage")

    assert page.status_code == 200
    since = datetime.combine((now - timedelta(days=29)).date(), datetime.min.time(), UTC)
    mine = [
        r
        for r in await stored_rows(db)
        if (r["org"], r["project"]) == ("acme", "webapp") and r["called_at"] >= since
    ]
    tools = [r for r in mine if r["server_id"] != CAPABILITY_SERVER_ID]
    runs = [r for r in mine if r["server_id"] == CAPABILITY_SERVER_ID]
    assert len(tools) == 5
    assert len(runs) == 2
    shown = tables(page.text)

    busiest = {cells[0]: cells[1:3] for cells in shown["Busiest tools: the numbers"]}
    calls = Counter(f"{r['server_id']}:{r['tool_name']}" for r in tools)
    errors = Counter(f"{r['server_id']}:{r['tool_name']}" for r in tools if not r["success"])
    assert busiest == {tool: [str(n), str(errors[tool])] for tool, n in calls.items()}
    assert shown["Busiest capabilities: the numbers"] == [
        [FQDN, "2", "1", "50.0 %", "50.0 ms", "80.0 ms", "80.0 ms"]
    ]
    per_day = {cells[0]: cells[1:3] for cells in shown["Tool calls per day, newest day first"]}
    assert len(per_day) == 30
    by_day = Counter(r["called_at"].date().isoformat() for r in tools)
    failed_by_day = Counter(r["called_at"].date().isoformat() for r in tools if not r["success"])
    for day, cells in per_day.items():
        assert cells == [str(by_day[day]), str(failed_by_day[day])], day
    assert [
        cells[0] for cells in shown["Tools by error rate (tools with errors only): the numbers"]
    ] == ["time:get_current_time"]
    assert f'<span class="usage-num">{len(tools)}</span> tool calls' in page.text
    assert f'<span class="usage-num">{len(runs)}</span> capability runs' in page.text


async def test_the_figures_are_computed_in_sql_the_same_on_both_backends(db: Database) -> None:
    until = datetime(2026, 11, 26, 15, 0, tzinfo=UTC)
    first_day = datetime(2026, 10, 28, tzinfo=UTC)  # 30 UTC days ending with the 26th
    rows = [
        row("fs", "read", latency=float(ms), at=until - timedelta(hours=ms)) for ms in range(1, 101)
    ]
    rows += [
        row("fs", "write", ok=False, latency=7.0, at=first_day),  # the first instant: in
        row("fs", "write", latency=9.0, at=first_day - timedelta(microseconds=1)),  # out
        row("fs", "write", latency=3.0, at=until.replace(hour=23, minute=59)),  # last day: in
        row(CAPABILITY_SERVER_ID, FQDN, latency=500.0, at=until),
        row("fs", "read", org="other", latency=10_000.0, at=until),
    ]
    await insert(db, rows)

    overview = await usage_overview(db, "acme", "webapp", days=30, until=until)

    assert (overview.first_day.isoformat(), overview.last_day.isoformat()) == (
        "2026-10-28",
        "2026-11-26",
    )
    read, write = overview.tools
    assert (read.label, read.calls, read.errors) == ("fs:read", 100, 0)
    assert read.avg_latency_ms == pytest.approx(50.5)
    # p95 is read from latency buckets: the 95th call (95 ms) lies in "over 50, at most 100"
    assert (read.max_latency_ms, read.p95_latency_ms) == (100.0, 100.0)
    assert (write.calls, write.errors, write.p95_latency_ms) == (2, 1, 7.0)
    [capability] = overview.capabilities
    assert (capability.label, capability.calls, capability.p95_latency_ms) == (FQDN, 1, 500.0)
    assert (overview.tool_calls, overview.tool_errors, overview.capability_runs) == (102, 1, 1)
    days = {day.day.isoformat(): (day.calls, day.errors) for day in overview.daily.tools}
    assert len(days) == 30
    assert days["2026-10-28"] == (1, 1)
    assert days["2026-11-26"] == (15 + 1, 0)  # 01:00 to 14:00 and 23:59 of the last day
    assert sum(calls for calls, _ in days.values()) == 102


async def approval_required(pg: PolicyGateway) -> dict[str, Any]:
    is_error, paused = await pg.execute(intent="write the report file", code=WRITE)
    assert is_error is False
    assert paused["status"] == "approval_required", paused
    return paused


async def granted_always(pg: PolicyGateway) -> str:
    """A person approved the write "always": the grant's id, once the run went through."""
    paused = await approval_required(pg)
    await pg.decide(paused["workflowId"], "always")
    answer = {"workflow_id": paused["workflowId"], "approved": True}
    is_error, done = await pg.execute(intent="approve it", continue_workflow=answer)
    assert (is_error, done["status"]) == (False, "success"), done
    [grant] = await pg.gateway.policy.grants.list(SCOPE)
    return grant.id


async def test_a_grant_is_listed_and_revoking_it_makes_the_next_call_ask_again(
    web: WebHarness,
) -> None:
    pg = web.pg
    grant_id = await granted_always(pg)
    is_error, covered = await pg.execute(intent="write the report file", code=WRITE)
    assert (is_error, covered["status"]) == (False, "success")  # the grant covers it

    page = await web.get("/ui/usage")
    [listed] = tables(page.text)["Live grants, newest first"]
    assert listed[:4] == [grant_id[:8], "erwan", "file_write", "filesystem:write_file"]
    assert f'action="/ui/usage/grants/{grant_id}/revoke"' in page.text

    done = await web.post(f"/ui/usage/grants/{grant_id}/revoke", {})

    assert done.status_code == 303
    assert done.headers["location"] == f"/ui/usage?revoked={grant_id[:8]}#grants"
    assert await pg.gateway.policy.grants.list(SCOPE) == []
    [revoked] = await pg.events("PERMISSION_REVOKED")
    assert revoked["decided_by"] == "user:ana"
    assert revoked["details"]["grant_id"] == grant_id
    after = await web.get(done.headers["location"])
    assert "Revoked grant" in after.text
    assert "Live grants, newest first" not in after.text
    again = await approval_required(pg)
    assert again["workflowId"]
    # Revoking again (another tab) changes and audits nothing more.
    twice = await web.post(f"/ui/usage/grants/{grant_id}/revoke", {})
    assert twice.status_code == 303
    assert len(await pg.events("PERMISSION_REVOKED")) == 1


async def test_another_org_sees_no_grants_and_cannot_revoke_ours(web: WebHarness) -> None:
    grant_id = await granted_always(web.pg)
    key, _ = await ApiKeys(web.pg.gateway.db).create("evil", "webapp", "mallory", role="admin")
    transport = web.http._transport  # pyright: ignore[reportPrivateUsage]
    async with httpx.AsyncClient(transport=transport, base_url=BASE) as other:
        assert (await sign_in(other, key)).status_code == 303
        page = await other.get("/ui/usage")
        token = other.cookies.get(SESSION_COOKIE)
        assert token is not None
        refused = await other.post(
            f"/ui/usage/grants/{grant_id}/revoke",
            data={"csrf": csrf_token(token)},
            headers={"Origin": BASE},
        )
    assert page.status_code == 200
    assert grant_id[:8] not in page.text
    assert "No live grants" in page.text
    assert refused.status_code == 404
    assert [grant.id for grant in await web.pg.gateway.policy.grants.list(SCOPE)] == [grant_id]
    assert await web.pg.events("PERMISSION_REVOKED") == []


async def test_revoking_needs_the_forms_token_and_odd_ids_are_not_found(web: WebHarness) -> None:
    grant_id = await granted_always(web.pg)

    tokenless = await web.post(f"/ui/usage/grants/{grant_id}/revoke", {}, csrf=False)
    cross = await web.post(f"/ui/usage/grants/{grant_id}/revoke", {}, origin="https://evil.x")
    assert (tokenless.status_code, cross.status_code) == (403, 403)
    for odd in ("%3Cscript%3E", "x" * 300, "%00", "0" * 36, "..%2F"):
        answer = await web.post(f"/ui/usage/grants/{odd}/revoke", {})
        assert answer.status_code == 404, odd
        assert "<script>" not in answer.text
    assert [grant.id for grant in await web.pg.gateway.policy.grants.list(SCOPE)] == [grant_id]
