"""Traces from PML clients: how a client-routed workflow ends (SPEC §9.3–9.4).

    ingest = TraceIngest(db, capture, auditor=audit_log)
    results = await ingest.ingest(scope, [{"workflowId": "wf_…", "success": True,
                                           "durationMs": 12.5, "taskResults": [...]}])
    results[0]["status"]      # "captured" | "duplicate" | "expired" | "failed" | "rejected"

For each trace of a batch (at most ``MAX_TRACES``), in one pass over the database:

- malformed, or a workflow another caller owns, or not a client-routed workflow → ``rejected``
  (nothing changes);
- a workflow already reported (a trace row holds its id) or reported twice in the batch →
  ``duplicate`` (nothing new is created: the state was claimed once);
- no live state (unknown, or past its expiry) → ``expired``, logged;
- otherwise the state is claimed (deleted; only one request can claim it) and: a failed run
  is recorded and creates nothing (``failed``); a successful one goes to the same capture
  service as direct mode — capability created or reused under the key's scope (a
  capability called by name counts a use) — and is ``captured``.

Each processed trace is stored in ``execution_traces`` with its workflow id, which is what
makes a replay a ``duplicate``. Task results are kept as the tool calls' tool, argument
digest, duration and success, scrubbed of secrets; never more than the limits below.
If the capture itself fails unexpectedly, the states not yet processed are put back and the
error propagates (the client retries the batch; what was done answers ``duplicate``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, cast

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from pml.errors import InvalidInput, PmlError
from pml.execution.answers import cached_analysis
from pml.execution.capture import CaptureService, RunReport
from pml.execution.handoff import CLIENT_RUN_KIND, LearningContext
from pml.policy.model import Auditor
from pml.policy.scrub import scrub, scrub_text
from pml.registry.scope import Scope
from pml.storage.database import Database
from pml.storage.tables import execution_traces, workflow_state
from pml.storage.trace_repo import SqlTraceRepository, TraceRow
from pml.storage.types import utc_now
from pml.storage.workflow_repo import decoded_state

logger = logging.getLogger(__name__)

MAX_TRACES = 100
MAX_TASKS = 1000
MAX_ERROR_CHARS = 4000
STATUSES = ("captured", "duplicate", "expired", "failed", "rejected")
Id = Annotated[str, Field(min_length=1, max_length=64)]
Short = Annotated[str, Field(max_length=400)]


class TaskResult(BaseModel):
    """One tool call of the client's run (values are never sent, only their digest)."""

    model_config = ConfigDict(extra="ignore")

    tool: Short
    argsDigest: Annotated[str, Field(max_length=128)] | None = None
    durationMs: Annotated[float, Field(ge=0, le=1e9, allow_inf_nan=False)] = 0.0
    success: StrictBool = True
    error: Annotated[str, Field(max_length=MAX_ERROR_CHARS)] | None = None


class IncomingTrace(BaseModel):
    """``{workflowId, success, error?, durationMs, taskResults}`` plus the client's ids."""

    model_config = ConfigDict(extra="ignore")

    workflowId: Id
    success: StrictBool
    durationMs: Annotated[float, Field(ge=0, le=1e9, allow_inf_nan=False)]
    taskResults: Annotated[list[TaskResult], Field(max_length=MAX_TASKS)] = []
    error: Annotated[str, Field(max_length=MAX_ERROR_CHARS * 4)] | None = None
    traceId: Id | None = None
    parentId: Id | None = None
    timestamp: Annotated[str, Field(max_length=64)] | None = None


class _State:
    __slots__ = ("expires_at", "kind", "owner", "state")

    def __init__(self, row: Any) -> None:
        self.kind: str = row.kind
        self.owner = (row.org, row.project, row.user_id)
        self.state: object = row.state
        self.expires_at: datetime = row.expires_at


class TraceIngest:
    """Turns client traces into capabilities through the capture service."""

    def __init__(
        self, db: Database, capture: CaptureService, *, auditor: Auditor | None = None
    ) -> None:
        self._db = db
        self._capture = capture
        self._auditor = auditor

    async def ingest(self, scope: Scope, items: Sequence[object]) -> list[dict[str, Any]]:
        """One result per item, in order (``InvalidInput`` for more than ``MAX_TRACES``)."""
        if len(items) > MAX_TRACES:
            raise InvalidInput(
                f"Too many traces: {len(items)} (max: {MAX_TRACES} per request)", field="traces"
            )
        results: list[dict[str, Any] | None] = [None] * len(items)
        valid: dict[int, IncomingTrace] = {}
        seen: set[str] = set()
        for index, raw in enumerate(items):
            try:
                trace = IncomingTrace.model_validate(raw)
            except ValidationError as error:
                results[index] = _answer(raw, "rejected", message=_first_problem(error))
                continue
            if trace.workflowId in seen:
                results[index] = _answer(trace, "duplicate", message="Repeated in this batch")
            else:
                seen.add(trace.workflowId)
                valid[index] = trace
        states, reported = await self._lookup(list(seen))
        owner, now = (scope.org, scope.project, scope.user), utc_now()
        wanted: list[str] = []
        for index, trace in valid.items():
            wid = trace.workflowId
            state = states.get(wid)
            if wid in reported:
                ours = reported[wid] == owner
                status = "duplicate" if ours else "rejected"
                results[index] = _answer(trace, status, message=None if ours else _NOT_YOURS)
            elif state is None or (state.owner == owner and state.expires_at <= now):
                logger.info("trace for an unknown or expired workflow %s", wid)
                results[index] = _answer(trace, "expired", message=_EXPIRED)
            elif state.owner != owner:
                results[index] = _answer(trace, "rejected", message=_NOT_YOURS)
            elif state.kind != CLIENT_RUN_KIND:
                results[index] = _answer(trace, "rejected", message="Not a client-routed workflow")
            else:
                wanted.append(wid)
        claimed = await self._claim(scope, wanted)
        rows: list[TraceRow] = []
        pending = [(i, t) for i, t in valid.items() if results[i] is None]
        processed = 0
        try:
            for index, trace in pending:
                stored = claimed.get(trace.workflowId)
                if stored is None:  # another request claimed it first
                    results[index] = _answer(trace, "duplicate")
                else:
                    results[index] = await self._process(scope, trace, stored, rows)
                processed += 1
        except BaseException:
            left = {t.workflowId for _, t in pending[processed:]}
            await self._restore(scope, {w: s for w, s in claimed.items() if w in left})
            raise
        finally:
            await self._write(rows)
        return [result for result in results if result is not None]

    async def _lookup(
        self, ids: list[str]
    ) -> tuple[dict[str, _State], dict[str, tuple[str, str, str | None]]]:
        """The workflow states of ``ids`` (any owner) and the owners of those reported."""
        if not ids:
            return {}, {}
        state_query = sa.select(
            workflow_state.c.workflow_id,
            workflow_state.c.kind,
            workflow_state.c.org,
            workflow_state.c.project,
            workflow_state.c.user_id,
            workflow_state.c.state,
            workflow_state.c.expires_at,
        ).where(workflow_state.c.workflow_id.in_(ids))
        done_query = sa.select(
            execution_traces.c.workflow_id,
            execution_traces.c.org,
            execution_traces.c.project,
            execution_traces.c.user_id,
        ).where(execution_traces.c.workflow_id.in_(ids))
        async with self._db.read() as conn:
            states = {row.workflow_id: _State(row) for row in await conn.execute(state_query)}
            done = {
                row.workflow_id: (row.org, row.project, row.user_id)
                for row in await conn.execute(done_query)
            }
        return states, done

    async def _claim(self, scope: Scope, ids: list[str]) -> dict[str, _State]:
        """Delete the live states of ``ids`` that ``scope`` owns; those this call deleted."""
        if not ids:
            return {}
        statement = (
            sa.delete(workflow_state)
            .where(
                workflow_state.c.workflow_id.in_(ids),
                workflow_state.c.org == scope.org,
                workflow_state.c.project == scope.project,
                workflow_state.c.user_id == scope.user,
                workflow_state.c.kind == CLIENT_RUN_KIND,
                workflow_state.c.expires_at > utc_now(),
            )
            .returning(
                workflow_state.c.workflow_id,
                workflow_state.c.kind,
                workflow_state.c.org,
                workflow_state.c.project,
                workflow_state.c.user_id,
                workflow_state.c.state,
                workflow_state.c.expires_at,
            )
        )
        async with self._db.transaction() as conn:
            return {row.workflow_id: _State(row) for row in await conn.execute(statement)}

    async def _process(
        self, scope: Scope, trace: IncomingTrace, stored: _State, rows: list[TraceRow]
    ) -> dict[str, Any]:
        context = LearningContext.from_state(decoded_state(stored.state) or {})
        if context is None:
            logger.warning("workflow %s holds no learning context", trace.workflowId)
            return _answer(trace, "rejected", message="The workflow holds no learning context")
        tasks = _tasks(trace)
        allowed = {target.address for target in context.targets.values()}
        called = tuple(dict.fromkeys(t["tool"] for t in tasks if t["tool"] in allowed))
        analysis = cached_analysis(context.code, max(1, len(context.code.encode())))
        report = RunReport(
            scope=scope,
            intent=context.intent,
            analysis=analysis,
            plan=context.plan,
            called=called,
            task_results=tasks,
            duration_ms=trace.durationMs,
            workflow_id=trace.workflowId,
        )
        if context.mode == "capability" or not trace.success:
            return self._counted(trace, report, context, rows)
        try:
            routing = "cloud" if context.routing == "cloud" else None
            if context.update and context.name is not None:
                record = await self._capture.new_version(
                    report, context.name, routing, record_trace=False
                )
                created = False
            else:
                record, created = await self._capture.capture(
                    report, context.name, routing, record_trace=False
                )
        except PmlError as error:  # e.g. the name was taken meanwhile: recorded, not learned
            rows.append(_row(report, None, trace))
            logger.warning("trace of %s not captured: %s", trace.workflowId, error.message)
            return _answer(trace, "rejected", message=error.message)
        rows.append(_row(report, record.fqdn, trace))
        if created and self._auditor is not None:
            details = {"capability": record.fqdn, "intent": context.intent, "source": "trace"}
            self._auditor.emit(
                "CAPABILITY_CREATED",
                scope=scope,
                details=details,
                actor=scope.user,
                request_id=trace.workflowId,
            )
        extra = {"capabilityFqdn": record.fqdn, "capabilityName": record.display_name}
        return _answer(trace, "captured", created=created, **extra)

    def _counted(
        self,
        trace: IncomingTrace,
        report: RunReport,
        context: LearningContext,
        rows: list[TraceRow],
    ) -> dict[str, Any]:
        """A failed run, or a run of an existing capability: recorded, nothing created."""
        fqdn = context.capability
        if fqdn is not None:
            self._capture.count_use(fqdn, success=trace.success, latency_ms=trace.durationMs)
        rows.append(_row(report, fqdn, trace))
        if not trace.success:
            return _answer(trace, "failed")
        return _answer(trace, "captured", created=False, capabilityFqdn=fqdn)

    async def _write(self, rows: list[TraceRow]) -> None:
        if rows:
            async with self._db.transaction() as conn:
                await SqlTraceRepository(conn).insert_many(rows)

    async def _restore(self, scope: Scope, claimed: dict[str, _State]) -> None:
        """Put back states claimed by a batch that failed before processing them."""
        if not claimed:
            return
        values = [
            {
                "workflow_id": workflow_id,
                "kind": stored.kind,
                "org": scope.org,
                "project": scope.project,
                "user_id": scope.user,
                "state": stored.state,
                "created_at": utc_now(),
                "expires_at": stored.expires_at,
            }
            for workflow_id, stored in claimed.items()
        ]
        try:
            async with self._db.transaction() as conn:
                await conn.execute(sa.insert(workflow_state), values)
        except Exception:
            logger.exception("could not put back %d workflow state(s)", len(values))


_NOT_YOURS = "This workflow belongs to another caller"
_EXPIRED = "Unknown or expired workflow: nothing was captured"


def _answer(trace: object, status: str, **extra: Any) -> dict[str, Any]:
    answer: dict[str, Any] = {"status": status}
    if isinstance(trace, IncomingTrace):
        answer = {"traceId": trace.traceId, "workflowId": trace.workflowId, **answer}
    elif isinstance(trace, dict):
        given = cast(dict[str, object], trace)
        for key in ("traceId", "workflowId"):
            value = given.get(key)
            if isinstance(value, str) and len(value) <= 64:
                answer[key] = scrub_text(value)
    answer.update({k: v for k, v in extra.items() if v is not None})
    return answer


def _first_problem(error: ValidationError) -> str:
    problem = error.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part) for part in problem["loc"]) or "trace"
    return f"Invalid trace: {where}: {problem['msg']}"


def _tasks(trace: IncomingTrace) -> list[dict[str, Any]]:
    """Each call as a trace row keeps it, scrubbed (NUL and surrogates made safe too)."""
    tasks = [task.model_dump(exclude_none=True) for task in trace.taskResults]
    kept = cast(list[object], scrub(tasks))
    return [cast(dict[str, Any], task) for task in kept if isinstance(task, dict)]


def _row(report: RunReport, fqdn: str | None, trace: IncomingTrace) -> TraceRow:
    row = report.trace_row(fqdn or "")
    error = None if trace.error is None else scrub_text(trace.error)[:MAX_ERROR_CHARS]
    duration = trace.durationMs if math.isfinite(trace.durationMs) else 0.0
    return TraceRow(
        id=row.id,
        org=row.org,
        project=row.project,
        user_id=row.user_id,
        intent=row.intent,
        capability_fqdn=fqdn,
        success=trace.success,
        error=error,
        duration_ms=duration,
        task_results=row.task_results,
        created_at=datetime.now(UTC),
        workflow_id=trace.workflowId,
    )
