"""Per-day counts for the dashboard's charts, from ``tool_usage_daily`` (``tool_usage``
rolled up per UTC day and tool as calls are recorded; SQLite and PostgreSQL).

    days = await calls_per_day(db, "acme", "webapp", server_id=CAPABILITY_SERVER_ID,
                               tool_name=fqdn, days=30)
    [DayCount(day=date(2026, 11, 24), calls=12, errors=1, avg_latency_ms=3.4), ...]
    by_server = await calls_per_day_by_server(db, "acme", "webapp", days=7)
    {"filesystem": [DayCount(...), ...], "pml-capabilities": [...]}
    seen = await intents_of(db, "acme", "webapp", fqdn, limit=20)
    [IntentSeen(intent="read the config", runs=3, last_seen=datetime(...)), ...]

Days are UTC calendar days, oldest first, and every day of the window is present (a day
without calls has ``calls=0``), so a chart's bars line up with dates. The grouping runs in
the database over roll-up rows (one per day and tool), whatever the number of calls.
A capability's calls are the rows with ``server_id = CAPABILITY_SERVER_ID`` and its FQDN
as ``tool_name``.
The intents a capability was run for come from its runs' traces (``execution_traces``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Final

import sqlalchemy as sa

from pml.errors import InvalidInput
from pml.storage.database import Database
from pml.storage.tables import execution_traces, tool_usage_daily
from pml.storage.types import utc_now

MAX_DAYS: Final = 366
MAX_GROUPS: Final = 200
MAX_INTENTS: Final = 200


@dataclass(frozen=True, slots=True)
class DayCount:
    """One UTC day's calls: how many, how many failed, their mean latency."""

    day: date
    calls: int
    errors: int
    avg_latency_ms: float

    @property
    def successes(self) -> int:
        return self.calls - self.errors

    def to_dict(self) -> dict[str, Any]:
        return {
            "day": self.day.isoformat(),
            "calls": self.calls,
            "errors": self.errors,
            "avg_latency_ms": round(self.avg_latency_ms, 3),
        }


def window(days: int, until: datetime | None = None) -> tuple[date, datetime, datetime]:
    """The first day and the ``[start, end)`` instants of the ``days`` UTC days ending
    with ``until``'s day (default today); ``INVALID_INPUT`` outside 1..``MAX_DAYS``."""
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_DAYS:  # pyright: ignore[reportUnnecessaryIsInstance]
        raise InvalidInput(f"days must be a whole number from 1 to {MAX_DAYS}", field="days")
    last = (until or utc_now()).astimezone(UTC).date()
    first = last - timedelta(days=days - 1)
    start = datetime.combine(first, time(), tzinfo=UTC)
    end = datetime.combine(last + timedelta(days=1), time(), tzinfo=UTC)
    return first, start, end


def _filled(first: date, days: int, found: dict[date, DayCount]) -> list[DayCount]:
    every = (first + timedelta(days=offset) for offset in range(days))
    return [found.get(day, DayCount(day, 0, 0, 0.0)) for day in every]


async def _grouped(
    db: Database,
    org: str,
    project: str,
    *,
    days: int,
    until: datetime | None,
    where: Sequence[sa.ColumnElement[bool]],
    by_server: bool,
) -> tuple[date, dict[str, dict[date, DayCount]]]:
    first, _, end = window(days, until)
    d = tool_usage_daily.c
    last = (end - timedelta(days=1)).date()
    group: sa.ColumnElement[str] = (
        d.server_id if by_server else sa.literal_column("''", sa.String()).label("server_id")
    )
    query = (
        sa.select(
            group,
            d.day,
            sa.func.sum(d.calls).label("calls"),
            sa.func.sum(d.errors).label("errors"),
            sa.func.sum(d.latency_sum_ms).label("latency_sum_ms"),
        )
        .where(d.org == org, d.project == project)
        .where(d.day >= first.isoformat(), d.day <= last.isoformat())
        .where(*where)
        .group_by(*((d.server_id,) if by_server else ()), d.day)
    )
    async with db.read() as conn:
        rows = (await conn.execute(query)).all()
    found: dict[str, dict[date, DayCount]] = {}
    for row in rows:
        when = date.fromisoformat(str(row.day)[:10])
        calls = int(row.calls or 0)
        mean = float(row.latency_sum_ms or 0.0) / calls if calls else 0.0
        count = DayCount(when, calls, int(row.errors or 0), mean)
        found.setdefault(str(row.server_id), {})[when] = count
    return first, found


async def calls_per_day(
    db: Database,
    org: str,
    project: str,
    *,
    server_id: str | None = None,
    tool_name: str | None = None,
    days: int = 30,
    until: datetime | None = None,
) -> list[DayCount]:
    """Calls made from ``org``/``project`` per UTC day over the last ``days`` days (oldest
    first, every day present), optionally of one server and/or one tool."""
    d = tool_usage_daily.c
    where: list[sa.ColumnElement[bool]] = []
    if server_id is not None:
        where.append(d.server_id == server_id)
    if tool_name is not None:
        where.append(d.tool_name == tool_name)
    first, found = await _grouped(
        db, org, project, days=days, until=until, where=where, by_server=False
    )
    return _filled(first, days, found.get("", {}))


async def calls_per_day_by_server(
    db: Database,
    org: str,
    project: str,
    *,
    days: int = 30,
    until: datetime | None = None,
) -> dict[str, list[DayCount]]:
    """Like :func:`calls_per_day`, one series per ``server_id`` that had calls in the window
    (capabilities under ``CAPABILITY_SERVER_ID``), the busiest first, at most ``MAX_GROUPS``."""
    first, found = await _grouped(
        db, org, project, days=days, until=until, where=(), by_server=True
    )
    busiest = sorted(
        found, key=lambda server: (-sum(c.calls for c in found[server].values()), server)
    )
    return {server: _filled(first, days, found[server]) for server in busiest[:MAX_GROUPS]}


@dataclass(frozen=True, slots=True)
class IntentSeen:
    """One distinct intent a capability was run for: how many runs, the latest one."""

    intent: str
    runs: int
    last_seen: datetime


async def intents_of(
    db: Database, org: str, project: str, fqdn: str, *, limit: int = 20
) -> list[IntentSeen]:
    """The distinct intents of the runs of ``fqdn`` traced in ``org``/``project``, the most
    recently seen first (at most ``limit``, capped at ``MAX_INTENTS``)."""
    t = execution_traces.c
    last = sa.func.max(t.created_at).label("last_seen")
    query = (
        sa.select(t.intent, sa.func.count().label("runs"), last)
        .where(t.capability_fqdn == fqdn, t.org == org, t.project == project)
        .where(t.intent.is_not(None), t.intent != "")
        .group_by(t.intent)
        .order_by(last.desc(), t.intent)
        .limit(max(1, min(limit, MAX_INTENTS)))
    )
    async with db.read() as conn:
        rows = (await conn.execute(query)).all()
    return [IntentSeen(str(row.intent), int(row.runs), _aware(row.last_seen)) for row in rows]


def _aware(value: object) -> datetime:
    # max() of a UtcDateTime column comes back untyped on SQLite (text): read it as UTC.
    parsed = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
