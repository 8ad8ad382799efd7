"""The usage page's figures, from ``tool_usage_daily`` (``tool_usage`` rolled up per UTC day
and tool as calls are recorded) over a bounded window of days.

    async with db.read() as conn:
        stats = UsageStats(conn)
        days = await stats.per_day("acme", "webapp", start, end)      # tools, capabilities
        tools = await stats.per_tool("acme", "webapp", start, end)    # busiest first
    overview = await usage_overview(db, "acme", "webapp", days=30)   # all of it, one connection

The page reads at most (days × tools) roll-up rows, whatever the number of calls. Rows of
``server_id = CAPABILITY_SERVER_ID`` are capability runs (their FQDN is the tool name); the
tool calls a capability makes are rows of their own servers, so the two kinds are counted
apart, never added up. The 95th percentile is read from latency buckets: the upper bound
of the bucket holding the nearest-rank 95 % call, capped by the highest latency seen
("95 % of the calls took at most this").
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
from pml.storage.tables import (
    LATENCY_BOUNDS_MS,
    LATENCY_BUCKETS,
    capability_records,
    tool_usage_daily,
)
from pml.storage.usage_repo import CAPABILITY_SERVER_ID

MAX_TOOLS: Final = 500  # groups read per page (a catalog and its capabilities, with room)
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


def _errors() -> sa.ColumnElement[int]:
    return sa.func.sum(tool_usage_daily.c.errors)


def p95_bound(buckets: Sequence[int], max_latency_ms: float) -> float | None:
    """The 95th percentile as its latency bucket's upper bound (never above the highest
    latency seen): "95 % of the calls took at most this"."""
    total = sum(buckets)
    if total <= 0:
        return None
    needed = -(-total * 95 // 100)  # ceil(0.95 * total): the nearest-rank position
    seen = 0
    for bound, count in zip((*LATENCY_BOUNDS_MS, max_latency_ms), buckets, strict=True):
        seen += count
        if seen >= needed:
            return min(float(bound), max_latency_ms)
    return max_latency_ms


class UsageStats:
    """Aggregates over ``tool_usage_daily`` for one org/project and ``[start, end)``."""

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn

    def _window(self, org: str, project: str, start: datetime, end: datetime) -> sa.Select[Any]:
        d = tool_usage_daily.c
        first, last = start.date().isoformat(), (end - timedelta(microseconds=1)).date()
        return sa.select().where(
            d.org == org, d.project == project, d.day >= first, d.day <= last.isoformat()
        )

    async def per_day(self, org: str, project: str, start: datetime, end: datetime) -> DailyUsage:
        """Calls per UTC day (tool calls and capability runs apart), every day present."""
        d = tool_usage_daily.c
        kind = sa.case((d.server_id == CAPABILITY_SERVER_ID, 1), else_=0).label("capability")
        query = (
            self._window(org, project, start, end)
            .add_columns(
                kind,
                d.day,
                sa.func.sum(d.calls).label("calls"),
                _errors().label("errors"),
                sa.func.sum(d.latency_sum_ms).label("latency_sum_ms"),
            )
            .group_by(kind, d.day)
        )
        found: tuple[dict[date, DayCount], dict[date, DayCount]] = ({}, {})
        for row in await self.conn.execute(query):
            when = date.fromisoformat(str(row.day)[:10])
            calls = int(row.calls or 0)
            mean = float(row.latency_sum_ms or 0.0) / calls if calls else 0.0
            found[int(row.capability)][when] = DayCount(when, calls, int(row.errors or 0), mean)
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
        """Calls, errors, mean, highest and p95 (bucketed) latency per tool and capability,
        busiest first."""
        d = tool_usage_daily.c
        calls = sa.func.sum(d.calls).label("calls")
        query = (
            self._window(org, project, start, end)
            .add_columns(
                d.server_id,
                d.tool_name,
                calls,
                _errors().label("errors"),
                sa.func.sum(d.latency_sum_ms).label("latency_sum_ms"),
                sa.func.max(d.latency_max_ms).label("max_latency_ms"),
                *(sa.func.sum(d[name]).label(name) for name in LATENCY_BUCKETS),
            )
            .group_by(d.server_id, d.tool_name)
            .order_by(calls.desc(), d.server_id, d.tool_name)
            .limit(max(1, min(limit, MAX_TOOLS)))
        )
        found: list[ToolStats] = []
        for row in await self.conn.execute(query):
            count = int(row.calls or 0)
            highest = float(row.max_latency_ms or 0.0)
            buckets = [int(row._mapping[name] or 0) for name in LATENCY_BUCKETS]  # pyright: ignore[reportPrivateUsage]
            found.append(
                ToolStats(
                    server_id=str(row.server_id),
                    tool_name=str(row.tool_name),
                    calls=count,
                    errors=int(row.errors or 0),
                    avg_latency_ms=float(row.latency_sum_ms or 0.0) / count if count else 0.0,
                    max_latency_ms=highest,
                    p95_latency_ms=p95_bound(buckets, highest),
                )
            )
        return found


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
) -> UsageOverview:
    """The last ``days`` UTC days of ``org``/``project``: per day, per tool, per capability."""
    first, start, end = window(days, until)
    async with db.read() as conn:
        stats = UsageStats(conn)
        daily = await stats.per_day(org, project, start, end)
        every = await stats.per_tool(org, project, start, end)
    return UsageOverview(
        first_day=first,
        last_day=(end - timedelta(days=1)).date(),
        daily=daily,
        tools=[s for s in every if not s.is_capability],
        capabilities=[s for s in every if s.is_capability],
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
