"""SQL over ``execution_traces``: one row per snippet run (what ran, not its values).

async with db.transaction() as conn:
    await SqlTraceRepository(conn).insert(TraceRow(...))
    rows = await SqlTraceRepository(conn).for_capability("acme.web.fs.read.ab12")
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pml.policy.scrub import redact_secrets
from pml.storage.tables import execution_traces


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One run: each tool call in ``task_results`` (tool, args digest, duration, success)."""

    id: str
    org: str
    project: str
    user_id: str | None
    intent: str | None
    capability_fqdn: str | None
    success: bool
    error: str | None
    duration_ms: float
    task_results: list[dict[str, Any]]
    created_at: datetime
    workflow_id: str | None = None
    parent_id: str | None = None


_FIELDS = tuple(field.name for field in fields(TraceRow))


def _values(row: TraceRow) -> dict[str, Any]:
    """The row's columns (not ``asdict``: its deep copy of task results costs ~0.1 ms), its
    intent scrubbed as the audit scrubs (an agent may have typed a secret into it)."""
    values = {name: getattr(row, name) for name in _FIELDS}
    if isinstance(row.intent, str) and row.intent:
        values["intent"] = redact_secrets(row.intent)
    return values


class SqlTraceRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn

    async def insert(self, row: TraceRow) -> None:
        await self.insert_many([row])

    async def insert_many(self, rows: list[TraceRow]) -> None:
        """One statement for a batch of runs."""
        if rows:
            await self.conn.execute(sa.insert(execution_traces), [_values(row) for row in rows])

    async def for_capability(self, fqdn: str) -> list[sa.RowMapping]:
        """The runs recorded for a capability, oldest first."""
        query = (
            sa.select(execution_traces)
            .where(execution_traces.c.capability_fqdn == fqdn)
            .order_by(execution_traces.c.created_at)
        )
        return list((await self.conn.execute(query)).mappings())

    async def count(self) -> int:
        query = sa.select(sa.func.count()).select_from(execution_traces)
        return int((await self.conn.execute(query)).scalar_one())
