"""The database side of trace ingest: which client-routed workflows are live, in flight or
reported, and claiming them so that one request only captures each (SPEC §9.4).

    claims = TraceClaims(db)
    states, reported = await claims.lookup(["wf_1", "wf_2"])   # any owner
    claimed = await claims.claim(scope, ["wf_1"])             # live, ours: only one request
    await claims.finish(scope, rows, done=["wf_1"])           # trace rows in, states out
    await claims.release(scope, ["wf_2"])                     # claimed, not processed: back

A claimed state is not deleted at once: it is marked ``CLAIMED_KIND`` and deleted in the
same transaction that writes its trace row. A request looking at the workflow in between
sees it in flight (its trace is a ``duplicate``), never a missing state (``expired``). A
marked state left by a process that died in between expires like any other.
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
from pml.storage.types import utc_now

logger = logging.getLogger(__name__)

CLAIMED_KIND = "client_run:claimed"

Owner = tuple[str, str, str | None]  # org, project, user
_COLUMNS = (
    workflow_state.c.workflow_id,
    workflow_state.c.kind,
    workflow_state.c.org,
    workflow_state.c.project,
    workflow_state.c.user_id,
    workflow_state.c.state,
    workflow_state.c.expires_at,
)


class _AlreadyReported(Exception):
    """Rolls back a mark: the run's trace row was written since it was looked up."""


class StoredState:
    """One ``workflow_state`` row as the ingest needs it."""

    __slots__ = ("expires_at", "kind", "owner", "state")

    def __init__(self, row: Any) -> None:
        self.kind: str = row.kind
        self.owner: Owner = (row.org, row.project, row.user_id)
        self.state: object = row.state
        self.expires_at: datetime = row.expires_at


class TraceClaims:
    """Workflow states and trace rows of one database (SQLite or PostgreSQL)."""

    def __init__(self, db: Database) -> None:
        self._db = db

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

    async def claim(self, scope: Scope, ids: Sequence[str]) -> dict[str, StoredState]:
        """Mark the live client-run states of ``ids`` that ``scope`` owns as in flight;
        those this call marked (a concurrent request marks the others)."""
        if not ids:
            return {}
        statement = (
            sa.update(workflow_state)
            .where(
                *_owned(scope, ids),
                workflow_state.c.kind == CLIENT_RUN_KIND,
                workflow_state.c.expires_at > utc_now(),
            )
            .values(kind=CLAIMED_KIND)
            .returning(*_COLUMNS)
        )
        async with self._db.transaction() as conn:
            return {row.workflow_id: StoredState(row) for row in await conn.execute(statement)}

    async def claim_new(
        self, scope: Scope, ids: Sequence[str], *, ttl_s: float
    ) -> dict[str, StoredState]:
        """Mark workflows that have no state (offline runs, which the client named) as in
        flight for ``scope``; those this call marked (any other request finds the mark)."""
        claimed: dict[str, StoredState] = {}
        for workflow_id in ids:
            now = utc_now()
            values = {
                "workflow_id": workflow_id,
                "kind": CLAIMED_KIND,
                "org": scope.org,
                "project": scope.project,
                "user_id": scope.user,
                "state": {"json": "{}"},
                "created_at": now,
                "expires_at": now + timedelta(seconds=ttl_s),
            }
            try:
                async with self._db.transaction() as conn:
                    inserted = sa.insert(workflow_state).values(**values).returning(*_COLUMNS)
                    row = (await conn.execute(inserted)).one()
                    reported = sa.select(execution_traces.c.id).where(
                        execution_traces.c.workflow_id == workflow_id
                    )
                    if (await conn.execute(reported.limit(1))).first() is not None:
                        raise _AlreadyReported  # finished by another request meanwhile
            except (IntegrityError, _AlreadyReported):  # marked or reported by another request
                continue
            claimed[workflow_id] = StoredState(row)
        return claimed

    async def drop(self, scope: Scope, ids: Sequence[str]) -> None:
        """Remove the marks of offline runs a failed batch did not process (logged, never
        raised), so that the client's retry is learned."""
        if not ids:
            return
        statement = sa.delete(workflow_state).where(
            *_owned(scope, ids), workflow_state.c.kind == CLAIMED_KIND
        )
        try:
            async with self._db.transaction() as conn:
                await conn.execute(statement)
        except PmlError:
            logger.exception("could not unmark %d offline run(s)", len(ids))

    async def finish(self, scope: Scope, rows: Sequence[TraceRow], done: Sequence[str]) -> None:
        """Write the trace rows and delete the states ``done`` claimed, atomically."""
        if not rows and not done:
            return
        async with self._db.transaction() as conn:
            await SqlTraceRepository(conn).insert_many(list(rows))
            if done:
                await conn.execute(
                    sa.delete(workflow_state).where(
                        *_owned(scope, done), workflow_state.c.kind == CLAIMED_KIND
                    )
                )

    async def release(self, scope: Scope, ids: Sequence[str]) -> None:
        """Put back states claimed by a batch that failed before processing them (logged,
        never raised: the batch's own error is the one to report)."""
        if not ids:
            return
        statement = (
            sa.update(workflow_state)
            .where(*_owned(scope, ids), workflow_state.c.kind == CLAIMED_KIND)
            .values(kind=CLIENT_RUN_KIND)
        )
        try:
            async with self._db.transaction() as conn:
                await conn.execute(statement)
        except PmlError:
            logger.exception("could not put back %d workflow state(s)", len(ids))


def _owned(scope: Scope, ids: Sequence[str]) -> tuple[sa.ColumnElement[bool], ...]:
    return (
        workflow_state.c.workflow_id.in_(list(ids)),
        workflow_state.c.org == scope.org,
        workflow_state.c.project == scope.project,
        workflow_state.c.user_id == scope.user,
    )
