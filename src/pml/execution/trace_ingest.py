"""Traces from PML clients: how a client-routed workflow ends (SPEC §9.3–9.4).

    ingest = TraceIngest(db, capture, auditor=audit_log)
    results = await ingest.ingest(scope, [{"workflowId": "wf_…", "success": True,
                                           "durationMs": 12.5, "taskResults": [...]}])
    results[0]["status"]      # "captured" | "duplicate" | "expired" | "failed" | "rejected"
                              # or "pending": send it again after ``retryAfterS``

For each trace of a batch (at most ``MAX_TRACES``), in one pass over the database:

- malformed, or a workflow another caller owns, or not a client-routed workflow → ``rejected``
  (nothing changes);
- a workflow already reported (a trace row holds its id) or reported twice in the batch →
  ``duplicate`` (nothing new is created: the state was claimed once);
- no live state (unknown, or past its expiry) → ``expired``, logged — unless the trace is
  an *offline* run (the client ran code while the gateway was unreachable): its ``offline``
  object (code, intent, name, routing) is checked as a hand-off would be and learned;
- a workflow another request is capturing right now → ``pending`` with ``retryAfterS``: not
  final, the client sends it again (that request may die before it ends; its claim is taken
  over once its lease has passed, see ``trace_claims``);
- otherwise the state is claimed (only one request can claim it; ``trace_claims``) and: a
  failed run is recorded and creates nothing (``failed``); a successful one goes to the
  same capture service as direct mode — capability created or reused under the key's scope
  (a capability called by name counts a use) — and is ``captured``.

The capabilities of the batch's codes are read in one query, and up to
``CONCURRENT_CAPTURES`` traces are captured at once. Each processed trace is stored in
``execution_traces`` with its workflow id, in the transaction that deletes its state (what
makes a replay a ``duplicate``). Task results keep each call's tool, argument digest,
duration and success, scrubbed of secrets, within the limits below. If a capture fails
unexpectedly, the states not processed are put back and the error propagates."""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from pydantic import ValidationError

from pml.errors import InvalidInput, PmlError
from pml.execution.answers import analysis_of
from pml.execution.capture import CaptureService, RunReport
from pml.execution.clients import ClientCaller
from pml.execution.handoff import CLIENT_RUN_KIND, LearningContext, OfflineContexts
from pml.execution.trace_claims import CLAIM_LEASE_S, CLAIMED_KIND, StoredState, TraceClaims
from pml.execution.trace_rows import stored_row
from pml.execution.trace_wire import (
    MAX_TRACES,
    IncomingTrace,
    answer,
    first_problem,
    task_results,
)
from pml.policy.model import Auditor
from pml.registry.changes import INTENTS_CHANGED, UNNAMED_CAPTURE, CapabilityChange
from pml.registry.scope import Scope
from pml.storage.capability_repo import find_code_owners
from pml.storage.database import Database
from pml.storage.trace_repo import TraceRow
from pml.storage.types import utc_now
from pml.storage.workflow_repo import decoded_state
from pml.telemetry import metrics

logger = logging.getLogger(__name__)

OWNERS_TTL_S = 10.0
# The longest ``retryAfterS`` of a pending trace: in-flight requests usually end in ~1 s.
PENDING_RETRY_S = 5.0
OFFLINE_CLAIM_TTL_S = 3600.0  # an offline run's in-flight mark, if the process dies first
MAX_OWNER_SCOPES = 1000
_KEEPS_CODE_OWNERS = frozenset({UNNAMED_CAPTURE, INTENTS_CHANGED})
CONCURRENT_CAPTURES = 8  # traces of one batch captured at once (each waits on the database)


@dataclass(slots=True)
class _Batch:
    """One request's traces: who sent them, the hand-off states it claimed, the offline runs
    it marked, the rows to write, and the capabilities recently captured for that caller
    (by code hash: fqdn, display name)."""

    scope: Scope
    client: ClientCaller | None
    claimed: dict[str, StoredState]
    marked: set[str]
    rows: list[TraceRow]
    reused: dict[str, tuple[str, str]]
    new_codes: set[str] = field(default_factory=set[str])  # no capability had them


class TraceIngest:
    """Turns client traces into capabilities through the capture service."""

    def __init__(
        self,
        db: Database,
        capture: CaptureService,
        *,
        auditor: Auditor | None = None,
        offline: OfflineContexts | None = None,
        claim_lease_s: float = CLAIM_LEASE_S,
    ) -> None:
        self._db = db
        self._claims = TraceClaims(db, lease_s=claim_lease_s)
        self._capture = capture
        self._auditor = auditor
        self._offline = offline
        # The capability each recently captured code hash belongs to, per caller: a trace of
        # code already learned costs no lookup (forgotten every OWNERS_TTL_S, or when full).
        self._owners: dict[Scope, dict[str, tuple[str, str]]] = {}
        self._owners_since = time.monotonic()

    @property
    def offline(self) -> OfflineContexts | None:
        """How traces of runs made while offline are given their context (reload retunes it)."""
        return self._offline

    async def ingest(
        self, scope: Scope, items: Sequence[object], client: ClientCaller | None = None
    ) -> list[dict[str, Any]]:
        """One result per item, in order (``InvalidInput`` for more than ``MAX_TRACES``).

        ``client``: the PML client sending them (its servers are the ones an offline run
        could use)."""
        if len(items) > MAX_TRACES:
            raise InvalidInput(
                f"Too many traces: {len(items)} (max: {MAX_TRACES} per request)", field="traces"
            )
        self._forget_owners()
        results: list[dict[str, Any] | None] = [None] * len(items)
        valid: dict[int, IncomingTrace] = {}
        seen: set[str] = set()
        for index, raw in enumerate(items):
            try:
                trace = IncomingTrace.model_validate(raw)
            except ValidationError as error:
                results[index] = answer(raw, "rejected", message=first_problem(error))
                continue
            if trace.workflowId in seen:
                results[index] = answer(trace, "duplicate", message="Repeated in this batch")
            else:
                seen.add(trace.workflowId)
                valid[index] = trace
        states, reported = await self._claims.lookup(list(seen))
        owner, now = (scope.org, scope.project, scope.user), utc_now()  # now: the claims' token
        lease = self._claims.lease_s
        wanted: list[str] = []
        offline: list[str] = []
        for index, trace in valid.items():
            wid = trace.workflowId
            state = states.get(wid)
            if wid in reported:
                ours = reported[wid] == owner
                status = "duplicate" if ours else "rejected"
                results[index] = answer(trace, status, message=None if ours else _NOT_YOURS)
            elif state is None and trace.offline is not None and self._offline is not None:
                offline.append(wid)  # learned from the code it carries, below
            elif state is None or (state.owner == owner and state.expires_at <= now):
                logger.info("trace for an unknown or expired workflow %s", wid)
                results[index] = answer(trace, "expired", message=_EXPIRED)
            elif state.owner != owner:
                results[index] = answer(trace, "rejected", message=_NOT_YOURS)
            elif state.kind == CLAIMED_KIND and (left := state.lease_left(now, lease)):
                results[index] = _pending(trace, left)
            elif state.kind == CLAIMED_KIND and not decoded_state(state.state):
                # an offline run's mark, left by a request that died: learned from the trace
                target = offline if trace.offline is not None and self._offline else wanted
                target.append(wid)
            elif state.kind not in (CLIENT_RUN_KIND, CLAIMED_KIND):
                results[index] = answer(trace, "rejected", message="Not a client-routed workflow")
            else:
                wanted.append(wid)
        claimed = await self._claims.claim(scope, wanted, now)
        marked = await self._claims.claim_new(scope, offline, now, ttl_s=OFFLINE_CLAIM_TTL_S)
        rows: list[TraceRow] = []
        reused = self._owners.setdefault(scope, {})
        batch = _Batch(scope, client, claimed, set(marked), rows, reused)
        to_process = [(i, t) for i, t in valid.items() if results[i] is None]
        processed: set[int] = set()
        written = set[str]()
        limiter = anyio.CapacityLimiter(CONCURRENT_CAPTURES)

        contexts: dict[int, LearningContext] = {}

        async def process(index: int, trace: IncomingTrace) -> None:
            async with limiter:
                results[index] = await self._process(batch, trace, contexts[index])
                processed.add(index)

        try:
            for index, trace in to_process:
                found = await self._context(batch, trace)
                if isinstance(found, dict):
                    results[index] = found
                    processed.add(index)
                else:
                    contexts[index] = found
            await self._look_up_codes(batch, contexts.values())
            # A few traces at once: each capture waits on the database, not on the others.
            try:
                async with anyio.create_task_group() as tasks:
                    for index, trace in to_process:
                        if index in contexts:
                            tasks.start_soon(process, index, trace)
            except ExceptionGroup as group:  # the first failure, as a sequential loop had it
                raise group.exceptions[0] from None
        finally:
            ours = claimed.keys() | marked.keys()
            done = [t.workflowId for i, t in to_process if i in processed and t.workflowId in ours]
            left = [t.workflowId for i, t in to_process if i not in processed]
            with anyio.CancelScope(shield=True):  # a cancelled request still ends its claims
                await self._claims.release(scope, [w for w in left if w in claimed], now)
                await self._claims.drop(scope, [w for w in left if w in marked], now)
                written = await self._claims.finish(scope, rows, done, now)
        for index, trace in to_process:
            if index not in processed:
                continue
            if trace.workflowId in ours and trace.workflowId not in written:
                results[index] = _pending(trace, PENDING_RETRY_S)  # ended by its new claimer
        final = [result for result in results if result is not None]
        metrics.count_traces(str(result.get("status")) for result in final)
        return final

    async def capability_changed(self, change: CapabilityChange) -> None:
        """A ``registry.on_change`` listener: forget the code hashes remembered for a
        capability that was renamed or given new code (they may lead elsewhere now). New
        unnamed code and new intents lead nowhere else: nothing to forget (and each would
        cost a walk of every remembered code under a stream of new code)."""
        if change.kind not in _KEEPS_CODE_OWNERS:
            self._forget(change.fqdn)

    def _forget(self, fqdn: str) -> None:
        for owners in self._owners.values():
            for code_hash in [h for h, (owner, _) in owners.items() if owner == fqdn]:
                del owners[code_hash]

    def _forget_owners(self) -> None:
        now = time.monotonic()
        if now - self._owners_since > OWNERS_TTL_S or len(self._owners) > MAX_OWNER_SCOPES:
            self._owners, self._owners_since = {}, now

    async def _look_up_codes(self, batch: _Batch, contexts: Iterable[LearningContext]) -> None:
        """One read for the capabilities of every code the batch would capture unnamed: known
        ones count a use with no lookup of their own, new ones skip theirs."""
        wanted: set[str] = set()
        for context in contexts:
            if context.mode != "capability" and context.name is None and not context.update:
                try:
                    size = max(1, len(context.code.encode()))
                    analysis = await analysis_of(context.code, size, batch.scope.tenant)
                except PmlError:  # rejected when the trace is processed
                    continue
                if analysis.code_hash not in batch.reused:
                    wanted.add(analysis.code_hash)
        if not wanted:
            return
        scope = batch.scope
        owners = await find_code_owners(self._db, scope.org, scope.project, sorted(wanted))
        for code_hash, owner in owners.items():
            batch.reused[code_hash] = (owner.fqdn, owner.display_name)
        batch.new_codes.update(wanted - owners.keys())

    async def _context(
        self, batch: _Batch, trace: IncomingTrace
    ) -> dict[str, Any] | LearningContext:
        """The learning context of a trace whose workflow this request claimed (or of an
        offline run), or its final answer when there is none."""
        scope = batch.scope
        stored = batch.claimed.get(trace.workflowId)
        if stored is not None:
            context = LearningContext.from_state(decoded_state(stored.state) or {})
            if context is None:
                logger.warning("workflow %s holds no learning context", trace.workflowId)
                return answer(trace, "rejected", message="The workflow holds no context")
        elif trace.offline is not None and trace.workflowId in batch.marked:
            assert self._offline is not None
            try:
                offline = trace.offline.model_dump(exclude_none=True)
                context = await self._offline.build(scope, batch.client, offline)
            except PmlError as error:
                logger.warning("offline run %s not learned: %s", trace.workflowId, error.message)
                return answer(trace, "rejected", message=error.message)
        else:  # another request claimed it first
            return _pending(trace, PENDING_RETRY_S)
        return context

    async def _process(
        self, batch: _Batch, trace: IncomingTrace, context: LearningContext
    ) -> dict[str, Any]:
        """Capture (or count) one successful run; record a failed one."""
        scope, rows = batch.scope, batch.rows
        tasks = task_results(trace)
        allowed = {target.address for target in context.targets.values()}
        called = tuple(dict.fromkeys(t["tool"] for t in tasks if t["tool"] in allowed))
        try:  # code accepted before an upgrade may be refused by today's analysis
            size = max(1, len(context.code.encode()))
            analysis = await analysis_of(context.code, size, scope.tenant)
        except PmlError as error:
            logger.warning("trace of %s not captured: %s", trace.workflowId, error.message)
            return answer(trace, "rejected", message=error.message)
        report = RunReport(
            scope=scope,
            intent=_UNSTORABLE.sub("\ufffd", context.intent),  # a hand-off's intent may hold NUL
            analysis=analysis,
            plan=context.plan,
            called=called,
            task_results=tasks,
            duration_ms=trace.durationMs,
            workflow_id=trace.workflowId,
        )
        if context.mode == "capability" or not trace.success:
            return self._counted(trace, report, context, rows)
        known = batch.reused.get(analysis.code_hash)
        if known is not None and context.name is None and not context.update:
            # This batch already captured the same code: one more use, no second lookup.
            self._capture.count_use(known[0], success=True, latency_ms=trace.durationMs)
            self._capture.remember(scope, known[0], report.intent, "reuse")
            rows.append(stored_row(report, known[0], trace))
            return answer(trace, "captured", created=False, capabilityFqdn=known[0],
                          capabilityName=known[1])  # fmt: skip
        try:
            routing = "cloud" if context.routing == "cloud" else None
            if context.update and context.name is not None:
                record = await self._capture.new_version(
                    report,
                    context.name,
                    routing,
                    record_trace=False,
                    version_tag=context.version_tag,
                )
                self._forget(record.fqdn)  # its former code belongs to no capability now
                created = False
            else:
                new = analysis.code_hash in batch.new_codes and context.name is None
                record, created = await self._capture.capture(
                    report, context.name, routing, record_trace=False, known_new=new
                )
        except PmlError as error:  # e.g. the name was taken meanwhile: recorded, not learned
            rows.append(stored_row(report, None, trace))
            logger.warning("trace of %s not captured: %s", trace.workflowId, error.message)
            return answer(trace, "rejected", message=error.message)
        rows.append(stored_row(report, record.fqdn, trace))
        if context.name is None and not context.update:
            batch.reused[analysis.code_hash] = (record.fqdn, record.display_name)
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
        return answer(trace, "captured", created=created, **extra)

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
        elif not trace.success:  # a failed snippet: it counts against the code's capability
            code_hash = report.analysis.code_hash
            self._capture.count_code_use(
                report.scope, code_hash, success=False, latency_ms=trace.durationMs
            )
        rows.append(stored_row(report, fqdn, trace))
        if not trace.success:
            return answer(trace, "failed")
        return answer(trace, "captured", created=False, capabilityFqdn=fqdn)


_NOT_YOURS = "This workflow belongs to another caller"
_IN_FLIGHT = "Another request is capturing this workflow; send the trace again later"


def _pending(trace: IncomingTrace, lease_left_s: float) -> dict[str, Any]:
    """Not final: the trace is sent again after ``retryAfterS`` (and is then a duplicate,
    or captured by this server if the request holding it died)."""
    retry = max(1, math.ceil(min(lease_left_s, PENDING_RETRY_S)))
    return answer(trace, "pending", message=_IN_FLIGHT, retryAfterS=retry)


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")  # PostgreSQL and UTF-8 refuse these
_EXPIRED = "Unknown or expired workflow: nothing was captured"
