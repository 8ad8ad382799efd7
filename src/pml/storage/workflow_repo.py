"""Short-lived workflow state with an expiry (``workflow_state``): runs waiting for approval
now, client-routed learning contexts later (SPEC §9, §10).

    store = WorkflowStateStore(db)
    await store.put("wf_1a2b", kind="approval", scope=scope, state={...}, ttl_s=900)
    await store.get("wf_1a2b", kind="approval", scope=scope)     # None: missing, expired,
                                                                 # other kind or other tenant
    await store.take(...)                                        # read and delete, atomically
    await store.purge_expired()                                  # rows past their expiry
    # approvals, decided by a person in the same org/project (any user's workflow):
    found = await store.find("wf_1a2b", kind="approval", org="acme", project="web")
    await store.decide("wf_1a2b", kind="approval", org="acme", project="web",
                       decision="approved", state={...})   # once: False if already decided

Waiting workflows (``WAITING_KINDS``: runs paused for approval, runs handed to a PML client)
count against ``pending_per_user`` (``[limits] pending_workflows_per_user``; 0: no quota):
``put`` of one more for a user who already has that many live ones is ``LIMIT_EXCEEDED``
and stores nothing (one count on the ``(org, project, user_id, kind, expires_at)`` index,
in the same transaction as the insert).

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
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, cast

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from pml.errors import InvalidInput, LimitExceeded
from pml.registry.scope import Scope
from pml.storage.database import Database
from pml.storage.tables import workflow_state

Clock = Callable[[], datetime]
MAX_ID_CHARS = 64
MAX_KIND_CHARS = 32
_ENCODED = "json"
# Workflows that wait for a person or a client: approval_desk.APPROVAL_KIND and
# handoff.CLIENT_RUN_KIND (a trace ingest's claimed hand-off is being finished: not counted).
WAITING_KINDS: Final = ("approval", "client_run")
CLEAR_HINT: Final = (
    "finish or withdraw some first: `pml approvals list` shows the approvals waiting (a "
    "person decides them; continue_workflow with approved: false withdraws one), and a run "
    "handed to your PML client ends when the client reports it or its workflow expires"
)


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class StoredWorkflow:
    """A live workflow state with its owner and, for approvals, the decision taken."""

    workflow_id: str
    user: str
    state: dict[str, Any]
    decision: str | None
    created_at: datetime
    expires_at: datetime


class WorkflowStateStore:
    """``workflow_state`` rows for one database (SQLite or PostgreSQL)."""

    def __init__(self, db: Database, *, clock: Clock = utc_now, pending_per_user: int = 0) -> None:
        self._db = db
        self._clock = clock
        self.pending_per_user = pending_per_user  # [limits] pending_workflows_per_user

    async def pending(self, scope: Scope) -> int:
        """How many live waiting workflows (``WAITING_KINDS``) ``scope``'s user has."""
        async with self._db.read() as conn:
            return int((await conn.execute(self._count_waiting(scope, None))).scalar_one())

    async def put(
        self, workflow_id: str, *, kind: str, scope: Scope, state: dict[str, Any], ttl_s: float
    ) -> datetime:
        """Store (or replace) ``scope``'s state; returns its expiry. An id or kind too long,
        a state JSON cannot hold, or an id another caller holds is ``INVALID_INPUT``; one more
        waiting workflow than ``pending_per_user`` allows is ``LIMIT_EXCEEDED``."""
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
        quota = self.pending_per_user if kind in WAITING_KINDS else 0
        try:
            async with self._db.transaction() as conn:
                if quota > 0:
                    waiting = await conn.execute(self._count_waiting(scope, workflow_id))
                    _check_quota(int(waiting.scalar_one()), quota)
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

    async def take(
        self, workflow_id: str, *, kind: str, scope: Scope, decision: str | None = None
    ) -> dict[str, Any] | None:
        """The live state, deleted in the same transaction: two callers never both get it.
        With ``decision``, only a state with that decision is taken."""
        statement = self._select(workflow_id, kind, scope)
        if decision is not None:
            statement = statement.where(workflow_state.c.decision == decision)
        async with self._db.transaction() as conn:
            row = (await conn.execute(statement)).first()
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

    async def find(
        self, workflow_id: str, *, kind: str, org: str, project: str, user: str | None = None
    ) -> StoredWorkflow | None:
        """A live workflow of ``org``/``project`` (of ``user`` when given), or None."""
        statement = self._rows(kind, org, project, user).where(
            workflow_state.c.workflow_id == workflow_id
        )
        async with self._db.read() as conn:
            row = (await conn.execute(statement)).first()
        return None if row is None else _stored(row)

    async def live(
        self, *, kind: str, org: str, project: str, user: str | None = None, limit: int = 100
    ) -> list[StoredWorkflow]:
        """The live workflows of ``org``/``project`` (of ``user`` when given), oldest first."""
        statement = (
            self._rows(kind, org, project, user)
            .order_by(workflow_state.c.created_at, workflow_state.c.workflow_id)
            .limit(limit)
        )
        async with self._db.read() as conn:
            rows = (await conn.execute(statement)).all()
        found = (_stored(row) for row in rows)
        return [item for item in found if item is not None]

    async def decide(
        self,
        workflow_id: str,
        *,
        kind: str,
        org: str,
        project: str,
        decision: str,
        state: dict[str, Any],
    ) -> bool:
        """Record the decision (and the state that goes with it) of a live, undecided
        workflow; False when it is gone, expired or already decided (decided once only)."""
        return await self._update(
            workflow_id, kind, org, project, {"decision": decision, "state": _encoded(state)}
        )

    async def replace_undecided(
        self, workflow_id: str, *, kind: str, scope: Scope, state: dict[str, Any]
    ) -> bool:
        """Replace the state of ``scope``'s live, undecided workflow; whether it was."""
        return await self._update(
            workflow_id,
            kind,
            scope.org,
            scope.project,
            {"state": _encoded(state)},
            workflow_state.c.user_id == scope.user,
        )

    async def _update(
        self,
        workflow_id: str,
        kind: str,
        org: str,
        project: str,
        values: dict[str, Any],
        *extra: sa.ColumnElement[bool],
    ) -> bool:
        async with self._db.transaction() as conn:
            result = await conn.execute(
                sa.update(workflow_state)
                .where(
                    workflow_state.c.workflow_id == workflow_id,
                    workflow_state.c.kind == kind,
                    workflow_state.c.org == org,
                    workflow_state.c.project == project,
                    workflow_state.c.decision.is_(None),
                    workflow_state.c.expires_at > self._clock(),
                    *extra,
                )
                .values(**values)
            )
        return result.rowcount == 1

    def _rows(
        self, kind: str, org: str, project: str, user: str | None
    ) -> sa.Select[Any, Any, Any, Any, Any, Any]:
        c = workflow_state.c
        statement = sa.select(
            c.workflow_id, c.user_id, c.state, c.decision, c.created_at, c.expires_at
        ).where(c.kind == kind, c.org == org, c.project == project, c.expires_at > self._clock())
        return statement if user is None else statement.where(c.user_id == user)

    async def delete(self, workflow_id: str, *, scope: Scope) -> bool:
        """Delete ``scope``'s workflow state; whether there was one."""
        async with self._db.transaction() as conn:
            result = await conn.execute(
                sa.delete(workflow_state).where(*self._owned(workflow_id, scope))
            )
        return result.rowcount > 0

    async def take_expired(
        self, *, kind: str, limit: int = 1000
    ) -> list[tuple[str, str, StoredWorkflow]]:
        """Delete up to ``limit`` states of ``kind`` past their expiry; each with its org and
        project (for whoever must tell of them)."""
        c = workflow_state.c
        statement = (
            sa.select(
                c.workflow_id,
                c.org,
                c.project,
                c.user_id,
                c.state,
                c.decision,
                c.created_at,
                c.expires_at,
            )
            .where(c.kind == kind, c.expires_at <= self._clock())
            .order_by(c.expires_at)
            .limit(limit)
        )
        taken: list[tuple[str, str, StoredWorkflow]] = []
        async with self._db.transaction() as conn:
            for row in (await conn.execute(statement)).all():
                deleted = await conn.execute(
                    sa.delete(workflow_state).where(
                        c.workflow_id == row.workflow_id, c.expires_at == row.expires_at
                    )
                )
                stored = _stored(row)
                if deleted.rowcount == 1 and stored is not None:
                    taken.append((str(row.org), str(row.project), stored))
        return taken

    async def purge_expired(self) -> int:
        """Delete every state past its expiry; how many."""
        async with self._db.transaction() as conn:
            result = await conn.execute(
                sa.delete(workflow_state).where(workflow_state.c.expires_at <= self._clock())
            )
        return result.rowcount

    def _count_waiting(self, scope: Scope, replaced: str | None) -> sa.Select[int]:
        c = workflow_state.c
        statement = sa.select(sa.func.count()).where(
            c.org == scope.org,
            c.project == scope.project,
            c.user_id == scope.user,
            c.kind.in_(WAITING_KINDS),
            c.expires_at > self._clock(),
        )
        # a state replaced under its own id is not one more
        return statement if replaced is None else statement.where(c.workflow_id != replaced)

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


def _check_quota(waiting: int, quota: int) -> None:
    if waiting >= quota:
        raise LimitExceeded(
            f"Too many workflows waiting: you have {waiting} (max: {quota}, [limits] "
            f"pending_workflows_per_user); nothing was stored. To go on, {CLEAR_HINT}.",
            limit="pending_workflows_per_user",
            max=quota,
            pending=waiting,
        )


def _encoded(state: dict[str, Any]) -> dict[str, str]:
    try:
        return {_ENCODED: json.dumps(state)}
    except (TypeError, ValueError) as error:
        raise InvalidInput(f"Workflow state is not JSON: {error}", field="state") from None


def _stored(row: Any) -> StoredWorkflow | None:
    state = decoded_state(row.state)
    if state is None:
        return None
    return StoredWorkflow(
        workflow_id=str(row.workflow_id),
        user=str(row.user_id),
        state=state,
        decision=row.decision,
        created_at=row.created_at,
        expires_at=row.expires_at,
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
