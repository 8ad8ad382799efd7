"""SQL over ``tool_usage``: one row per tool call, whatever path made it (SPEC §6.4).

    async with db.transaction() as conn:
        await SqlToolUsageRepository(conn).insert_many([ToolUsageRow(...), ...])
    async with db.read() as conn:
        rows = await SqlToolUsageRepository(conn).summary("acme", "web", limit=10)

Capabilities are recorded with ``server_id = "pml-capabilities"`` and their FQDN as the tool
(an FQDN never changes, so a renamed capability keeps its history).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from pml.storage.tables import LATENCY_BOUNDS_MS, LATENCY_BUCKETS, tool_usage, tool_usage_daily

CAPABILITY_SERVER_ID: Final = "pml-capabilities"
ADDED: Final = ("calls", "errors", "latency_sum_ms", *LATENCY_BUCKETS)
ROLL_UP_CHUNK: Final = 1000  # rows of 23 values per statement


def latency_bucket(latency_ms: float) -> str:
    """The ``tool_usage_daily`` column that counts a call of this latency."""
    for bound, name in zip(LATENCY_BOUNDS_MS, LATENCY_BUCKETS, strict=False):
        if latency_ms <= bound:
            return name
    return LATENCY_BUCKETS[-1]


@dataclass(frozen=True, slots=True)
class ToolUsageRow:
    """One tool call: which server and tool, how long, whether it worked, for whom, when."""

    server_id: str
    tool_name: str
    latency_ms: float
    success: bool
    org: str
    project: str
    user_id: str | None
    called_at: datetime


@dataclass(frozen=True, slots=True)
class ToolUsageSummary:
    """Calls of one tool: how many, how many worked, mean latency, the last one."""

    server_id: str
    tool_name: str
    calls: int
    successes: int
    avg_latency_ms: float
    last_called_at: datetime | None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["avg_latency_ms"] = round(self.avg_latency_ms, 3)
        data["last_called_at"] = self.last_called_at.isoformat() if self.last_called_at else None
        return data


class SqlToolUsageRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn

    async def insert_many(self, rows: list[ToolUsageRow]) -> None:
        """One statement for a batch of calls, and one upsert of their per-day roll-up
        (``tool_usage_daily``) in the same transaction."""
        if not rows:
            return
        await self.conn.execute(sa.insert(tool_usage), [asdict(row) for row in rows])
        await self._roll_up(rows)

    async def _roll_up(self, rows: list[ToolUsageRow]) -> None:
        days: dict[tuple[str, str, str, str, str], dict[str, Any]] = {}
        for row in rows:
            day = row.called_at.astimezone(UTC).date().isoformat()
            key = (row.org, row.project, day, row.server_id, row.tool_name)
            found = days.get(key)
            if found is None:
                found = days[key] = dict.fromkeys(("calls", "errors", *LATENCY_BUCKETS), 0) | {
                    "latency_sum_ms": 0.0,
                    "latency_max_ms": 0.0,
                }
            found["calls"] += 1
            found["errors"] += 0 if row.success else 1
            found["latency_sum_ms"] += row.latency_ms
            found["latency_max_ms"] = max(found["latency_max_ms"], row.latency_ms)
            found[latency_bucket(row.latency_ms)] += 1
        # Keys in a fixed order, so that concurrent batches never deadlock on PostgreSQL;
        # chunks stay under its 32 767 parameters per statement.
        keys = ("org", "project", "day", "server_id", "tool_name")
        values = [dict(zip(keys, key, strict=True)) | sums for key, sums in sorted(days.items())]
        for start in range(0, len(values), ROLL_UP_CHUNK):
            await self.conn.execute(self._upsert(values[start : start + ROLL_UP_CHUNK]))

    def _upsert(self, values: list[dict[str, Any]]) -> Any:
        postgres = self.conn.dialect.name == "postgresql"
        insert: Any = (
            postgresql_insert(tool_usage_daily) if postgres else sqlite_insert(tool_usage_daily)
        )
        table = tool_usage_daily.c
        highest = sa.func.greatest if postgres else sa.func.max
        return insert.values(values).on_conflict_do_update(
            index_elements=["org", "project", "day", "server_id", "tool_name"],
            set_={
                **{name: table[name] + insert.excluded[name] for name in ADDED},
                "latency_max_ms": highest(table.latency_max_ms, insert.excluded.latency_max_ms),
            },
        )

    async def summary(
        self,
        org: str,
        project: str,
        *,
        server_id: str | None = None,
        tool_name: str | None = None,
        limit: int = 20,
    ) -> list[ToolUsageSummary]:
        """Per-tool totals for one org/project, most called first."""
        t = tool_usage.c
        where = [t.org == org, t.project == project]
        if server_id is not None:
            where.append(t.server_id == server_id)
        if tool_name is not None:
            where.append(t.tool_name == tool_name)
        calls = sa.func.count().label("calls")
        query = (
            sa.select(
                t.server_id,
                t.tool_name,
                calls,
                sa.func.sum(sa.case((t.success.is_(True), 1), else_=0)).label("successes"),
                sa.func.avg(t.latency_ms).label("avg_latency_ms"),
                sa.func.max(t.called_at).label("last_called_at"),
            )
            .where(*where)
            .group_by(t.server_id, t.tool_name)
            .order_by(calls.desc(), t.server_id, t.tool_name)
            .limit(limit)
        )
        return [
            ToolUsageSummary(
                server_id=str(row.server_id),
                tool_name=str(row.tool_name),
                calls=int(row.calls),
                successes=int(row.successes or 0),
                avg_latency_ms=float(row.avg_latency_ms or 0.0),
                last_called_at=_as_datetime(row.last_called_at),
            )
            for row in await self.conn.execute(query)
        ]

    async def count(self, **equal: Any) -> int:
        """How many rows match ``column=value`` filters (tests, status)."""
        query = sa.select(sa.func.count()).select_from(tool_usage)
        for column, value in equal.items():
            query = query.where(tool_usage.c[column] == value)
        return int((await self.conn.execute(query)).scalar_one())


def _as_datetime(value: object) -> datetime | None:
    # max() keeps the column's type, so both backends give an aware datetime; be lenient.
    if value is None:
        return None
    parsed = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
