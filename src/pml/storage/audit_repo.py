"""SQL over ``audit_events``: the stored half of the audit log (SPEC §10.6).

    repo = AuditRepository(db)
    await repo.insert_many([AuditEntry(ts=..., event="POLICY_DENIED", org="acme", ...)])
    rows = await repo.tail(org="acme", project="webapp", after_id=None, limit=50, events=None)
    mine = await repo.tail(org="acme", project="webapp", after_id=None, limit=50, actor="erwan")
    rows[-1].to_dict()   # {"id", "ts", "event", "actor", "scope", "org", "project", ...}

Entries are written already scrubbed (``pml.policy.audit``); this module only stores and
reads them. Text longer than its column is cut to fit, so that one odd event can never make
a whole batch fail on PostgreSQL (SQLite would have stored it whole).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import sqlalchemy as sa

from pml.errors import InvalidInput
from pml.storage.database import Database
from pml.storage.tables import audit_events


def _length(column: str) -> int:
    kind = audit_events.c[column].type
    return kind.length if isinstance(kind, sa.String) and kind.length else 64


TEXT_LIMITS = {column: _length(column) for column in ("event", "actor", "request_id", "decided_by")}


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One audit event to store: when, what, who, for which scope, and why."""

    ts: datetime
    event: str
    org: str
    project: str
    details: dict[str, Any]
    actor: str | None = None
    request_id: str | None = None
    decided_by: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The event as written to the JSON-lines file (``scope`` is ``org.project``)."""
        return _event_dict(self.ts, self.event, self.org, self.project, self)


@dataclass(frozen=True, slots=True)
class AuditRow:
    """One stored audit event, with the id that orders the log."""

    id: int
    ts: datetime
    event: str
    org: str
    project: str
    details: dict[str, Any]
    actor: str | None
    request_id: str | None
    decided_by: str | None

    def to_dict(self) -> dict[str, Any]:
        """``{"id", "ts" (ISO 8601, UTC), "event", "actor", "scope", "org", "project",
        "request_id", "details", "decided_by"}``."""
        return {"id": self.id, **_event_dict(self.ts, self.event, self.org, self.project, self)}


def _event_dict(
    ts: datetime, event: str, org: str, project: str, rest: AuditEntry | AuditRow
) -> dict[str, Any]:
    return {
        "ts": ts.astimezone(UTC).isoformat(),
        "event": event,
        "actor": rest.actor,
        "scope": f"{org}.{project}",
        "org": org,
        "project": project,
        "request_id": rest.request_id,
        "details": rest.details,
        "decided_by": rest.decided_by,
    }


def _fit(column: str, value: str | None) -> str | None:
    return None if value is None else value[: TEXT_LIMITS[column]]


class AuditRepository:
    """Appends to and reads ``audit_events`` (SQLite or PostgreSQL)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def insert_many(self, rows: Sequence[AuditEntry]) -> None:
        """Store a batch in one transaction: all of it or, on error, none of it."""
        if not rows:
            return
        values = [
            {
                "ts": row.ts,
                "event": _fit("event", row.event),
                "actor": _fit("actor", row.actor),
                "org": row.org,
                "project": row.project,
                "request_id": _fit("request_id", row.request_id),
                "details": row.details,
                "decided_by": _fit("decided_by", row.decided_by),
            }
            for row in rows
        ]
        async with self.db.transaction() as conn:
            await conn.execute(sa.insert(audit_events), values)

    async def tail(
        self,
        *,
        org: str | None,
        project: str | None,
        after_id: int | None,
        limit: int,
        events: Sequence[str] | None = None,
        actor: str | None = None,
    ) -> list[AuditRow]:
        """Events in id order (newest last), optionally of one org/project, event names and
        actor (the user an event was recorded for; events without one never match).

        Without ``after_id``: the newest ``limit`` events. With it: the first ``limit``
        events after that id, so that paging and following never skip an event.
        """
        if limit < 1:
            raise InvalidInput(f"Invalid limit: {limit}. Use a positive number.", field="limit")
        if after_id is not None and after_id < 0:
            raise InvalidInput(f"Invalid after_id: {after_id}. Use 0 or more.", field="after_id")
        a = audit_events.c
        query = sa.select(audit_events)
        if org is not None:
            query = query.where(a.org == org)
        if project is not None:
            query = query.where(a.project == project)
        if events:
            query = query.where(a.event.in_(sorted(set(events))))
        if actor is not None:
            query = query.where(a.actor == actor)
        if after_id is not None:
            query = query.where(a.id > after_id).order_by(a.id).limit(limit)
        else:
            query = query.order_by(a.id.desc()).limit(limit)
        async with self.db.read() as conn:
            rows = [_row(row._mapping) for row in await conn.execute(query)]  # pyright: ignore[reportPrivateUsage]
        return rows if after_id is not None else rows[::-1]


def _row(row: sa.RowMapping) -> AuditRow:
    stored: object = row["details"]
    details: dict[str, Any] = (
        cast("dict[str, Any]", stored) if isinstance(stored, dict) else {"value": stored}
    )
    return AuditRow(
        id=int(row["id"]),
        ts=row["ts"],
        event=str(row["event"]),
        org=str(row["org"]),
        project=str(row["project"]),
        details=details,
        actor=row["actor"],
        request_id=row["request_id"],
        decided_by=row["decided_by"],
    )
