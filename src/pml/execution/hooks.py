"""Post-hooks: what happens after the executor, never inside it (SPEC §10.5).

    hooks = PostHooks([CaptureHook(capture), UsageHook(recorder), AuditHook(),
                       CleanupHook(grants, workflows)], auditor=audit_log)
    await hooks.run(finished)        # finished: FinishedRun of one pml_execute request

The executor only runs code and records what it did (``Budget``: trace, call log, journal).
Then, in order: ``capture`` turns a successful direct run into a capability (its failure,
e.g. a name taken meanwhile, is the request's failure — except the project's capability
quota: the run's result is answered, with ``notSaved`` saying why nothing was stored);
``usage`` writes the capability usage counts (a failure held against a capability only
when it is its own: ``reliability.counts_against``; a failed snippet counts for the
capability whose current code it is) and ``tool_usage`` rows of every call that was
really sent; ``audit`` writes
``EXECUTOR_RESPONSE``; ``cleanup`` purges expired grants and workflow states (at most once a
minute). A hook that fails is logged and audited (``POSTHOOK_FAILED``) and the others run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pml.analysis.snippet import SnippetAnalysis
from pml.errors import LimitExceeded, PmlError
from pml.execution.caller import Budget
from pml.execution.capture import CaptureService, RunReport
from pml.execution.recorder import UsageRecorder
from pml.policy.enforcer import PolicyEnforcer, RequestPolicy
from pml.registry.models import CapabilityRecord
from pml.registry.reliability import counts_against
from pml.registry.routing import Routing
from pml.registry.scope import Scope
from pml.sandbox.base import RunOutcome
from pml.storage.capability_repo import CodeOwner
from pml.storage.usage_repo import CAPABILITY_SERVER_ID

logger = logging.getLogger(__name__)

CLEANUP_INTERVAL_S = 60.0
QUOTA_LIMIT = "capabilities_per_project"  # the ``limit`` of a capture the quota refused


@dataclass(slots=True)
class FinishedRun:
    """One request's run as the post-hooks see it."""

    scope: Scope
    request: RequestPolicy | None
    budget: Budget
    duration_ms: float
    error: PmlError | None = None
    # Direct mode: what to capture (None for a failed run or a run by name).
    report: RunReport | None = None
    name: str | None = None
    routing: Routing | None = None
    update: bool = False
    version_tag: str | None = None
    # By name: the capability that ran (its own usage is counted).
    capability_fqdn: str | None = None
    # Direct mode: the snippet (a failed run counts for the capability with its code, if any)
    code: SnippetAnalysis | None = None
    # Set by the capture hook.
    captured: CapabilityRecord | CodeOwner | None = None
    created: bool = False
    # Set instead when the project's capability quota refused the capture (nothing saved).
    not_saved: LimitExceeded | None = None
    not_saved_routing: Routing | None = None
    # By name: the request as it would resume (``mode``, and the ``intent`` it stated).
    resume: dict[str, Any] | None = None
    notes: dict[str, Any] = field(default_factory=dict[str, Any])

    @property
    def success(self) -> bool:
        return self.error is None


class PostHook(Protocol):
    """One side effect after a run."""

    name: str
    required: bool  # a required hook's failure is the request's failure

    async def __call__(self, run: FinishedRun) -> None: ...


class PostHooks:
    """Runs the registered hooks in order after each run."""

    def __init__(self, hooks: Sequence[PostHook], *, policy: PolicyEnforcer | None) -> None:
        self._hooks = list(hooks)
        self._policy = policy

    def register(self, hook: PostHook) -> None:
        self._hooks.append(hook)

    async def run(self, run: FinishedRun) -> None:
        for hook in self._hooks:
            try:
                await hook(run)
            except PmlError as error:
                self._failed(run, hook, error.code)
                if hook.required:
                    raise
            except Exception:
                logger.exception("post-hook %s failed", hook.name)
                self._failed(run, hook, "INTERNAL_ERROR")
                if hook.required:
                    raise

    def _failed(self, run: FinishedRun, hook: PostHook, code: str) -> None:
        if self._policy is not None and run.request is not None:
            self._policy.emit(run.request, "POSTHOOK_FAILED", {"hook": hook.name, "code": code})


class CaptureHook:
    """A successful direct run becomes (or counts for) a capability; a successful run by
    name in ``pml_execute`` remembers the intent it stated."""

    name = "capture"
    required = True

    def __init__(self, capture: CaptureService, policy: PolicyEnforcer | None) -> None:
        self._capture = capture
        self._policy = policy

    async def __call__(self, run: FinishedRun) -> None:
        report = run.report
        stated = run.resume or {}
        if run.capability_fqdn is not None and run.success and stated.get("mode") == "execute":
            # pml_execute by name: the intent it stated (a tool call states none)
            self._capture.remember(run.scope, run.capability_fqdn, stated.get("intent"), "call")
        if report is None or not run.success:
            return
        if run.update:
            assert run.name is not None
            run.captured = await self._capture.new_version(
                report, run.name, run.routing, version_tag=run.version_tag
            )
            event = "CAPABILITY_VERSIONED"
        else:
            try:
                run.captured, run.created = await self._capture.capture(
                    report, run.name, run.routing
                )
            except LimitExceeded as error:
                if error.data.get("limit") != QUOTA_LIMIT:
                    raise
                self._not_saved(run, report, error)
                return
            event = "CAPABILITY_CREATED" if run.created else None
        if self._policy is None or run.request is None:
            return
        fqdn = run.captured.fqdn
        self._policy.emit(
            run.request, "POSTHOOK_CAPTURE", {"capability": fqdn, "created": run.created}
        )
        if event is not None:
            self._policy.emit(run.request, event, {"capability": fqdn, "intent": report.intent})

    def _not_saved(self, run: FinishedRun, report: RunReport, error: LimitExceeded) -> None:
        """The project is at its capability quota: the run's result stands, unsaved."""
        run.not_saved = error
        run.not_saved_routing = self._capture.not_saved(report, run.routing)
        if self._policy is not None and run.request is not None:
            details = {"capability": None, "created": False, "not_saved": error.code}
            self._policy.emit(run.request, "POSTHOOK_CAPTURE", details | error.data)


def not_saved_answer(
    outcome: RunOutcome, budget: Budget, run: FinishedRun, *, ms: float
) -> dict[str, Any]:
    """The success answer of a run whose capture the project's quota refused: its result,
    ``capabilityId``/``capabilityName``/``capabilityFqdn`` null, and ``notSaved`` saying why."""
    assert run.not_saved is not None
    return {
        "status": "success",
        "result": outcome.value,
        "logs": list(outcome.logs),
        "toolsUsed": list(budget.tools_used),
        "capabilityId": None,
        "capabilityName": None,
        "capabilityFqdn": None,
        "created": False,
        "routing": run.not_saved_routing or "local",
        "executionTimeMs": round(ms, 3),
        "notSaved": run.not_saved.to_dict(),
    }


class UsageHook:
    """Usage counts and ``tool_usage`` rows of every call really sent (replays excluded)."""

    name = "usage"
    required = False

    def __init__(self, recorder: UsageRecorder, policy: PolicyEnforcer | None = None) -> None:
        self._recorder = recorder
        self._policy = policy

    async def __call__(self, run: FinishedRun) -> None:
        recorder, scope = self._recorder, run.scope
        replayed = sum(1 for call in run.budget.call_log if call.replayed)
        if self._policy is not None and run.request is not None:
            counted = {"calls": len(run.budget.call_log) - replayed, "replayed": replayed}
            self._policy.emit(run.request, "POSTHOOK_USAGE", counted)
        for call in run.budget.call_log:
            if call.replayed:
                continue
            if call.kind == "capability":
                recorder.count(
                    call.name, success=call.success, latency_ms=call.latency_ms, judged=call.judged
                )
                server_id = CAPABILITY_SERVER_ID
            else:
                server_id = call.server
            recorder.tool_call(
                scope, server_id, call.name, latency_ms=call.latency_ms, success=call.success
            )
        error = run.error.code if run.error is not None else None
        if run.code is not None and error is not None and counts_against(error):
            # the snippet is the current code of a capability (if any): a failed run of it
            recorder.count_code(
                scope, run.code.code_hash, success=False, latency_ms=run.duration_ms
            )
        if run.capability_fqdn is not None:
            fqdn, judged = run.capability_fqdn, counts_against(error)
            recorder.count(fqdn, success=run.success, latency_ms=run.duration_ms, judged=judged)
            recorder.tool_call(
                scope,
                CAPABILITY_SERVER_ID,
                fqdn,
                latency_ms=run.duration_ms,
                success=run.success,
            )


class AuditHook:
    """``EXECUTOR_RESPONSE``: how the run ended."""

    name = "audit"
    required = False

    def __init__(self, policy: PolicyEnforcer) -> None:
        self._policy = policy

    async def __call__(self, run: FinishedRun) -> None:
        if run.request is None:
            return
        details: dict[str, Any] = {
            "status": "success" if run.success else "error",
            "tools_used": list(run.budget.tools_used),
            "tool_calls": run.budget.calls,
            "duration_ms": round(run.duration_ms, 3),
        }
        if run.error is not None:
            details["error"] = run.error.code
        if run.captured is not None:
            details["capability"] = run.captured.fqdn
        self._policy.emit(run.request, "EXECUTOR_RESPONSE", details)


Purge = Callable[[], Awaitable[int]]


class CleanupHook:
    """Expired grants and workflow states are purged, at most once per interval."""

    name = "cleanup"
    required = False

    def __init__(
        self,
        purges: dict[str, Purge],
        policy: PolicyEnforcer | None,
        *,
        interval_s: float = CLEANUP_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._purges = purges
        self._policy = policy
        self._interval_s = interval_s
        self._clock = clock
        self._last: float | None = None

    async def __call__(self, run: FinishedRun) -> None:
        now = self._clock()
        if self._last is not None and now - self._last < self._interval_s:
            return
        self._last = now
        purged = {name: await purge() for name, purge in self._purges.items()}
        if any(purged.values()) and self._policy is not None and run.request is not None:
            self._policy.emit(run.request, "POSTHOOK_CLEANUP", {"purged": purged})


def standard_hooks(
    capture: CaptureService,
    recorder: UsageRecorder,
    policy: PolicyEnforcer | None,
    extra: Sequence[PostHook] = (),
) -> PostHooks:
    """Capture, usage, audit (with a policy pipeline), then ``extra``, in that order."""
    standard: list[PostHook] = [CaptureHook(capture, policy), UsageHook(recorder, policy)]
    if policy is not None:
        standard.append(AuditHook(policy))
    return PostHooks([*standard, *extra], policy=policy)
