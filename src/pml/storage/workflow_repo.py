"""Short-lived workflow state with an expiry (``workflow_state``): runs waiting for approval
now, client-routed learning contexts later (SPEC §9, §10).

    store = WorkflowStateStore(db)
    await store.put("wf_1a2b", kind="approval", scope=scope, state={...}, ttl_s=900)
    await store.get("wf_1a2b", kind="approval", scope=scope)     # None: missing, expired,
                                                                 # other kind or other tenant
    await store.take(...)                                        # read and delete, atomically
    await store.purge_expired()                                  # rows past their expiry

Expiry is enforced on every read (a row past ``expires_at`` is never returned, whether or
not it has been purged yet). A state belongs to its org, project and user: any other caller
sees nothing, exactly as if it did not exist.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from pml.registry.scope import Scope
from pml.storage.database import Database
from pml.storage.tables import workflow_state

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


class WorkflowStateStore:
    """``workflow_state`` rows for one database (SQLite or PostgreSQL)."""

    def __init__(self, db: Database, *, clock: Clock = utc_now) -> None:
        self._db = db
        self._clock = clock

    async def put(
        self, workflow_id: str, *, kind: str, scope: Scope, state: dict[str, Any], ttl_s: float
    ) -> datetime:
        """Store (or replace) a state; returns its expiry."""
        now = self._clock()
        expires_at = now + timedelta(seconds=ttl_s)
        values = {
            "kind": kind,
            "org": scope.org,
            "project": scope.project,
            "user_id": scope.user,
            "state": state,
            "created_at": now,
            "expires_at": expires_at,
        }
        async with self._db.transaction() as conn:
            await conn.execute(
                sa.delete(workflow_state).where(workflow_state.c.workflow_id == workflow_id)
            )
            await conn.execute(sa.insert(workflow_state).values(workflow_id=workflow_id, **values))
        return expires_at

    async def get(self, workflow_id: str, *, kind: str, scope: Scope) -> dict[str, Any] | None:
        """The live state of ``scope``'s workflow, or None."""
        async with self._db.read() as conn:
            row = (await conn.execute(self._select(workflow_id, kind, scope))).first()
        return None if row is None else dict(row.state)

    async def take(self, workflow_id: str, *, kind: str, scope: Scope) -> dict[str, Any] | None:
        """The live state, deleted in the same transaction: two callers never both get it."""
        async with self._db.transaction() as conn:
            row = (await conn.execute(self._select(workflow_id, kind, scope))).first()
            if row is None:
                return None
            deleted = await conn.execute(
                sa.delete(workflow_state).where(
                    workflow_state.c.workflow_id == workflow_id,
                    workflow_state.c.expires_at == row.expires_at,
                )
            )
            if deleted.rowcount != 1:
                return None
        return dict(row.state)

    async def delete(self, workflow_id: str, *, scope: Scope) -> bool:
        """Delete ``scope``'s workflow state; whether there was one."""
        async with self._db.transaction() as conn:
            result = await conn.execute(
                sa.delete(workflow_state).where(
                    workflow_state.c.workflow_id == workflow_id,
                    workflow_state.c.org == scope.org,
                    workflow_state.c.project == scope.project,
                    workflow_state.c.user_id == scope.user,
                )
            )
        return result.rowcount > 0

    async def purge_expired(self) -> int:
        """Delete every state past its expiry; how many."""
        async with self._db.transaction() as conn:
            result = await conn.execute(
                sa.delete(workflow_state).where(workflow_state.c.expires_at <= self._clock())
            )
        return result.rowcount

    def _select(self, workflow_id: str, kind: str, scope: Scope) -> sa.Select[Any, Any]:
        return sa.select(workflow_state.c.state, workflow_state.c.expires_at).where(
            workflow_state.c.workflow_id == workflow_id,
            workflow_state.c.kind == kind,
            workflow_state.c.org == scope.org,
            workflow_state.c.project == scope.project,
            workflow_state.c.user_id == scope.user,
            workflow_state.c.expires_at > self._clock(),
        )
