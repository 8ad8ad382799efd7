"""SQL queries over ``api_keys``; the rules (hashing, validation, touch rate) live in
``pml.gateway.keys``.

Rows come back as read-only mappings with the table's column names::

    async with db.transaction() as conn:
        repo = SqlApiKeyRepository(conn)
        await repo.insert(id=..., key_hash=..., prefix="pml_AbCdEfGh", org="acme", ...,
                          role="admin")
        rows = await repo.list(org="acme")
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pml.storage.database import Database
from pml.storage.tables import api_keys

Row = sa.RowMapping

# Every column except the hash: listings never carry it out of the repository.
PUBLIC_COLUMNS = [column for column in api_keys.columns if column.key != "key_hash"]


def _by_hash_statement() -> sa.Select[Any]:
    """The authentication lookup, built once: one indexed probe of the unique hash."""
    return sa.select(*PUBLIC_COLUMNS, api_keys.c.key_hash).where(
        api_keys.c.key_hash == sa.bindparam("key_hash", type_=sa.String()),
        api_keys.c.revoked_at.is_(None),
    )


BY_HASH_STATEMENT = _by_hash_statement()


async def find_live_by_hash(db: Database, key_hash: str) -> Row | None:
    """The live (unrevoked) key with this hash, outside any transaction (the request path)."""
    row = await db.first(BY_HASH_STATEMENT, {"key_hash": key_hash})
    return row._mapping if row is not None else None  # pyright: ignore[reportPrivateUsage]


class SqlApiKeyRepository:
    """Queries over ``api_keys`` on one connection (SQLite or PostgreSQL)."""

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn

    async def insert(
        self,
        *,
        id: str,
        key_hash: str,
        prefix: str,
        org: str,
        project: str,
        user_id: str | None,
        created_at: datetime,
        role: str = "agent",
    ) -> None:
        """Store one new key (its hash, never the key) with its role."""
        await self.conn.execute(
            api_keys.insert().values(
                id=id,
                key_hash=key_hash,
                prefix=prefix,
                org=org,
                project=project,
                user_id=user_id,
                created_at=created_at,
                role=role,
            )
        )

    async def get(self, key_id: str) -> Row | None:
        """The key with this id (without its hash)."""
        query = sa.select(*PUBLIC_COLUMNS).where(api_keys.c.id == key_id)
        row = (await self.conn.execute(query)).first()
        return row._mapping if row is not None else None  # pyright: ignore[reportPrivateUsage]

    async def find(self, key_id_or_prefix: str, key_hash: str | None = None) -> list[Row]:
        """Keys whose id or display prefix (or hash, when given) is this value."""
        k = api_keys.c
        conditions = [k.id == key_id_or_prefix, k.prefix == key_id_or_prefix]
        if key_hash is not None:
            conditions.append(k.key_hash == key_hash)
        query = sa.select(*PUBLIC_COLUMNS).where(sa.or_(*conditions)).order_by(k.created_at, k.id)
        return [row._mapping for row in await self.conn.execute(query)]  # pyright: ignore[reportPrivateUsage]

    async def list(self, org: str | None = None, project: str | None = None) -> list[Row]:
        """Every key (without hashes), oldest first, optionally of one org and/or project."""
        k = api_keys.c
        where: list[sa.ColumnElement[bool]] = []
        if org is not None:
            where.append(k.org == org)
        if project is not None:
            where.append(k.project == project)
        query = sa.select(*PUBLIC_COLUMNS).where(*where).order_by(k.created_at, k.id)
        return [row._mapping for row in await self.conn.execute(query)]  # pyright: ignore[reportPrivateUsage]

    async def revoke(self, key_id: str, at: datetime) -> None:
        """Mark a key revoked at ``at`` (a key already revoked keeps its first time)."""
        k = api_keys.c
        await self.conn.execute(
            api_keys.update().where(k.id == key_id, k.revoked_at.is_(None)).values(revoked_at=at)
        )

    async def touch(self, key_id: str, at: datetime, stale_before: datetime) -> bool:
        """Set ``last_used_at`` of a live key last used before ``stale_before``; if it did."""
        k = api_keys.c
        result = await self.conn.execute(
            api_keys.update()
            .where(
                k.id == key_id,
                k.revoked_at.is_(None),
                sa.or_(k.last_used_at.is_(None), k.last_used_at < stale_before),
            )
            .values(last_used_at=at)
        )
        return bool(result.rowcount)

    async def count_by_state(self) -> dict[str, int]:
        """How many keys are active and how many revoked."""
        state = sa.case((api_keys.c.revoked_at.is_(None), "active"), else_="revoked").label("s")
        counts = {"active": 0, "revoked": 0}
        for row in await self.conn.execute(sa.select(state, sa.func.count()).group_by(state)):
            counts[str(row[0])] = int(row[1])
        return counts
