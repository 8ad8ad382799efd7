"""Queries over ``memories``: the facts PML remembers for a person (SPEC §13).

    async with db.transaction() as conn:
        repo = MemoryRepository(conn)
        row = await repo.by_hash(scope, text_hash)       # the same fact, stored already?
        await repo.insert({"id": ..., "org": ..., "text": ..., ...})
        rows = await repo.newest(scope, limit=20, containing="metric")

The rules (validation, sensitivity, limits, dedup) live in ``pml.memory.store``; this
module only queries. Every query is fenced to one scope's user: a person's memories are
theirs alone. The table is defined here, like ``mcp_sessions`` in ``session_repo``;
migration 0013 creates it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pml.registry.scope import Scope
from pml.storage.tables import SCOPE_PART, metadata
from pml.storage.types import UtcDateTime

Row = sa.RowMapping

memories = sa.Table(
    "memories",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("org", SCOPE_PART, nullable=False),
    sa.Column("project", SCOPE_PART, nullable=False),
    sa.Column("user_id", sa.String(128), nullable=False),
    sa.Column("text", sa.Text(), nullable=False),
    sa.Column("sensitivity", sa.String(16), nullable=False),  # low | high (never credential)
    sa.Column("source", sa.String(64), nullable=False),  # agent, pml_execute, cli...
    sa.Column("request_id", sa.String(64), nullable=True),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    # SHA-256 of the normalised text: the same fact is stored once per user
    sa.Column("text_hash", sa.String(64), nullable=False),
    sa.UniqueConstraint("org", "project", "user_id", "text_hash"),
    sa.Index(None, "org", "project", "user_id", "created_at"),
)

m = memories.c


def _owned_by(scope: Scope) -> list[sa.ColumnElement[bool]]:
    return [m.org == scope.org, m.project == scope.project, m.user_id == scope.user]


def _newest_first(query: sa.Select[Any]) -> sa.Select[Any]:
    return query.order_by(m.created_at.desc(), m.id.desc())


class MemoryRepository:
    """Queries over ``memories`` on one connection (SQLite or PostgreSQL)."""

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn

    async def insert(self, values: Mapping[str, Any]) -> None:
        """Store one fact (every column)."""
        await self.conn.execute(memories.insert().values(**values))

    async def by_hash(self, scope: Scope, text_hash: str) -> Row | None:
        """The scope's user's fact with this text hash."""
        query = sa.select(memories).where(*_owned_by(scope), m.text_hash == text_hash)
        return (await self.conn.execute(query)).mappings().first()

    async def by_id(self, scope: Scope, fact_id: str) -> Row | None:
        """The scope's user's fact with this id."""
        query = sa.select(memories).where(*_owned_by(scope), m.id == fact_id)
        return (await self.conn.execute(query)).mappings().first()

    async def with_id_prefix(self, scope: Scope, prefix: str, *, limit: int) -> list[Row]:
        """The scope's user's facts whose id starts with ``prefix`` (at most ``limit``)."""
        query = sa.select(memories).where(
            *_owned_by(scope), m.id.startswith(prefix, autoescape=True)
        )
        return list((await self.conn.execute(query.limit(limit))).mappings())

    async def count(self, scope: Scope) -> int:
        """How many facts the scope's user has."""
        query = sa.select(sa.func.count()).select_from(memories).where(*_owned_by(scope))
        return int((await self.conn.execute(query)).scalar_one())

    async def raise_sensitivity(self, scope: Scope, fact_id: str, level: str) -> None:
        """Record a more sensitive level for a stored fact."""
        await self.conn.execute(
            sa.update(memories).where(*_owned_by(scope), m.id == fact_id).values(sensitivity=level)
        )

    async def newest(self, scope: Scope, *, limit: int, containing: str | None) -> list[Row]:
        """The scope's user's facts, newest first; with ``containing``, only those whose text
        holds it (case-insensitive; ASCII only on SQLite, whose lower() folds no more)."""
        query = sa.select(memories).where(*_owned_by(scope))
        if containing:
            query = query.where(sa.func.lower(m.text).contains(containing, autoescape=True))
        result = await self.conn.execute(_newest_first(query).limit(limit))
        return list(result.mappings())

    async def delete(self, scope: Scope, fact_id: str) -> bool:
        """Delete the scope's user's fact with this id; whether there was one."""
        result = await self.conn.execute(
            sa.delete(memories).where(*_owned_by(scope), m.id == fact_id)
        )
        return bool(result.rowcount)
