"""SQL over ``audit_events``: the stored half of the audit log (SPEC §10.6).

    repo = AuditRepository(db)
    await repo.insert_many([AuditEntry(ts=..., event="POLICY_DENIED", org="acme", ...)])
    rows = await repo.tail(org="acme", project="webapp", after_id=None, limit=50, events=None)
    mine = await repo.tail(org="acme", project="webapp", after_id=None, limit=50, actor="erwan")
    rows[-1].to_dict()   # {"id", "ts", "event", "actor", "scope", "org", "project", ...}
    page = await repo.search(org="acme", project="webapp", limit=50,
                             where=AuditQuery(events=("POLICY_DENIED",), tool="fs:write_file"))
    older = await repo.search(org="acme", project="webapp", limit=50, before_id=page[0].id)

Entries are written already scrubbed (``pml.policy.audit``); this module only stores and
reads them. Text longer than its column is cut to fit, so that one odd event can never make
a whole batch fail on PostgreSQL (SQLite would have stored it whole). What an event is
about is copied out of its details into indexed columns when it is written: ``tool`` (the
``server:tool``) and ``capability`` (a capability's FQDN), so that the dashboard's filters
walk an index of (org, project, column, id) instead of the JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pml.errors import InvalidInput
from pml.registry.fqdn import is_fqdn
from pml.storage.database import Database
from pml.storage.tables import audit_events


def _length(column: str) -> int:
    kind = audit_events.c[column].type
    return kind.length if isinstance(kind, sa.String) and kind.length else 64


TEXT_LIMITS = {
    column: _length(column)
    for column in ("event", "actor", "request_id", "decided_by", "tool", "capability")
}
# Where an event names its capability; ``capability`` also holds permission capabilities
# (``file_read``), so only an FQDN there counts.
CAPABILITY_KEYS = ("fqdn", "capabilityFqdn")
# A walk expects to fill a page from this many events in range (else it may read on to the
# end of the log)
SMALL_RANGE = 2000


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
    tool: str | None = None  # what the event is about, as stored for the filters
    capability: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """``{"id", "ts" (ISO 8601, UTC), "event", "actor", "scope", "org", "project",
        "request_id", "details", "decided_by"}`` (``tool`` and ``capability`` are in
        ``details`` already)."""
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


def _text_of(details: Mapping[str, Any], key: str) -> str | None:
    value = details.get(key)
    return value if isinstance(value, str) and value else None


def capability_of(details: Mapping[str, Any]) -> str | None:
    """The FQDN of the capability an event is about, from its details (or None)."""
    for key in CAPABILITY_KEYS:
        found = _text_of(details, key)
        if found is not None:
            return found
    named = _text_of(details, "capability")
    return named if named is not None and is_fqdn(named) else None


@dataclass(frozen=True, slots=True)
class AuditQuery:
    """Which events to find: every field given must match (exactly); ``since`` is
    inclusive and ``until`` exclusive."""

    events: tuple[str, ...] = ()
    actor: str | None = None
    tool: str | None = None
    capability: str | None = None
    decided_by: str | None = None
    request_id: str | None = None
    since: datetime | None = None
    until: datetime | None = None


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
                "tool": _fit("tool", _text_of(row.details, "tool")),
                "capability": _fit("capability", capability_of(row.details)),
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

    async def search(
        self,
        *,
        org: str,
        project: str,
        limit: int,
        where: AuditQuery | None = None,
        before_id: int | None = None,
        after_id: int | None = None,
    ) -> list[AuditRow]:
        """The events of one org/project that match ``where``, oldest first (as ``tail``).

        Without a cursor: the newest ``limit``. With ``before_id``: the newest ``limit``
        older than that id (the page before). With ``after_id``: the first ``limit`` newer
        than it (the page after, or what a live view has not shown yet). Ids order the
        log, so paging either way never skips nor repeats an event.
        """
        if limit < 1:
            raise InvalidInput(f"Invalid limit: {limit}. Use a positive number.", field="limit")
        for name, cursor in (("before_id", before_id), ("after_id", after_id)):
            if cursor is not None and cursor < 0:
                raise InvalidInput(f"Invalid {name}: {cursor}. Use 0 or more.", field=name)
        if before_id is not None and after_id is not None:
            raise InvalidInput("Give before_id or after_id, not both.", field="before_id")
        where = where or AuditQuery()
        async with self.db.read() as conn:
            by_time = await _by_time(conn, org, project, where, before_id, after_id)
            query = _search_query(org, project, where, limit, before_id, after_id, by_time)
            rows = [_row(row._mapping) for row in await conn.execute(query)]  # pyright: ignore[reportPrivateUsage]
        return rows if after_id is not None else rows[::-1]


async def _by_time(
    conn: AsyncConnection,
    org: str,
    project: str,
    where: AuditQuery,
    before_id: int | None,
    after_id: int | None,
) -> bool:
    """Whether the (org, project, ts) index should find a time range's events (then sorted
    by id) rather than a walk in id order that skips what is out of range.

    Neither database knows that ids and times grow together, so neither can tell which is
    cheaper; we can: the id of the first event at a time, found in the ts index, says how
    many events lie between the walk's start and the range (read in vain) and how many the
    range holds (read and sorted). Only the choice relies on it: both ways are exact.
    """
    if (where.since is None and where.until is None) or where.request_id is not None:
        return False
    a = audit_events.c
    scoped = (a.org == org, a.project == project)

    def first_at(moment: datetime) -> sa.ScalarSelect[Any]:
        return (
            sa.select(a.id).where(*scoped, a.ts >= moment).order_by(a.ts).limit(1).scalar_subquery()
        )

    probes = [
        sa.select(sa.func.min(a.id)).where(*scoped).scalar_subquery(),
        sa.select(sa.func.max(a.id)).where(*scoped).scalar_subquery(),
        first_at(where.since) if where.since is not None else sa.null(),
        first_at(where.until) if where.until is not None else sa.null(),
    ]
    found: tuple[int | None, ...] = tuple((await conn.execute(sa.select(*probes))).one())
    low, high, since_id, until_id = found
    if low is None or high is None:
        return False
    past = high + 1  # an id after every event so far
    first = past if since_id is None else since_id
    start = low if where.since is None else first
    end = past if until_id is None else until_id
    read_by_time = end - start  # the ts index reads the whole range, whatever the cursor
    if after_id is not None:  # a walk up from after_id: below the range, then in it
        wasted = max(0, start - after_id - 1)
        ahead = max(0, end - max(start, after_id + 1))
        rest = past - after_id
    else:  # a walk down from before_id (or the newest): above the range, then in it
        top = past if before_id is None else min(past, before_id)
        wasted = max(0, top - end)
        ahead = max(0, min(end, top) - start)
        rest = top - low
    # Finding too few events in range, a walk goes on to the end of the log.
    read_by_walk = wasted if ahead > SMALL_RANGE else rest
    return read_by_time < read_by_walk


def _search_query(
    org: str,
    project: str,
    where: AuditQuery,
    limit: int,
    before_id: int | None,
    after_id: int | None,
    by_time: bool,
) -> sa.Select[Any]:
    """The search as SQL shaped for the indexes.

    Several event names: one walk per name on (org, project, event, id), each stopping
    after ``limit`` rows, merged (``event IN (...)`` would read every row of those events
    and sort them). A request id: its few rows through the request_id index. A time range:
    through the ts index when ``by_time``, else the time is tested on each row of the walk
    (written so that no index can serve it, which keeps the planner on the walk).
    """
    a = audit_events.c
    forward = after_id is not None
    # by_time: neither the cursor nor the order may draw the planner to an id index
    key: sa.ColumnElement[Any] = a.id + 0 if by_time else a.id
    cursor: list[sa.ColumnElement[bool]] = []
    if before_id is not None:
        cursor.append(key < before_id)
    if after_id is not None:
        cursor.append(key > after_id)
    common: list[sa.ColumnElement[bool]] = [a.org == org, a.project == project]
    for column, value in (
        ("actor", where.actor),
        ("tool", where.tool),
        ("capability", where.capability),
        ("decided_by", where.decided_by),
    ):
        if value is not None:
            common.append(a[column] == value)
    moment = a.ts if by_time else sa.func.coalesce(a.ts, a.ts)
    if where.since is not None:
        common.append(moment >= where.since)
    if where.until is not None:
        common.append(moment < where.until)
    if where.request_id is not None:
        inner = sa.select(a.id).where(a.request_id == where.request_id, *cursor)
        common.append(a.id.in_(inner))
    else:
        common.extend(cursor)

    def walk(event: str | None) -> sa.Select[Any]:
        query = sa.select(audit_events).where(*common)
        if event is not None:
            query = query.where(a.event == event)
        return query.order_by(key if forward else key.desc()).limit(limit)

    events = sorted(set(where.events))
    if len(events) < 2:
        return walk(events[0] if events else None)
    merged = sa.union_all(*(sa.select(walk(event).subquery()) for event in events)).subquery()
    return sa.select(merged).order_by(merged.c.id if forward else merged.c.id.desc()).limit(limit)


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
        tool=row["tool"],
        capability=row["capability"],
    )
