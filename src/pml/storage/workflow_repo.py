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
sees nothing, exactly as if it did not exist, and cannot replace it. The state is stored
as JSON text inside the JSON column, so whatever JSON value Python can write (NUL
characters, lone surrogates, NaN from a tool's result) round-trips alike on SQLite and on
PostgreSQL, whose JSONB refuses those.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from pml.errors import InvalidInput
from pml.registry.scope import Scope
from pml.storage.database import Database
from pml.storage.tables import workflow_state

Clock = Callable[[], datetime]
MAX_ID_CHARS = 64
MAX_KIND_CHARS = 32
_ENCODED = "json"


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
        """Store (or replace) ``scope``'s state; returns its expiry. An id or kind too long,
        a state JSON cannot hold, or an id another caller holds is ``INVALID_INPUT``."""
        for field, value, limit in (
            ("workflow_id", workflow_id, MAX_ID_CHARS),
            ("kind", kind, MAX_KIND_CHARS),
        ):
            if not isinstance(value, str) or not 0 < len(value) <= limit:  # pyright: ignore[reportUnnecessaryIsInstance]
                raise InvalidInput(f"Invalid {field}: 1 to {limit} characters", field=field)
        try:
            encoded = json.dumps(state)  # ASCII-escaped: NUL and surrogates stay text
        except (TypeError, ValueError) as error:
            raise InvalidInput(f"Workflow state is not JSON: {error}", field="state") from None
        now = self._clock()
        expires_at = now + timedelta(seconds=ttl_s)
        values = {
            "kind": kind,
            "org": scope.org,
            "project": scope.project,
            "user_id": scope.user,
            "state": {_ENCODED: encoded},
            "created_at": now,
            "expires_at": expires_at,
        }
        try:
            async with self._db.transaction() as conn:
                await conn.execute(
                    sa.delete(workflow_state).where(*self._owned(workflow_id, scope))
                )
                await conn.execute(
                    sa.insert(workflow_state).values(workflow_id=workflow_id, **values)
                )
        except IntegrityError:
            raise InvalidInput("Workflow id already in use", field="workflow_id") from None
        return expires_at

    async def get(self, workflow_id: str, *, kind: str, scope: Scope) -> dict[str, Any] | None:
        """The live state of ``scope``'s workflow, or None."""
        async with self._db.read() as conn:
            row = (await conn.execute(self._select(workflow_id, kind, scope))).first()
        return None if row is None else decoded_state(row.state)

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
        return decoded_state(row.state)

    async def delete(self, workflow_id: str, *, scope: Scope) -> bool:
        """Delete ``scope``'s workflow state; whether there was one."""
        async with self._db.transaction() as conn:
            result = await conn.execute(
                sa.delete(workflow_state).where(*self._owned(workflow_id, scope))
            )
        return result.rowcount > 0

    async def purge_expired(self) -> int:
        """Delete every state past its expiry; how many."""
        async with self._db.transaction() as conn:
            result = await conn.execute(
                sa.delete(workflow_state).where(workflow_state.c.expires_at <= self._clock())
            )
        return result.rowcount

    @staticmethod
    def _owned(workflow_id: str, scope: Scope) -> tuple[sa.ColumnElement[bool], ...]:
        return (
            workflow_state.c.workflow_id == workflow_id,
            workflow_state.c.org == scope.org,
            workflow_state.c.project == scope.project,
            workflow_state.c.user_id == scope.user,
        )

    def _select(self, workflow_id: str, kind: str, scope: Scope) -> sa.Select[Any, Any]:
        return sa.select(workflow_state.c.state, workflow_state.c.expires_at).where(
            *self._owned(workflow_id, scope),
            workflow_state.c.kind == kind,
            workflow_state.c.expires_at > self._clock(),
        )


def decoded_state(stored: object) -> dict[str, Any] | None:
    """The state ``put`` stored (None for a row that is not one of its encodings)."""
    if not isinstance(stored, dict):
        return None
    text = cast(dict[str, Any], stored).get(_ENCODED)
    if not isinstance(text, str):
        return None
    value = json.loads(text)
    return cast(dict[str, Any], value) if isinstance(value, dict) else None
