"""Searching the audit log on a real database (SQLite and PostgreSQL): what an event is
about is stored in its own columns, every filter narrows, pages in either direction cover
every event exactly once, another tenant's events never appear, and time ranges are exact
even where times and ids disagree (events written late)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from pml.errors import InvalidInput
from pml.storage.audit_repo import AuditEntry, AuditQuery, AuditRepository, AuditRow
from pml.storage.database import Database
from pml.storage.tables import audit_events

pytestmark = pytest.mark.anyio

T0 = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
FQDN = "acme.webapp.fs.read_json.a7f3"
OTHER_FQDN = "acme.webapp.web.fetch.b0c1"
EVENTS = ("TOOL_CALL_START", "TOOL_CALL_END", "PERMISSION_CHECK", "POLICY_DENIED")
ACTORS = ("erwan", "ana", "bob")
TOOLS = ("filesystem:read_text_file", "shell:run", "time:get_current_time")
DECIDERS = ("policy:default", "permissions:allow", None)


def entry(second: float, org: str = "acme", project: str = "webapp", **fields: Any) -> AuditEntry:
    values: dict[str, Any] = {"event": "TOOL_CALL_END", "details": {}, "actor": "erwan"}
    values.update(fields)
    return AuditEntry(ts=T0 + timedelta(seconds=second), org=org, project=project, **values)


def varied(count: int, seed: int = 7) -> list[AuditEntry]:
    """A log of acme.webapp with some globex events mixed in; about one event in ten is
    written late (its time well before its neighbours'), as a retried batch would be."""
    rnd = random.Random(seed)
    rows: list[AuditEntry] = []
    for index in range(count):
        second = index - rnd.randrange(60) if rnd.random() < 0.1 else index
        tool = rnd.choice(TOOLS)
        details: dict[str, Any] = {"tool": tool, "n": index}
        if index % 7 == 0:
            details = {"capability": rnd.choice((FQDN, OTHER_FQDN)), "n": index}
        org, project = ("globex", "site") if index % 5 == 0 else ("acme", "webapp")
        rows.append(
            entry(
                second,
                org,
                project,
                event=rnd.choice(EVENTS),
                actor=rnd.choice(ACTORS),
                details=details,
                request_id=f"r-{index // 4}",
                decided_by=rnd.choice(DECIDERS),
            )
        )
    return rows


async def stored(db: Database) -> list[AuditRow]:
    return await AuditRepository(db).tail(org=None, project=None, after_id=0, limit=100_000)


def matches(row: AuditRow, where: AuditQuery) -> bool:
    """The reference: what ``search`` must find, decided in Python."""
    checks = (
        not where.events or row.event in where.events,
        where.actor is None or row.actor == where.actor,
        where.tool is None or row.tool == where.tool,
        where.capability is None or row.capability == where.capability,
        where.decided_by is None or row.decided_by == where.decided_by,
        where.request_id is None or row.request_id == where.request_id,
        where.since is None or row.ts >= where.since,
        where.until is None or row.ts < where.until,
    )
    return row.org == "acme" and row.project == "webapp" and all(checks)


async def walk_back(repo: AuditRepository, where: AuditQuery, size: int) -> list[list[int]]:
    """Every page from the newest to the oldest, as ids."""
    pages: list[list[int]] = []
    before: int | None = None
    while True:
        page = await repo.search(
            org="acme", project="webapp", limit=size, where=where, before_id=before
        )
        if not page:
            return pages
        pages.append([row.id for row in page])
        before = page[0].id


def ids(rows: Sequence[AuditRow]) -> list[int]:
    return [row.id for row in rows]


async def test_what_an_event_is_about_is_stored_in_its_own_columns(db: Database) -> None:
    repo = AuditRepository(db)
    await repo.insert_many(
        [
            entry(1, details={"tool": "filesystem:write_file", "capability": "file_write"}),
            entry(2, event="CAPABILITY_CREATED", details={"capability": FQDN}),
            entry(3, details={"fqdn": FQDN, "capabilityFqdn": OTHER_FQDN}),
            entry(4, details={"capabilityFqdn": OTHER_FQDN, "tool": 42}),
            entry(5, details={"tool": "x:" + "y" * 600, "fqdn": "é" * 500}),
            entry(6, details={"tool": "", "fqdn": ["not", "text"], "capability": "a.b.c"}),
        ]
    )
    rows = await stored(db)
    assert [(row.tool, row.capability) for row in rows] == [
        ("filesystem:write_file", None),  # a permission capability is not a capability's FQDN
        (None, FQDN),
        (None, FQDN),
        (None, OTHER_FQDN),
        ("x:" + "y" * 398, "é" * 400),
        (None, None),
    ]
    assert rows[0].to_dict()["details"] == {
        "tool": "filesystem:write_file",
        "capability": "file_write",
    }
    assert "tool" not in rows[0].to_dict()  # the API's shape is unchanged


async def test_the_newest_page_comes_oldest_first_and_older_pages_follow_without_gaps(
    db: Database,
) -> None:
    repo = AuditRepository(db)
    await repo.insert_many([entry(index, details={"n": index}) for index in range(23)])
    everything = ids(await stored(db))
    newest = await repo.search(org="acme", project="webapp", limit=10)
    assert ids(newest) == everything[-10:]
    pages = await walk_back(repo, AuditQuery(), 10)
    assert [len(page) for page in pages] == [10, 10, 3]
    assert sorted(id_ for page in pages for id_ in page) == everything


async def test_after_id_pages_forward_and_returns_only_newer_events(db: Database) -> None:
    repo = AuditRepository(db)
    await repo.insert_many([entry(index) for index in range(12)])
    everything = ids(await stored(db))
    seen: list[int] = []
    after = 0
    while page := await repo.search(org="acme", project="webapp", limit=5, after_id=after):
        seen.extend(ids(page))
        after = page[-1].id
    assert seen == everything
    assert await repo.search(org="acme", project="webapp", limit=5, after_id=after) == []
    await repo.insert_many([entry(99, event="POLICY_DENIED")])
    new = await repo.search(org="acme", project="webapp", limit=5, after_id=after)
    assert [row.event for row in new] == ["POLICY_DENIED"]


@pytest.mark.parametrize(
    "where",
    [
        AuditQuery(events=("POLICY_DENIED",)),
        AuditQuery(events=("POLICY_DENIED", "TOOL_CALL_START", "POLICY_DENIED")),
        AuditQuery(actor="ana"),
        AuditQuery(tool="shell:run"),
        AuditQuery(capability=FQDN),
        AuditQuery(decided_by="policy:default"),
        AuditQuery(request_id="r-17"),
        AuditQuery(since=T0 + timedelta(seconds=100)),
        AuditQuery(until=T0 + timedelta(seconds=40)),
        AuditQuery(since=T0 + timedelta(seconds=50), until=T0 + timedelta(seconds=90)),
        AuditQuery(
            events=("TOOL_CALL_END", "PERMISSION_CHECK"), actor="bob", tool="time:get_current_time"
        ),
        AuditQuery(actor="nobody"),
    ],
    ids=lambda where: repr(where)[11:60],
)
async def test_each_filter_finds_exactly_the_matching_events_of_its_tenant(
    db: Database, where: AuditQuery
) -> None:
    repo = AuditRepository(db)
    await repo.insert_many(varied(200))
    expected = [row.id for row in await stored(db) if matches(row, where)]
    pages = await walk_back(repo, where, 7)
    found = [id_ for page in reversed(pages) for id_ in page]
    assert found == expected
    assert all(page == sorted(page) for page in pages)
    if where.actor != "nobody":
        assert expected, "the filter should match something"


async def test_time_ranges_are_exact_whichever_index_serves_them(db: Database) -> None:
    """Events written late break the order of times along ids; many ranges and cursors,
    each compared with the reference, page by page in both directions."""
    repo = AuditRepository(db)
    await repo.insert_many(varied(300, seed=11))
    rows = await stored(db)
    rnd = random.Random(3)
    for _ in range(40):
        since = T0 + timedelta(seconds=rnd.randrange(-70, 300)) if rnd.random() < 0.7 else None
        until = T0 + timedelta(seconds=rnd.randrange(-10, 330)) if rnd.random() < 0.7 else None
        event = (rnd.choice(EVENTS),) if rnd.random() < 0.3 else ()
        where = AuditQuery(events=event, since=since, until=until)
        expected = [row.id for row in rows if matches(row, where)]
        backwards = await walk_back(repo, where, rnd.choice((3, 10, 50)))
        assert [id_ for page in reversed(backwards) for id_ in page] == expected, where
        forwards: list[int] = []
        after = 0
        while page := await repo.search(
            org="acme", project="webapp", limit=9, where=where, after_id=after
        ):
            forwards.extend(ids(page))
            after = page[-1].id
        assert forwards == expected, where


async def test_another_tenants_events_never_appear(db: Database) -> None:
    repo = AuditRepository(db)
    await repo.insert_many(
        [
            entry(1, "globex", "site", actor="gina", request_id="r-1", details={"tool": "a:b"}),
            entry(2, "acme", "other", request_id="r-1", details={"tool": "a:b"}),
            entry(3, request_id="r-1", details={"tool": "a:b"}),
        ]
    )
    for where in (AuditQuery(), AuditQuery(request_id="r-1"), AuditQuery(tool="a:b")):
        found = await repo.search(org="acme", project="webapp", limit=10, where=where)
        assert [(row.org, row.project) for row in found] == [("acme", "webapp")]
    assert (
        await repo.search(org="acme", project="webapp", limit=10, where=AuditQuery(actor="gina"))
        == []
    )


async def test_hostile_filter_values_match_nothing_and_harm_nothing(db: Database) -> None:
    repo = AuditRepository(db)
    await repo.insert_many([entry(1), entry(2, actor="zoë 🌍")])
    for value in ("' OR 1=1 --", 'x"; DROP TABLE audit_events; --', "%", "_", "*"):
        where = AuditQuery(actor=value, tool=None, decided_by=None)
        assert await repo.search(org="acme", project="webapp", limit=10, where=where) == []
        assert (
            await repo.search(
                org="acme", project="webapp", limit=10, where=replace(where, actor=None, tool=value)
            )
            == []
        )
    unicode = await repo.search(
        org="acme", project="webapp", limit=10, where=AuditQuery(actor="zoë 🌍")
    )
    assert [row.actor for row in unicode] == ["zoë 🌍"]
    async with db.read() as conn:
        count = (await conn.execute(sa.select(sa.func.count()).select_from(audit_events))).scalar()
    assert count == 2


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 5, "before_id": -1}, "before_id"),
        ({"limit": 5, "after_id": -3}, "after_id"),
        ({"limit": 5, "before_id": 9, "after_id": 2}, "before_id"),
    ],
)
async def test_a_bad_limit_or_cursor_is_refused_as_invalid_input(
    db: Database, arguments: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidInput) as raised:
        await AuditRepository(db).search(org="acme", project="webapp", **arguments)
    assert raised.value.data.get("field") == field


async def test_an_empty_log_gives_empty_pages(db: Database) -> None:
    repo = AuditRepository(db)
    where = AuditQuery(since=T0, until=T0 + timedelta(hours=1))
    assert await repo.search(org="acme", project="webapp", limit=5, where=where) == []
    assert await repo.search(org="acme", project="webapp", limit=5, after_id=0, where=where) == []
