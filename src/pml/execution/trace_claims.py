"""The database side of trace ingest: which client-routed workflows are live, in flight or
reported, and claiming them so that one request only captures each (SPEC §9.4).

    claims = TraceClaims(db)
    states, reported = await claims.lookup(["wf_1", "wf_2"])   # any owner
    token = utc_now()                                         # this request's claims
    claimed = await claims.claim(scope, ["wf_1"], token)      # live, ours: only one request
    written = await claims.finish(scope, rows, ["wf_1"], token)  # trace rows in, states out
    await claims.release(scope, ["wf_2"], token)              # claimed, not processed: back

A claimed state is not deleted at once: it is marked ``CLAIMED_KIND`` with the time of the
claim (``claimed_at``, the request's token) and deleted in the same transaction that writes
its trace row. A request looking at the workflow in between sees it in flight (its trace is
``pending``: sent again later), never a missing state (``expired``). A claim older than its
lease (``CLAIM_LEASE_S``) was left by a request that died before ending it: another request
takes it over, and the late request, should it still finish, writes nothing for it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from pml.errors import PmlError
from pml.execution.handoff import CLIENT_RUN_KIND
from pml.registry.scope import Scope
from pml.storage.database import Database
from pml.storage.tables import execution_traces, workflow_state
from pml.storage.trace_repo import SqlTraceRepository, TraceRow

logger = logging.getLogger(__name__)

CLAIMED_KIND = "client_run:claimed"
# A request holds its claims at most this long (100 captures take ~2 s); an older claim
# belongs to a request that died.
CLAIM_LEASE_S = 30.0

Owner = tuple[str, str, str | None]  # org, project, user
_COLUMNS = (
    workflow_state.c.workflow_id,
    workflow_state.c.kind,
    workflow_state.c.org,
    workflow_state.c.project,
    workflow_state.c.user_id,
    workflow_state.c.state,
    workflow_state.c.expires_at,
    workflow_state.c.claimed_at,
)


class _AlreadyReported(Exception):
    """Rolls back a mark: the run's trace row was written since it was looked up."""


class StoredState:
    """One ``workflow_state`` row as the ingest needs it."""

    __slots__ = ("claimed_at", "expires_at", "kind", "owner", "state")

    def __init__(self, row: Any) -> None:
        self.kind: str = row.kind
        self.owner: Owner = (row.org, row.project, row.user_id)
        self.state: object = row.state
        self.expires_at: datetime = row.expires_at
        self.claimed_at: datetime | None = row.claimed_at

    def lease_left(self, now: datetime, lease_s: float) -> float:
        """Seconds until a claim on this state may be taken over (0: it may be now)."""
        if self.kind != CLAIMED_KIND or self.claimed_at is None:
            return 0.0
        return max(0.0, (self.claimed_at - now).total_seconds() + lease_s)


class TraceClaims:
    """Workflow states and trace rows of one database (SQLite or PostgreSQL)."""

    def __init__(self, db: Database, *, lease_s: float = CLAIM_LEASE_S) -> None:
        self._db = db
        self.lease_s = lease_s

    async def lookup(self, ids: Sequence[str]) -> tuple[dict[str, StoredState], dict[str, Owner]]:
        """The workflow states of ``ids`` (any owner, any kind) and who reported those that
        already have a trace row."""
        if not ids:
            return {}, {}
        state_query = sa.select(*_COLUMNS).where(workflow_state.c.workflow_id.in_(ids))
        done_query = sa.select(
            execution_traces.c.workflow_id,
            execution_traces.c.org,
            execution_traces.c.project,
            execution_traces.c.user_id,
        ).where(execution_traces.c.workflow_id.in_(ids))
        async with self._db.read() as conn:
            states = {row.workflow_id: StoredState(row) for row in await conn.execute(state_query)}
            done: dict[str, Owner] = {
                row.workflow_id: (row.org, row.project, row.user_id)
                for row in await conn.execute(done_query)
            }
        return states, done

    async def claim(
        self, scope: Scope, ids: Sequence[str], token: datetime
    ) -> dict[str, StoredState]:
        """Mark the live client-run states of ``ids`` that ``scope`` owns as in flight (or
        take over a claim past its lease); those this call marked (a concurrent request
        marks the others). ``token``: this request's claim time."""
        if not ids:
            return {}
        statement = (
            sa.update(workflow_state)
            .where(
                *_owned(scope, ids),
                workflow_state.c.expires_at > token,
                sa.or_(
                    workflow_state.c.kind == CLIENT_RUN_KIND,
                    sa.and_(workflow_state.c.kind == CLAIMED_KIND, self._stale(token)),
                ),
            )
            .values(kind=CLAIMED_KIND, claimed_at=token)
            .returning(*_COLUMNS)
        )
        async with self._db.transaction() as conn:
            return {row.workflow_id: StoredState(row) for row in await conn.execute(statement)}

    async def claim_new(
        self, scope: Scope, ids: Sequence[str], token: datetime, *, ttl_s: float
    ) -> dict[str, StoredState]:
        """Mark workflows that have no state (offline runs, which the client named) as in
        flight for ``scope`` (or take over such a mark past its lease); those this call
        marked (any other request finds the mark)."""
        claimed: dict[str, StoredState] = {}
        for workflow_id in ids:
            values = {
                "workflow_id": workflow_id,
                "kind": CLAIMED_KIND,
                "org": scope.org,
                "project": scope.project,
                "user_id": scope.user,
                "state": {"json": "{}"},
                "created_at": token,
                "expires_at": token + timedelta(seconds=ttl_s),
                "claimed_at": token,
            }
            inserted = sa.insert(workflow_state).values(**values).returning(*_COLUMNS)
            taken_over = (
                sa.update(workflow_state)
                .where(
                    *_owned(scope, [workflow_id]),
                    workflow_state.c.kind == CLAIMED_KIND,
                    self._stale(token),
                )
                .values(claimed_at=token)
                .returning(*_COLUMNS)
            )
            row = await self._mark(workflow_id, inserted)
            if row is None:  # marked already: by a live request, or by one that died
                row = await self._mark(workflow_id, taken_over)
            if row is not None:
                claimed[workflow_id] = StoredState(row)
        return claimed

    async def _mark(self, workflow_id: str, statement: Any) -> Any:
        """The row ``statement`` marked, unless none or the run was reported meanwhile."""
        try:
            async with self._db.transaction() as conn:
                row = (await conn.execute(statement)).first()
                if row is None:
                    return None
                reported = sa.select(execution_traces.c.id).where(
                    execution_traces.c.workflow_id == workflow_id
                )
                if (await conn.execute(reported.limit(1))).first() is not None:
                    raise _AlreadyReported  # finished by another request meanwhile
                return row
        except (IntegrityError, _AlreadyReported):  # marked or reported by another request
            return None

    async def drop(self, scope: Scope, ids: Sequence[str], token: datetime) -> None:
        """Remove the marks of offline runs a failed batch did not process (logged, never
        raised), so that the client's retry is learned."""
        if not ids:
            return
        statement = sa.delete(workflow_state).where(*self._ours(scope, ids, token))
        try:
            async with self._db.transaction() as conn:
                await conn.execute(statement)
        except PmlError:
            logger.exception("could not unmark %d offline run(s)", len(ids))

    async def finish(
        self, scope: Scope, rows: Sequence[TraceRow], done: Sequence[str], token: datetime
    ) -> set[str]:
        """Delete the states of ``done`` this request still holds and write their trace
        rows, atomically; the workflows written (a claim taken over since writes none)."""
        if not done:
            return set()
        deleted = (
            sa.delete(workflow_state)
            .where(*self._ours(scope, done, token))
            .returning(workflow_state.c.workflow_id)
        )
        async with self._db.transaction() as conn:
            held = {row.workflow_id for row in await conn.execute(deleted)}
            await SqlTraceRepository(conn).insert_many(
                [row for row in rows if row.workflow_id in held]
            )
        if lost := set(done) - held:
            logger.warning(
                "%d trace(s) ended after their claim was taken over; not written twice", len(lost)
            )
        return held

    async def release(self, scope: Scope, ids: Sequence[str], token: datetime) -> None:
        """Put back states claimed by a batch that failed before processing them (logged,
        never raised: the batch's own error is the one to report)."""
        if not ids:
            return
        statement = (
            sa.update(workflow_state)
            .where(*self._ours(scope, ids, token))
            .values(kind=CLIENT_RUN_KIND, claimed_at=None)
        )
        try:
            async with self._db.transaction() as conn:
                await conn.execute(statement)
        except PmlError:
            logger.exception("could not put back %d workflow state(s)", len(ids))

    def _stale(self, token: datetime) -> sa.ColumnElement[bool]:
        """A claim past its lease at ``token`` (or from before claims were dated)."""
        cutoff = token - timedelta(seconds=self.lease_s)
        return sa.or_(workflow_state.c.claimed_at.is_(None), workflow_state.c.claimed_at <= cutoff)

    @staticmethod
    def _ours(scope: Scope, ids: Sequence[str], token: datetime) -> tuple[Any, ...]:
        """The states of ``ids`` still claimed by the request of ``token``."""
        return (
            *_owned(scope, ids),
            workflow_state.c.kind == CLAIMED_KIND,
            workflow_state.c.claimed_at == token,
        )


def _owned(scope: Scope, ids: Sequence[str]) -> tuple[sa.ColumnElement[bool], ...]:
    return (
        workflow_state.c.workflow_id.in_(list(ids)),
        workflow_state.c.org == scope.org,
        workflow_state.c.project == scope.project,
        workflow_state.c.user_id == scope.user,
    )
