"""SQL queries over ``permission_grants``; the rules (validation, choice, audit) live in
``pml.policy.grants``.

Rows come back as read-only mappings with the table's column names::

    async with db.transaction() as conn:
        repo = SqlGrantRepository(conn)
        await repo.insert({"id": ..., "principal": "erwan", "org": "acme", ...})
        won = await repo.consume(grant_id, now)   # atomic: one winner per remaining use
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pml.errors import NotFound
from pml.storage.tables import permission_grants

Row = sa.RowMapping

g = permission_grants.c
# Revoked grants stay listable (``pml perms list --all``) this long before a purge.
REVOKED_RETENTION = timedelta(days=1)
# The most grants one principal's check considers (newest first); more is a runaway issuer.
MAX_CANDIDATES = 1000


def _live(now: datetime) -> list[sa.ColumnElement[bool]]:
    """Not revoked, not expired, not used up at ``now``."""
    return [
        g.revoked.is_(False),
        sa.or_(g.expires_at.is_(None), g.expires_at > now),
        sa.or_(g.max_uses.is_(None), g.uses < g.max_uses),
    ]


def _rows(result: sa.CursorResult[Any]) -> list[Row]:
    return [row._mapping for row in result]  # pyright: ignore[reportPrivateUsage]


class SqlGrantRepository:
    """Queries over ``permission_grants`` on one connection (SQLite or PostgreSQL)."""

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn

    async def insert(self, values: Mapping[str, Any]) -> None:
        """Store one new grant (every column but ``revoked_at``)."""
        await self.conn.execute(permission_grants.insert().values(**values))

    async def get(self, grant_id: str) -> Row | None:
        """The grant with this id, whatever its state."""
        row = (
            await self.conn.execute(sa.select(permission_grants).where(g.id == grant_id))
        ).first()
        return row._mapping if row is not None else None  # pyright: ignore[reportPrivateUsage]

    async def list(
        self,
        org: str,
        project: str,
        *,
        principal: str | None = None,
        active_only: bool = True,
        now: datetime,
    ) -> list[Row]:
        """Grants of one org/project (and principal), oldest first; live ones unless told."""
        where: list[sa.ColumnElement[bool]] = [g.org == org, g.project == project]
        if principal is not None:
            where.append(g.principal == principal)
        if active_only:
            where.extend(_live(now))
        query = sa.select(permission_grants).where(*where).order_by(g.issued_at, g.id)
        return _rows(await self.conn.execute(query))

    async def candidates(
        self, org: str, project: str, principal: str, capability: str, now: datetime
    ) -> list[Row]:
        """The live grants of a principal for one capability, newest first (indexed)."""
        query = (
            sa.select(permission_grants)
            .where(
                g.org == org,
                g.project == project,
                g.principal == principal,
                g.capability == capability,
                *_live(now),
            )
            .order_by(g.issued_at.desc(), g.id)
            .limit(MAX_CANDIDATES)
        )
        return _rows(await self.conn.execute(query))

    async def consume(self, grant_id: str, now: datetime) -> bool:
        """Spend one use of a live grant; False when it is revoked, expired or used up.

        One conditional ``UPDATE``: of two concurrent consumers of a last use, exactly one
        changes the row (PostgreSQL re-checks the condition on the locked row; SQLite
        writers are serialised).
        """
        result = await self.conn.execute(
            permission_grants.update().where(g.id == grant_id, *_live(now)).values(uses=g.uses + 1)
        )
        return bool(result.rowcount)

    async def revoke(self, grant_id: str, org: str, project: str, at: datetime) -> Row:
        """Revoke a grant of this org/project (again: keeps the first time); else NOT_FOUND."""
        mine = (g.id == grant_id, g.org == org, g.project == project)
        await self.conn.execute(
            permission_grants.update()
            .where(*mine, g.revoked.is_(False))
            .values(revoked=True, revoked_at=at)
        )
        row = (await self.conn.execute(sa.select(permission_grants).where(*mine))).first()
        if row is None:
            raise NotFound(f"Grant not found: {grant_id}")
        return row._mapping  # pyright: ignore[reportPrivateUsage]

    async def revoke_all(
        self, org: str, project: str, at: datetime, principal: str | None = None
    ) -> int:
        """Revoke every unrevoked grant of this org/project (and principal); how many."""
        where = [g.org == org, g.project == project, g.revoked.is_(False)]
        if principal is not None:
            where.append(g.principal == principal)
        result = await self.conn.execute(
            permission_grants.update().where(*where).values(revoked=True, revoked_at=at)
        )
        return int(result.rowcount)

    async def purge_expired(self, now: datetime) -> int:
        """Delete expired and used-up grants, and those revoked over a day ago; how many."""
        result = await self.conn.execute(
            permission_grants.delete().where(
                sa.or_(
                    g.expires_at <= now,
                    sa.and_(g.max_uses.is_not(None), g.uses >= g.max_uses),
                    sa.and_(g.revoked.is_(True), g.revoked_at <= now - REVOKED_RETENTION),
                )
            )
        )
        return int(result.rowcount)
