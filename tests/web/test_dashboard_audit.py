"""The audit page: after the agent acts, a signed-in admin sees exactly what
``GET /api/audit`` shows an admin key, narrowed by each filter, page by page without gaps,
followed live; another org's admin sees none of it; hostile parameters get a 400 page that
says what is wrong (never a 500)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from starlette.datastructures import QueryParams

from pml.gateway.http import create_app
from pml.gateway.keys import ApiKeys
from pml.registry.scope import Principal, Scope
from pml.storage.audit_repo import AuditEntry, AuditRepository, AuditRow
from pml.storage.types import utc_now
from pml.web.dashboard.audit import AuditPages
from pml.web.dashboard.audit_filters import parse_filters
from pml.web.dashboard.sessions import Viewer
from web.conftest import BASE, WebHarness, sign_in

pytestmark = pytest.mark.anyio

READ = 'text = await mcp.filesystem.read_text_file(path=args["path"])\nreturn text'
WRITE = 'await mcp.filesystem.write_file(path="/w/x.txt", content="x")\nreturn 1'
INTENT = "read the note file"
ROW_ID = re.compile(r'<tr id="event-([0-9]+)">')
OLDER = re.compile(r'<a href="([^"]+)" rel="prev">')
NEWER = re.compile(r'<a href="([^"]+)" rel="next">')
AFTER_ID = re.compile(r'data-after-id="([0-9]+)"')
LIVE_URL = re.compile(r'data-live="([^"]+)"')


async def agent_acts(web: WebHarness, runs: int = 2) -> None:
    """The agent reads files (allowed) and tries a write the policy forbids."""
    for index in range(runs):
        failed, data = await web.pg.execute(
            intent=INTENT, code=READ, args={"path": f"/w/{index}.txt"}
        )
        assert failed is False, data
    failed, _ = await web.pg.execute(intent=INTENT, code=WRITE)
    assert failed is True
    await web.pg.gateway.policy.audit.flush()


async def stored(web: WebHarness) -> list[AuditRow]:
    """Every event of acme.webapp, oldest first."""
    await web.pg.gateway.policy.audit.flush()
    repo = AuditRepository(web.pg.gateway.db)
    return await repo.tail(org="acme", project="webapp", after_id=0, limit=100_000)


def unescape(url: str) -> str:
    return url.replace("&amp;", "&")


def shown_ids(html: str) -> list[int]:
    return [int(found) for found in ROW_ID.findall(html)]


async def every_page(web: WebHarness, **params: str) -> tuple[list[int], list[list[int]]]:
    """Walk Older links from the newest page: all ids shown (oldest first) and the pages."""
    page = await web.get("/ui/audit", **params)
    assert page.status_code == 200, page.text
    pages = [shown_ids(page.text)]
    while (older := OLDER.search(page.text)) is not None:
        page = await web.http.get(unescape(older.group(1)))
        assert page.status_code == 200, page.text
        pages.append(shown_ids(page.text))
    return [id_ for ids in reversed(pages) for id_ in ids], pages


async def api_ids(web: WebHarness, key: str | None = None) -> list[int]:
    """What ``GET /api/audit`` gives a key (the admin's by default), oldest first."""
    headers = {"Authorization": f"Bearer {key or web.admin_key}"}
    answer = await web.http.get("/api/audit", params={"limit": "1000"}, headers=headers)
    assert answer.status_code == 200, answer.text
    return [item["id"] for item in answer.json()["items"]]


def entry(actor: str, event: str = "TOOL_CALL_END", **fields: Any) -> AuditEntry:
    values: dict[str, Any] = {"details": {"tool": "time:get_current_time"}}
    values.update(fields)
    return AuditEntry(
        ts=utc_now(), event=event, org="acme", project="webapp", actor=actor, **values
    )


async def test_the_page_shows_the_same_events_as_the_api_shows_an_admin_key(
    web: WebHarness,
) -> None:
    await agent_acts(web)
    await AuditRepository(web.pg.gateway.db).insert_many([entry("bob"), entry("carol")])
    shown, _ = await every_page(web)
    assert shown == await api_ids(web)
    page = await web.get("/ui/audit")
    assert {"erwan", "bob", "carol", "ana"} <= set(
        re.findall(r'data-label="User">([^<]+)<', page.text)
    )
    assert "POLICY_DENIED" in page.text


@pytest.mark.parametrize(
    ("params", "keep"),
    [
        ({"event": "POLICY_DENIED"}, lambda row: row.event == "POLICY_DENIED"),
        (
            {"event": "TOOL_CALL_START, TOOL_CALL_END"},
            lambda row: row.event in ("TOOL_CALL_START", "TOOL_CALL_END"),
        ),
        ({"user": "bob"}, lambda row: row.actor == "bob"),
        ({"tool": "filesystem:write_file"}, lambda row: row.tool == "filesystem:write_file"),
        ({"decided_by": "policy:file_task"}, lambda row: row.decided_by == "policy:file_task"),
        (
            {"event": "TOOL_CALL_END", "tool": "filesystem:read_text_file", "user": "erwan"},
            lambda row: (
                row.event == "TOOL_CALL_END"
                and row.tool == "filesystem:read_text_file"
                and row.actor == "erwan"
            ),
        ),
    ],
    ids=["event", "events", "user", "tool", "decided_by", "combined"],
)
async def test_each_filter_narrows_to_exactly_the_matching_events(
    web: WebHarness, params: dict[str, str], keep: Any
) -> None:
    await agent_acts(web)
    await AuditRepository(web.pg.gateway.db).insert_many([entry("bob")])
    expected = [row.id for row in await stored(web) if keep(row)]
    shown, _ = await every_page(web, **params)
    assert shown == expected
    assert expected, "the filter should match something"
    assert len(expected) < len(await stored(web))


async def test_the_capability_and_request_filters_find_one_runs_events(web: WebHarness) -> None:
    await agent_acts(web, runs=1)
    rows = await stored(web)
    created = next(row for row in rows if row.event == "CAPABILITY_CREATED")
    assert created.capability is not None
    assert created.request_id is not None
    by_capability, _ = await every_page(web, capability=created.capability)
    assert by_capability == [row.id for row in rows if row.capability == created.capability]
    assert {"POSTHOOK_CAPTURE", "CAPABILITY_CREATED", "EXECUTOR_RESPONSE"} <= {
        row.event for row in rows if row.id in by_capability
    }
    page = await web.get("/ui/audit", event="CAPABILITY_CREATED")
    link = re.search(r'<a href="(/ui/audit\?request_id=[^"]+)"', page.text)
    assert link is not None
    clicked = await web.http.get(unescape(link.group(1)))
    assert shown_ids(clicked.text) == [
        row.id for row in rows if row.request_id == created.request_id
    ]
    assert "ROUTER_OUTPUT" in clicked.text
    assert "EXECUTOR_RESPONSE" in clicked.text


async def test_a_time_range_in_utc_includes_its_whole_last_minute(web: WebHarness) -> None:
    start = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
    repo = AuditRepository(web.pg.gateway.db)
    await repo.insert_many(
        [
            replace_ts(entry("bob", details={"n": minute}), start + timedelta(minutes=minute))
            for minute in range(10)
        ]
    )
    rows = [row for row in await stored(web) if row.actor == "bob"]
    shown, _ = await every_page(
        web, user="bob", **{"from": "2025-06-01T12:03", "to": "2025-06-01T12:05"}
    )
    assert shown == [row.id for row in rows if row.details["n"] in (3, 4, 5)]
    seconds, _ = await every_page(
        web, user="bob", **{"from": "2025-06-01T12:03:00", "to": "2025-06-01T12:04:00"}
    )
    assert seconds == [row.id for row in rows if row.details["n"] in (3, 4)]


def replace_ts(item: AuditEntry, ts: datetime) -> AuditEntry:
    return AuditEntry(
        ts=ts,
        event=item.event,
        org=item.org,
        project=item.project,
        details=item.details,
        actor=item.actor,
    )


async def test_older_and_newer_links_cover_every_event_exactly_once_and_keep_the_filters(
    web: WebHarness,
) -> None:
    repo = AuditRepository(web.pg.gateway.db)
    await repo.insert_many(
        [entry("bob", "POLICY_DENIED" if index % 3 else "TOOL_CALL_END") for index in range(130)]
    )
    await repo.insert_many([entry("bob", "ROUTER_OUTPUT") for _ in range(20)])
    expected = [
        row.id for row in await stored(web) if row.event in ("POLICY_DENIED", "TOOL_CALL_END")
    ]
    shown, pages = await every_page(web, event="POLICY_DENIED,TOOL_CALL_END")
    assert shown == expected
    assert [len(page) for page in pages] == [50, 50, 30]
    assert len(set(shown)) == len(shown)

    page = await web.http.get(
        f"/ui/audit?event=POLICY_DENIED,TOOL_CALL_END&before_id={expected[0] + 1}"
    )
    forward: list[int] = shown_ids(page.text)
    assert forward == expected[:1]
    assert "data-live=" not in page.text  # an older page does not follow live
    while (newer := NEWER.search(page.text)) is not None:
        link = unescape(newer.group(1))
        assert "event=POLICY_DENIED%2CTOOL_CALL_END" in link
        page = await web.http.get(link)
        forward.extend(shown_ids(page.text))
    assert forward == expected
    assert "data-live=" in page.text  # the page that reaches the newest event follows


async def test_the_live_fragment_returns_only_newer_events_as_rows(web: WebHarness) -> None:
    await agent_acts(web, runs=1)
    page = await web.get("/ui/audit", event="TOOL_CALL_END,POLICY_DENIED")
    after = AFTER_ID.search(page.text)
    live = LIVE_URL.search(page.text)
    assert after is not None
    assert live is not None
    assert 'data-live-append="1"' in page.text
    assert 'data-interval="2000"' in page.text
    assert re.search(
        r'<input type="checkbox" id="audit-follow" data-live-toggle="audit-rows"', page.text
    )
    assert '<label for="audit-follow">Follow live</label>' in page.text
    newest = int(after.group(1))
    assert newest == max(shown_ids(page.text))
    url = unescape(live.group(1))
    headers = {"X-PML-Fragment": "1"}

    quiet = await web.http.get(f"{url}&after_id={newest}", headers=headers)
    assert quiet.status_code == 200
    assert quiet.text.strip() == ""
    assert quiet.headers["X-PML-After-Id"] == str(newest)

    await agent_acts(web, runs=1)
    fresh = await web.http.get(f"{url}&after_id={newest}", headers=headers)
    expected = [
        row.id
        for row in await stored(web)
        if row.id > newest and row.event in ("TOOL_CALL_END", "POLICY_DENIED")
    ]
    assert shown_ids(fresh.text) == expected
    assert expected  # the new read (a repeated denial is coalesced for a minute)
    assert fresh.text.lstrip().startswith("<tr")
    assert fresh.headers["X-PML-After-Id"] == str(expected[-1])
    assert "<html" not in fresh.text


async def test_another_orgs_admin_sees_none_of_these_events(web: WebHarness) -> None:
    await agent_acts(web, runs=1)
    rows = await stored(web)
    globex, _ = await ApiKeys(web.pg.gateway.db).create("globex", "site", "gina", role="admin")
    transport = httpx.ASGITransport(app=create_app(web.pg.gateway))
    async with httpx.AsyncClient(transport=transport, base_url=BASE) as other:
        assert (await sign_in(other, globex)).status_code == 303
        page = await other.get("/ui/audit")
        assert page.status_code == 200
        acme_ids = {row.id for row in rows}
        assert not acme_ids & set(shown_ids(page.text))
        request_id = rows[-1].request_id or ""
        by_request = await other.get("/ui/audit", params={"request_id": request_id})
        assert not acme_ids & set(shown_ids(by_request.text))
        live = await other.get(
            "/ui/audit/live", params={"after_id": "0"}, headers={"X-PML-Fragment": "1"}
        )
        assert live.status_code == 200
        assert not acme_ids & set(shown_ids(live.text))
        assert ">erwan<" not in page.text + by_request.text + live.text


async def test_a_viewer_who_is_not_an_admin_sees_only_their_own_events(web: WebHarness) -> None:
    await AuditRepository(web.pg.gateway.db).insert_many([entry("bob"), entry("erwan")])
    rows = await stored(web)
    principal = Principal(Scope("acme", "webapp", "erwan"), "agent")
    viewer = Viewer(principal, "token", utc_now())
    pages = AuditPages(AuditRepository(web.pg.gateway.db))
    own = await pages.page(viewer, parse_filters(QueryParams("")))
    assert [row.id for row in own.rows] == [row.id for row in rows if row.actor == "erwan"]
    asked_for_bob = await pages.page(viewer, parse_filters(QueryParams("user=bob")))
    assert asked_for_bob.rows == []


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("user=a%00b", "Invalid user: control characters are not allowed."),
        ("tool=" + "x" * 10_000, "Invalid tool: at most 400 characters."),
        ("event=" + "A" * 10_000, "Invalid event: at most 2048 characters."),
        ("event=%C3%A9v%C3%A9nement", "Invalid event: 'événement'"),
        ("event=POLICY_DENIED'%20OR%201=1--", "Invalid event:"),
        ("event=x%3Cscript%3Ealert(1)%3C/script%3E", "Invalid event:"),
        ("before_id=-1", "Invalid before_id: '-1'"),
        ("after_id=1e3", "Invalid after_id: '1e3'"),
        ("before_id=99999999999999999999", "Invalid before_id"),
        ("before_id=5&after_id=3", "Give before_id or after_id, not both."),
        ("from=yesterday", "Invalid from: 'yesterday'"),
        ("from=2025-02-30T10:00", "Invalid from"),
        ("from=2025-06-02T00:00&to=2025-06-01T00:00", "from is after to"),
        ("to=9999-12-31T23:59", "Invalid to: too far in the future."),
        ("user=a&user=b", "Give user at most once."),
        ("event=" + ",".join(["POLICY_DENIED"] * 33), "Give at most 32 event names."),
        ("order=id;DROP%20TABLE%20audit_events", "Unknown parameter: 'order'"),
        ("capability=" + "%F0%9F%8C%8D" * 401, "Invalid capability: at most 400 characters."),
    ],
)
async def test_hostile_parameters_get_a_400_page_that_says_what_is_wrong(
    web: WebHarness, query: str, message: str
) -> None:
    page = await web.http.get(f"/ui/audit?{query}")
    assert page.status_code == 400
    assert message.replace("'", "&#39;") in page.text
    assert '<form class="audit-filters card"' in page.text  # the form, to correct it
    assert "<script>alert" not in page.text
    assert "Traceback" not in page.text
    assert page.headers["Content-Security-Policy"].startswith("default-src 'self'")
    live = await web.http.get(f"/ui/audit/live?after_id=0&{query}")
    assert live.status_code == 400


@pytest.mark.parametrize(
    "value", ["' OR '1'='1", 'x"; DROP TABLE audit_events; --', "zoë 🌍", "%", "\u202eevil"]
)
async def test_odd_but_valid_text_filters_match_nothing_and_harm_nothing(
    web: WebHarness, value: str
) -> None:
    await agent_acts(web, runs=1)
    before = await api_ids(web)
    for name in ("user", "tool", "capability", "decided_by", "request_id"):
        page = await web.get("/ui/audit", **{name: value})
        assert page.status_code == 200
        assert shown_ids(page.text) == []
    assert await api_ids(web) == before


async def test_the_live_fragment_needs_a_session_and_an_after_id(web: WebHarness) -> None:
    missing = await web.http.get("/ui/audit/live", headers={"X-PML-Fragment": "1"})
    assert missing.status_code == 400
    stray = await web.http.get("/ui/audit/live?after_id=1&before_id=3")
    assert stray.status_code == 400
    transport = httpx.ASGITransport(app=create_app(web.pg.gateway))
    async with httpx.AsyncClient(transport=transport, base_url=BASE) as stranger:
        answer = await stranger.get("/ui/audit/live?after_id=0", headers={"X-PML-Fragment": "1"})
        assert answer.status_code == 401
        page = await stranger.get("/ui/audit")
        assert page.status_code == 303


async def test_details_are_escaped_compact_and_bounded(web: WebHarness) -> None:
    details = {"nested": {"a": [1, 2]}, "html": "<script>alert(1)</script>", "blob": "y" * 20_000}
    await AuditRepository(web.pg.gateway.db).insert_many(
        [entry("<b>bob</b>", details=details, request_id='r"><script>x</script>')]
    )
    page = await web.get("/ui/audit")
    assert page.status_code == 200
    assert "<script>" not in page.text.split("</head>")[1]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    assert "&lt;b&gt;bob&lt;/b&gt;" in page.text
    assert "y" * 4000 not in page.text
    assert "(20" in page.text
    assert "characters in all)" in page.text
    assert '"nested":{"a":[1,2]}' in page.text.replace("&#34;", '"')
    assert "request_id=r%22%3E%3Cscript%3Ex%3C%2Fscript%3E" in page.text
