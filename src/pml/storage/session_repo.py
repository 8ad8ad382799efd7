"""MCP sessions (the 2025-11-25 generation) recorded so that every replica can serve them.

    store = McpSessionStore(db)
    await store.record(SessionRecord(session_hash, owner_hash, scope, "2025-11-25", client))
    found = await store.find(session_hash, idle_s=1800)   # None: unknown, closed or idle
    await store.touch([session_hash])                    # still in use somewhere
    await store.close(session_hash)                       # the client ended it (DELETE)

Only the SHA-256 of a session id is stored, and the digest of the API key that opened it:
a copy of the database opens no session. The handshake the client made (negotiated
protocol version, client info and capabilities) is kept so that a replica that never saw
the ``initialize`` serves the session exactly as the one that did.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

import sqlalchemy as sa

from pml.registry.scope import Scope
from pml.storage.database import Database
from pml.storage.tables import SCOPE_PART, metadata
from pml.storage.types import JsonValue, UtcDateTime, utc_now

# Closed and idle sessions are kept this long for operators, then purged.
KEPT_AFTER_END: Final = timedelta(days=1)
TOUCH_BATCH: Final = 500

mcp_sessions = sa.Table(
    "mcp_sessions",
    metadata,
    # SHA-256 of the Mcp-Session-Id: the id itself is never stored
    sa.Column("session_hash", sa.String(64), primary_key=True),
    # SHA-256 of the owner (the API key's digest and its scope): who may use the session
    sa.Column("owner_hash", sa.String(64), nullable=False),
    sa.Column("org", SCOPE_PART, nullable=False),
    sa.Column("project", SCOPE_PART, nullable=False),
    sa.Column("user_id", sa.String(128), nullable=False),
    sa.Column("protocol_version", sa.String(32), nullable=False),
    sa.Column("client", JsonValue(), nullable=False),  # the initialize params, as sent
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.Column("last_seen_at", UtcDateTime(), nullable=False),
    sa.Column("closed_at", UtcDateTime(), nullable=True),
    sa.Index(None, "last_seen_at"),
)


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """One recorded session: whose it is and the handshake its client made."""

    session_hash: str
    owner_hash: str
    scope: Scope
    protocol_version: str
    client: dict[str, Any]


class McpSessionStore:
    """Records, finds, touches and closes MCP sessions in ``mcp_sessions``."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def record(self, record: SessionRecord) -> None:
        """Record a session's handshake (again, when its client initializes once more)."""
        now = utc_now()
        values = {
            "owner_hash": record.owner_hash,
            "org": record.scope.org,
            "project": record.scope.project,
            "user_id": record.scope.user,
            "protocol_version": record.protocol_version,
            "client": record.client,
            "last_seen_at": now,
            "closed_at": None,
        }
        table = mcp_sessions
        async with self._db.transaction() as conn:
            updated = await conn.execute(
                sa.update(table).where(table.c.session_hash == record.session_hash).values(values)
            )
            if not updated.rowcount:
                await conn.execute(
                    sa.insert(table).values(
                        session_hash=record.session_hash, created_at=now, **values
                    )
                )

    async def find(self, session_hash: str, *, idle_s: float | None) -> SessionRecord | None:
        """The open session with this hash, or None (unknown, closed, or unused for
        ``idle_s`` seconds; ``idle_s=None``: never idle)."""
        table = mcp_sessions
        query = sa.select(table).where(
            table.c.session_hash == session_hash, table.c.closed_at.is_(None)
        )
        if idle_s is not None:
            query = query.where(table.c.last_seen_at > utc_now() - timedelta(seconds=idle_s))
        async with self._db.read() as conn:
            row = (await conn.execute(query)).first()
        if row is None:
            return None
        return SessionRecord(
            row.session_hash,
            row.owner_hash,
            Scope(row.org, row.project, row.user_id),
            row.protocol_version,
            dict(row.client),
        )

    async def touch(self, session_hashes: Iterable[str]) -> None:
        """Mark these sessions as used now (they stay open on every replica)."""
        hashes = sorted(set(session_hashes))
        now = utc_now()
        table = mcp_sessions
        for start in range(0, len(hashes), TOUCH_BATCH):
            batch = hashes[start : start + TOUCH_BATCH]
            async with self._db.transaction() as conn:
                await conn.execute(
                    sa.update(table)
                    .where(table.c.session_hash.in_(batch), table.c.closed_at.is_(None))
                    .values(last_seen_at=now)
                )

    async def close(self, session_hash: str) -> None:
        """The client ended the session: no replica serves it from now on."""
        table = mcp_sessions
        async with self._db.transaction() as conn:
            await conn.execute(
                sa.update(table)
                .where(table.c.session_hash == session_hash, table.c.closed_at.is_(None))
                .values(closed_at=utc_now())
            )

    async def purge(self, *, idle_s: float, now: datetime | None = None) -> int:
        """Delete sessions ended (closed or idle) more than a day ago; how many."""
        now = now or utc_now()
        table = mcp_sessions
        idle_since = now - timedelta(seconds=idle_s) - KEPT_AFTER_END
        closed_since = now - KEPT_AFTER_END
        async with self._db.transaction() as conn:
            result = await conn.execute(
                sa.delete(table).where(
                    sa.or_(table.c.last_seen_at < idle_since, table.c.closed_at < closed_since)
                )
            )
        return int(result.rowcount or 0)
