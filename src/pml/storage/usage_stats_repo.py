"""The usage page's figures over ``tool_usage``, aggregated in SQL over a bounded window.

    async with db.read() as conn:
        stats = UsageStats(conn)
        days = await stats.per_day("acme", "webapp", start, end)      # tools, capabilities
        tools = await stats.per_tool("acme", "webapp", start, end)    # busiest first
        p95 = await stats.p95("acme", "webapp", start, end, [("time", "get_current_time")])
    overview = await usage_overview(db, "acme", "webapp", days=30)   # all of it, one connection

Every query filters on ``org``, ``project`` and a ``called_at`` range, which the index
``(org, project, called_at)`` serves; grouping happens in the database, so the page costs the
same whatever the number of calls. Rows of ``server_id = CAPABILITY_SERVER_ID`` are
capability runs (their FQDN is the tool name); the tool calls a capability makes are rows of
their own servers, so the two kinds are counted apart, never added up. The 95th percentile
is the nearest-rank one (the smallest latency at or above 95 % of the calls), computed with
window functions for a bounded list of tools, the same on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pml.storage.dashboard_usage_repo import DayCount, window
from pml.storage.database import Database
from pml.storage.tables import capability_records, tool_usage
from pml.storage.usage_repo import CAPABILITY_SERVER_ID

MAX_TOOLS: Final = 500  # groups read per page (a catalog and its capabilities, with room)
MAX_PERCENTILE_TOOLS: Final = 50
MAX_NAMES: Final = 200


@dataclass(frozen=True, slots=True)
class ToolStats:
    """One tool's (or capability's) calls in the window."""

    server_id: str
    tool_name: str
    calls: int
    errors: int
    avg_latency_ms: float
    max_latency_ms: float
    p95_latency_ms: float | None = None

    @property
    def is_capability(self) -> bool:
        return self.server_id == CAPABILITY_SERVER_ID

    @property
    def label(self) -> str:
        """``server:tool``, or a capability's FQDN."""
        return self.tool_name if self.is_capability else f"{self.server_id}:{self.tool_name}"

    @property
    def error_rate(self) -> float:
        return self.errors / self.calls if self.calls else 0.0


@dataclass(frozen=True, slots=True)
class DailyUsage:
    """Per UTC day, oldest first, every day present: tool calls and capability runs."""

    tools: list[DayCount]
    capabilities: list[DayCount]


@dataclass(frozen=True, slots=True)
class UsageOverview:
    """What the usage page shows for one org/project."""

    first_day: date
    last_day: date
    daily: DailyUsage
    tools: list[ToolStats]  # upstream tools, busiest first
    capabilities: list[ToolStats]  # capability runs, busiest first

    @property
    def tool_calls(self) -> int:
        return sum(day.calls for day in self.daily.tools)

    @property
    def tool_errors(self) -> int:
        return sum(day.errors for day in self.daily.tools)

    @property
    def capability_runs(self) -> int:
        return sum(day.calls for day in self.daily.capabilities)

    @property
    def capability_errors(self) -> int:
        return sum(day.errors for day in self.daily.capabilities)


def _day_of(conn: AsyncConnection) -> sa.ColumnElement[str]:
    """``called_at`` as ``YYYY-MM-DD`` in UTC, in this backend's SQL."""
    column = tool_usage.c.called_at
    if conn.dialect.name == "postgresql":
        # Literals, not bound parameters: GROUP BY must repeat the very same expression.
        utc = sa.func.timezone(sa.literal_column("'UTC'"), column)
        return sa.func.to_char(utc, sa.literal_column("'YYYY-MM-DD'"))
    return sa.func.date(column)  # SQLite keeps naive UTC text (see UtcDateTime)


def _errors() -> sa.ColumnElement[int]:
    return sa.func.sum(sa.case((tool_usage.c.success.is_(False), 1), else_=0))


class UsageStats:
    """Aggregates over ``tool_usage`` for one org/project and ``[start, end)``."""

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn

    def _window(self, org: str, project: str, start: datetime, end: datetime) -> sa.Select[Any]:
        t = tool_usage.c
        return sa.select().where(
            t.org == org, t.project == project, t.called_at >= start, t.called_at < end
        )

    async def per_day(self, org: str, project: str, start: datetime, end: datetime) -> DailyUsage:
        """Calls per UTC day (tool calls and capability runs apart), every day present."""
        t = tool_usage.c
        day = _day_of(self.conn).label("day")
        kind = sa.case((t.server_id == CAPABILITY_SERVER_ID, 1), else_=0).label("capability")
        query = (
            self._window(org, project, start, end)
            .add_columns(
                kind,
                day,
                sa.func.count().label("calls"),
                _errors().label("errors"),
                sa.func.avg(t.latency_ms).label("avg_latency_ms"),
            )
            .group_by(kind, day)
        )
        found: tuple[dict[date, DayCount], dict[date, DayCount]] = ({}, {})
        for row in await self.conn.execute(query):
            when = date.fromisoformat(str(row.day)[:10])
            found[int(row.capability)][when] = DayCount(
                when, int(row.calls), int(row.errors or 0), float(row.avg_latency_ms or 0.0)
            )
        first, last = start.date(), (end - timedelta(microseconds=1)).date()
        days = [first + timedelta(days=n) for n in range((last - first).days + 1)]
        tools, capabilities = found
        return DailyUsage(
            tools=[tools.get(d, DayCount(d, 0, 0, 0.0)) for d in days],
            capabilities=[capabilities.get(d, DayCount(d, 0, 0, 0.0)) for d in days],
        )

    async def per_tool(
        self, org: str, project: str, start: datetime, end: datetime, *, limit: int = MAX_TOOLS
    ) -> list[ToolStats]:
        """Calls, errors, mean and highest latency per tool and capability, busiest first."""
        t = tool_usage.c
        calls = sa.func.count().label("calls")
        query = (
            self._window(org, project, start, end)
            .add_columns(
                t.server_id,
                t.tool_name,
                calls,
                _errors().label("errors"),
                sa.func.avg(t.latency_ms).label("avg_latency_ms"),
                sa.func.max(t.latency_ms).label("max_latency_ms"),
            )
            .group_by(t.server_id, t.tool_name)
            .order_by(calls.desc(), t.server_id, t.tool_name)
            .limit(max(1, min(limit, MAX_TOOLS)))
        )
        return [
            ToolStats(
                server_id=str(row.server_id),
                tool_name=str(row.tool_name),
                calls=int(row.calls),
                errors=int(row.errors or 0),
                avg_latency_ms=float(row.avg_latency_ms or 0.0),
                max_latency_ms=float(row.max_latency_ms or 0.0),
            )
            for row in await self.conn.execute(query)
        ]

    async def p95(
        self,
        org: str,
        project: str,
        start: datetime,
        end: datetime,
        tools: Sequence[tuple[str, str]],
    ) -> dict[tuple[str, str], float]:
        """The nearest-rank 95th percentile latency of each of ``tools`` (server, tool)."""
        wanted = list(dict.fromkeys(tools))[:MAX_PERCENTILE_TOOLS]
        if not wanted:
            return {}
        t = tool_usage.c
        group = (t.server_id, t.tool_name)
        ranked = (
            self._window(org, project, start, end)
            .add_columns(
                t.server_id,
                t.tool_name,
                t.latency_ms,
                sa.func.row_number().over(partition_by=group, order_by=t.latency_ms).label("rank"),
                sa.func.count().over(partition_by=group).label("total"),
            )
            .where(sa.or_(*(sa.and_(t.server_id == s, t.tool_name == n) for s, n in wanted)))
            .subquery()
        )
        r = ranked.c
        # rank = ceil(0.95 * total), in integers: 100 * rank >= 95 * total > 100 * (rank - 1)
        query = sa.select(r.server_id, r.tool_name, r.latency_ms).where(
            r.rank * 100 >= r.total * 95, (r.rank - 1) * 100 < r.total * 95
        )
        return {
            (str(row.server_id), str(row.tool_name)): float(row.latency_ms)
            for row in await self.conn.execute(query)
        }


def slowest_first(stats: Sequence[ToolStats]) -> list[ToolStats]:
    """By mean latency, slowest first (then by name, for a stable order)."""
    return sorted(stats, key=lambda s: (-s.avg_latency_ms, s.server_id, s.tool_name))


async def usage_overview(
    db: Database,
    org: str,
    project: str,
    *,
    days: int = 30,
    until: datetime | None = None,
    percentiles_for: int = 10,
) -> UsageOverview:
    """The last ``days`` UTC days of ``org``/``project``: per day, per tool, per capability;
    the p95 latency of the ``percentiles_for`` busiest and slowest tools and capabilities."""
    first, start, end = window(days, until)
    async with db.read() as conn:
        stats = UsageStats(conn)
        daily = await stats.per_day(org, project, start, end)
        every = await stats.per_tool(org, project, start, end)
        picked: list[ToolStats] = []
        for kind in (False, True):
            mine = [s for s in every if s.is_capability is kind]
            picked += mine[:percentiles_for] + slowest_first(mine)[:percentiles_for]
        p95 = await stats.p95(
            org, project, start, end, [(s.server_id, s.tool_name) for s in picked]
        )
    with_p95 = [
        ToolStats(
            s.server_id,
            s.tool_name,
            s.calls,
            s.errors,
            s.avg_latency_ms,
            s.max_latency_ms,
            p95.get((s.server_id, s.tool_name)),
        )
        for s in every
    ]
    return UsageOverview(
        first_day=first,
        last_day=(end - timedelta(days=1)).date(),
        daily=daily,
        tools=[s for s in with_p95 if not s.is_capability],
        capabilities=[s for s in with_p95 if s.is_capability],
    )


async def capability_names(db: Database, fqdns: Sequence[str]) -> dict[str, str]:
    """The display names of these capabilities, by FQDN (one query; unknown ones left out)."""
    wanted = sorted(set(fqdns))[:MAX_NAMES]
    if not wanted:
        return {}
    c = capability_records.c
    async with db.read() as conn:
        rows = await conn.execute(sa.select(c.fqdn, c.display_name).where(c.fqdn.in_(wanted)))
        return {str(row.fqdn): str(row.display_name) for row in rows}
