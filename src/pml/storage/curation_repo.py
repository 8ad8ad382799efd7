"""SQL for capability curation: stored runs (``curation_runs``) and the reads a run needs.

    async with db.transaction() as conn:
        run_id = await SqlCurationRepository(conn).insert_run(NewCurationRun(...))
    async with db.read() as conn:
        repo = SqlCurationRepository(conn)
        latest = await repo.latest_run("acme", "web")            # CurationRun | None
        records, total = await repo.candidates(scope, unnamed_only=True, min_usage=3, limit=200)
        names, tool_names = await repo.names_in_use("acme", "web")

Only queries: the rules (what a run considers, when an automatic run starts) live in
``pml.curation``. Database errors become ``StorageError`` in ``Database.read/transaction``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pml.registry.models import CapabilityRecord
from pml.registry.scope import Scope
from pml.storage.capability_queries import ACTIVE, RECORD_FIELDS
from pml.storage.tables import capability_aliases as aliases
from pml.storage.tables import capability_records as records
from pml.storage.tables import curation_runs as runs


@dataclass(frozen=True, slots=True)
class NewCurationRun:
    """A run to store: who, how it started, what it suggested and applied."""

    org: str
    project: str
    trigger: str
    mode: str
    suggestions: list[dict[str, Any]]
    applied: list[dict[str, Any]]
    created_at: datetime


@dataclass(frozen=True, slots=True)
class CurationRun:
    """One stored run (``suggestions`` and ``applied`` as the run returned them)."""

    id: int
    org: str
    project: str
    trigger: str
    mode: str
    suggestions: list[dict[str, Any]]
    applied: list[dict[str, Any]]
    created_at: datetime

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (``created_at`` in ISO 8601)."""
        data = asdict(self)
        data["created_at"] = self.created_at.isoformat()
        return data


class SqlCurationRepository:
    """Queries for curation on one connection (SQLite or PostgreSQL)."""

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn

    async def insert_run(self, run: NewCurationRun) -> int:
        """Store one run; its id."""
        result = await self.conn.execute(runs.insert().values(asdict(run)).returning(runs.c.id))
        return int(result.scalar_one())

    async def latest_run(self, org: str, project: str) -> CurationRun | None:
        """The newest run of an org/project."""
        found = await self.recent_runs(org, project, limit=1)
        return found[0] if found else None

    async def recent_runs(self, org: str, project: str, *, limit: int = 10) -> list[CurationRun]:
        """The newest runs of an org/project, newest first."""
        c = runs.c
        query = (
            sa.select(runs)
            .where(c.org == org, c.project == project)
            .order_by(c.created_at.desc(), c.id.desc())
            .limit(limit)
        )
        return [_run(row._mapping) for row in await self.conn.execute(query)]  # pyright: ignore[reportPrivateUsage]

    async def last_run_at(self, org: str, project: str, modes: tuple[str, ...]) -> datetime | None:
        """When the newest run of these modes started (None before the first)."""
        c = runs.c
        query = (
            sa.select(c.created_at)
            .where(c.org == org, c.project == project, c.mode.in_(modes))
            .order_by(c.created_at.desc())
            .limit(1)
        )
        return (await self.conn.execute(query)).scalars().first()

    async def count_unnamed_since(self, org: str, project: str, since: datetime | None) -> int:
        """How many unnamed capabilities of an org/project were created after ``since``."""
        r = records.c
        where = [
            ACTIVE,
            r.org == org,
            r.project == project,
            r.record_type == "capability",
            r.named.is_(False),
        ]
        if since is not None:
            where.append(r.created_at > since)
        query = sa.select(sa.func.count()).select_from(records).where(*where)
        return int((await self.conn.execute(query)).scalar_one())

    async def candidates(
        self, scope: Scope, *, unnamed_only: bool, min_usage: int, limit: int
    ) -> tuple[list[CapabilityRecord], int]:
        """The capabilities of the scope's own org/project it may see and rename, most used
        first (at most ``limit``), and how many match in all."""
        r = records.c
        where = [
            ACTIVE,
            r.org == scope.org,
            r.project == scope.project,
            sa.or_(r.visibility != "private", r.created_by == scope.user),
            r.record_type == "capability",
            r.usage_count >= min_usage,
        ]
        if unnamed_only:
            where.append(r.named.is_(False))
        total_query = sa.select(sa.func.count()).select_from(records).where(*where)
        total = int((await self.conn.execute(total_query)).scalar_one())
        page = (
            sa.select(records)
            .where(*where)
            .order_by(r.usage_count.desc(), r.created_at.asc(), r.fqdn.asc())
            .limit(limit)
        )
        items = [_record(row._mapping) for row in await self.conn.execute(page)]  # pyright: ignore[reportPrivateUsage]
        return items, total

    async def names_in_use(self, org: str, project: str) -> tuple[dict[str, str], dict[str, str]]:
        """Display names and aliases → FQDN, and tool names (current and aliased) → FQDN."""
        r, a = records.c, aliases.c
        names: dict[str, str] = {}
        tool_names: dict[str, str] = {}
        for row in await self.conn.execute(
            sa.select(r.display_name, r.tool_name, r.fqdn).where(
                ACTIVE, r.org == org, r.project == project
            )
        ):
            names[str(row.display_name)] = str(row.fqdn)
            tool_names[str(row.tool_name)] = str(row.fqdn)
        for row in await self.conn.execute(
            sa.select(a.alias, a.tool_name, a.target_fqdn).where(a.org == org, a.project == project)
        ):
            names.setdefault(str(row.alias), str(row.target_fqdn))
            tool_names.setdefault(str(row.tool_name), str(row.target_fqdn))
        return names, tool_names

    async def fqdn_of_id(self, org: str, project: str, record_id: str) -> str | None:
        """The FQDN of the record of this org/project whose ``id`` (UUID) is ``record_id``."""
        r = records.c
        query = sa.select(r.fqdn).where(
            ACTIVE, r.org == org, r.project == project, r.id == record_id
        )
        return (await self.conn.execute(query)).scalars().first()


def _record(data: sa.RowMapping) -> CapabilityRecord:
    return CapabilityRecord(**{name: data[name] for name in RECORD_FIELDS})


def _run(data: sa.RowMapping) -> CurationRun:
    return CurationRun(
        id=int(data["id"]),
        org=str(data["org"]),
        project=str(data["project"]),
        trigger=str(data["trigger"]),
        mode=str(data["mode"]),
        suggestions=_dict_list(data["suggestions"]),
        applied=_dict_list(data["applied"]),
        created_at=data["created_at"],
    )


def _dict_list(value: object) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        return []
    return [
        cast(dict[str, Any], item) for item in cast(list[object], value) if isinstance(item, dict)
    ]
