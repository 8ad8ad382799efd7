"""Per-day call counts over ``tool_usage`` on both backends: UTC days, zero-filled windows,
tenant isolation, one server or tool, and series per server."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from pml.errors import InvalidInput
from pml.storage.dashboard_usage_repo import (
    DayCount,
    calls_per_day,
    calls_per_day_by_server,
    intents_of,
    window,
)
from pml.storage.database import Database
from pml.storage.trace_repo import SqlTraceRepository, TraceRow
from pml.storage.usage_repo import CAPABILITY_SERVER_ID, SqlToolUsageRepository, ToolUsageRow

pytestmark = pytest.mark.anyio

NOW = datetime(2030, 3, 10, 12, 0, tzinfo=UTC)
FQDN = "acme.webapp.fs.read_json.a7f3"


def call(
    when: datetime,
    *,
    server: str = CAPABILITY_SERVER_ID,
    tool: str = FQDN,
    success: bool = True,
    latency_ms: float = 10.0,
    org: str = "acme",
    project: str = "webapp",
) -> ToolUsageRow:
    return ToolUsageRow(server, tool, latency_ms, success, org, project, "erwan", when)


async def insert(db: Database, *rows: ToolUsageRow) -> None:
    async with db.transaction() as conn:
        await SqlToolUsageRepository(conn).insert_many(list(rows))


async def test_calls_are_counted_per_utc_day_with_every_day_of_the_window_present(
    db: Database,
) -> None:
    await insert(
        db,
        call(NOW),
        call(NOW - timedelta(hours=11, minutes=59), success=False, latency_ms=30.0),
        call(NOW - timedelta(hours=12, seconds=1)),  # 23:59:59 the day before
        call(NOW - timedelta(days=3)),
        call(NOW - timedelta(days=7)),  # outside a 7-day window
        call(NOW + timedelta(days=1)),  # tomorrow: outside too
    )
    days = await calls_per_day(
        db, "acme", "webapp", server_id=CAPABILITY_SERVER_ID, tool_name=FQDN, days=7, until=NOW
    )
    assert [d.day for d in days] == [date(2030, 3, 4) + timedelta(days=i) for i in range(7)]
    by_day = {d.day: d for d in days}
    assert by_day[date(2030, 3, 10)] == DayCount(date(2030, 3, 10), 2, 1, 20.0)
    assert by_day[date(2030, 3, 9)].calls == 1
    assert by_day[date(2030, 3, 7)].calls == 1
    assert sum(d.calls for d in days) == 4
    assert by_day[date(2030, 3, 8)] == DayCount(date(2030, 3, 8), 0, 0, 0.0)
    assert by_day[date(2030, 3, 10)].successes == 1


async def test_a_non_utc_instant_lands_on_its_utc_day(db: Database) -> None:
    # 01:00 on the 10th in Tokyo is 16:00 on the 9th in UTC.
    tokyo = datetime(2030, 3, 10, 1, 0, tzinfo=timezone(timedelta(hours=9)))
    await insert(db, call(tokyo))
    days = await calls_per_day(db, "acme", "webapp", days=2, until=NOW)
    assert [(d.day, d.calls) for d in days] == [(date(2030, 3, 9), 1), (date(2030, 3, 10), 0)]


async def test_other_tenants_and_other_tools_are_not_counted(db: Database) -> None:
    await insert(
        db,
        call(NOW),
        call(NOW, org="globex"),
        call(NOW, project="other"),
        call(NOW, tool="acme.webapp.fs.other.b1c2"),
        call(NOW, server="filesystem", tool="read_text_file"),
    )
    mine = await calls_per_day(
        db, "acme", "webapp", server_id=CAPABILITY_SERVER_ID, tool_name=FQDN, days=1, until=NOW
    )
    assert [d.calls for d in mine] == [1]
    everything = await calls_per_day(db, "acme", "webapp", days=1, until=NOW)
    assert [d.calls for d in everything] == [3]
    nothing = await calls_per_day(db, "nobody", "webapp", days=3, until=NOW)
    assert [d.calls for d in nothing] == [0, 0, 0]


async def test_series_per_server_come_busiest_first(db: Database) -> None:
    await insert(
        db,
        call(NOW, server="filesystem", tool="read_text_file"),
        call(NOW - timedelta(days=1), server="filesystem", tool="list_directory"),
        call(NOW, server="filesystem", tool="read_text_file", success=False),
        call(NOW),
        call(NOW, server="shell", tool="run", org="globex"),
    )
    series = await calls_per_day_by_server(db, "acme", "webapp", days=2, until=NOW)
    assert list(series) == ["filesystem", CAPABILITY_SERVER_ID]
    assert [(d.calls, d.errors) for d in series["filesystem"]] == [(1, 0), (2, 1)]
    assert [d.calls for d in series[CAPABILITY_SERVER_ID]] == [0, 1]
    assert series["filesystem"][1].to_dict() == {
        "day": "2030-03-10",
        "calls": 2,
        "errors": 1,
        "avg_latency_ms": 10.0,
    }


def test_a_window_must_be_1_to_366_days() -> None:
    first, start, end = window(1, NOW)
    assert first == date(2030, 3, 10)
    assert (start, end) == (datetime(2030, 3, 10, tzinfo=UTC), datetime(2030, 3, 11, tzinfo=UTC))
    for bad in (0, -1, 367, True):
        with pytest.raises(InvalidInput):
            window(bad, NOW)


def trace(intent: str | None, when: datetime, **scope: str) -> TraceRow:
    return TraceRow(
        id=str(uuid.uuid4()),
        org=scope.get("org", "acme"),
        project=scope.get("project", "webapp"),
        user_id="erwan",
        intent=intent,
        capability_fqdn=scope.get("fqdn", FQDN),
        success=True,
        error=None,
        duration_ms=1.0,
        task_results=[],
        created_at=when,
    )


async def test_intents_are_distinct_most_recent_first_and_of_this_tenant_only(
    db: Database,
) -> None:
    async with db.transaction() as conn:
        await SqlTraceRepository(conn).insert_many(
            [
                trace("read the config", NOW - timedelta(days=2)),
                trace("read the config", NOW),
                trace("parse settings", NOW - timedelta(days=1)),
                trace(None, NOW),
                trace("", NOW),
                trace("secret plans of globex", NOW, org="globex"),
                trace("another capability", NOW, fqdn="acme.webapp.fs.other.b1c2"),
                trace("lire la config ✓", NOW - timedelta(days=3)),
            ]
        )
    seen = await intents_of(db, "acme", "webapp", FQDN)
    assert [(s.intent, s.runs) for s in seen] == [
        ("read the config", 2),
        ("parse settings", 1),
        ("lire la config ✓", 1),
    ]
    assert seen[0].last_seen == NOW
    assert len(await intents_of(db, "acme", "webapp", FQDN, limit=1)) == 1


def test_p95_is_the_bound_of_the_bucket_holding_the_nearest_rank_call() -> None:
    from pml.storage.tables import LATENCY_BUCKETS
    from pml.storage.usage_repo import latency_bucket
    from pml.storage.usage_stats_repo import p95_bound

    def buckets(*latencies: float) -> list[int]:
        counts = dict.fromkeys(LATENCY_BUCKETS, 0)
        for latency in latencies:
            counts[latency_bucket(latency)] += 1
        return list(counts.values())

    assert p95_bound(buckets(), 0.0) is None
    assert p95_bound(buckets(3.0), 3.0) == 3.0  # never above the highest latency seen
    assert p95_bound(buckets(*[1.0] * 95, *[900.0] * 5), 900.0) == 1.0
    assert p95_bound(buckets(*[1.0] * 94, *[900.0] * 6), 900.0) == 900.0
    assert p95_bound(buckets(60_000.0, 70_000.0), 70_000.0) == 70_000.0
    assert latency_bucket(0.0) == latency_bucket(1.0) == "lat_le_1"
    assert latency_bucket(1.0001) == "lat_le_2"
    assert latency_bucket(10_000.5) == "lat_over"


async def test_the_roll_up_adds_up_to_the_raw_rows_across_batches(db: Database) -> None:
    from pml.storage.tables import tool_usage_daily

    at = datetime(2026, 11, 20, 23, 59, tzinfo=UTC)

    def read(when: datetime, latency_ms: float, *, success: bool = True) -> ToolUsageRow:
        return call(when, server="fs", tool="read", latency_ms=latency_ms, success=success)

    first = [read(at, 5.0), read(at, 50.0, success=False)]
    second = [read(at + timedelta(minutes=2), 7.0), read(at, 500.0)]  # the next UTC day, then not
    for batch in (first, second):
        await insert(db, *batch)
    async with db.read() as conn:
        rows = {
            row.day: row for row in await conn.execute(sa.select(tool_usage_daily).order_by("day"))
        }
    assert set(rows) == {"2026-11-20", "2026-11-21"}
    day = rows["2026-11-20"]
    assert (day.calls, day.errors, day.latency_sum_ms, day.latency_max_ms) == (3, 1, 555.0, 500.0)
    assert (day.lat_le_5, day.lat_le_50, day.lat_le_500) == (1, 1, 1)
    assert rows["2026-11-21"].calls == 1


async def test_a_batch_wider_than_one_statement_is_rolled_up_whole(db: Database) -> None:
    from pml.storage.tables import tool_usage_daily
    from pml.storage.usage_repo import ROLL_UP_CHUNK

    tools = ROLL_UP_CHUNK * 2 + 7  # more roll-up rows than one statement may carry
    at = datetime(2026, 11, 20, 12, tzinfo=UTC)
    await insert(db, *(call(at, server="s", tool=f"t{index}") for index in range(tools)))
    async with db.read() as conn:
        count = await conn.execute(sa.select(sa.func.count()).select_from(tool_usage_daily))
        assert count.scalar_one() == tools
