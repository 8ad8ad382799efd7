"""The host side of a run's ``mcp`` bridge: the one ``ToolCaller`` every tool call passes.

    budget = Budget.start(limits, request=request_policy)
    caller = RunCaller(plan, budget, pool=pool, nested=service.run_nested, policy=enforcer)
    outcome = await engine.run(code, args=args, caller=caller, limits=budget.limits())
    budget.tools_used, budget.trace, budget.call_log

A call is allowed only to what the snippet names in its code (the ``Plan``): a call the
analysis did not see (``m = mcp; m.other.tool()``, ``getattr``) is refused. Every upstream
call, and every call of PML's own read-only tools (``mcp.pml.<tool>``, answered by the
plan's ``registry_tools``: see ``pml.execution.registry_calls``), then passes the policy
enforcer (gate, permission rules, grants; SPEC §10) before it is sent — in nested
capability runs too, which share the request's policy. A call the run's journal already
holds (a run resumed after approval) is answered from the journal, not sent again; results
are journaled only for runs under a policy (no other run can pause for approval). An
upstream result larger than ``max_tool_result_bytes`` ends the run with ``LIMIT_EXCEEDED``
naming the tool, before the journal or the snippet sees it. Every
call counts against one ``Budget`` shared by nested capability runs (tool calls and wall
time), and is traced (tool, digest of its arguments, duration, success) — never its
values. Usage rows are written afterwards, by a post-hook, from ``call_log``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pml.config import SandboxSettings
from pml.errors import (
    ApprovalRequired,
    ExecutionTimeout,
    LimitExceeded,
    PermissionDenied,
    PmlError,
    UnknownTool,
)
from pml.execution.journal import Journal
from pml.execution.references import Plan, Target
from pml.execution.registry_calls import NOT_ON_CLIENT
from pml.execution.values import (
    args_digest,
    raise_for_error,
    snippet_value,
    too_large_result,
)
from pml.policy.enforcer import PolicyEnforcer, RequestPolicy
from pml.registry.reliability import counts_against
from pml.sandbox.base import SnippetToolError, ToolRef
from pml.sandbox.jsonvalue import bounded_json_size
from pml.upstream.base import UpstreamPool

# A capability may call capabilities, but not without end.
MAX_NESTING = 8

NestedRun = Callable[[str, dict[str, Any], "Budget", tuple[str, ...]], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One call of a run, for the usage post-hook: an upstream tool or a capability."""

    kind: str  # "tool" | "capability"
    server: str  # the upstream server, or "" for a capability
    name: str  # the tool, or the capability's FQDN
    latency_ms: float
    success: bool
    replayed: bool = False
    judged: bool = True  # a failure that says something about the capability (reliability)


class CallerFaultError(SnippetToolError):
    """A nested capability refused by the caller's side (its arguments): the snippet sees a
    ``ToolError``, and the capability's recent runs do not count it as failed."""


def judged_failure(error: BaseException) -> bool:
    """Whether a nested capability's failure counts against it (``counts_against``)."""
    if isinstance(error, CallerFaultError):
        return False
    if isinstance(error, SnippetToolError):  # its own exception or tool error
        return True
    return isinstance(error, PmlError) and counts_against(error.code)


@dataclass(slots=True)
class Budget:
    """The limits, policy and journal one ``pml_execute`` shares with the capabilities it runs."""

    settings: SandboxSettings
    deadline: float
    request: RequestPolicy | None = None
    journal: Journal = field(default_factory=Journal)
    calls: int = 0
    tools_used: list[str] = field(default_factory=list[str])
    trace: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    call_log: list[CallRecord] = field(default_factory=list[CallRecord])

    @classmethod
    def start(
        cls,
        settings: SandboxSettings,
        *,
        request: RequestPolicy | None = None,
        journal: Journal | None = None,
    ) -> Budget:
        return cls(
            settings,
            time.monotonic() + settings.wall_time_s,
            request=request,
            journal=journal if journal is not None else Journal(),
        )

    def remaining_s(self) -> float:
        return self.deadline - time.monotonic()

    def limits(self) -> SandboxSettings:
        """The sandbox limits for the next run: what is left of time and tool calls."""
        left = self.remaining_s()
        if left <= 0:
            raise _timeout(self.settings)
        calls = max(1, self.settings.max_tool_calls - self.calls)
        return self.settings.model_copy(update={"wall_time_s": left, "max_tool_calls": calls})

    def count_call(self) -> None:
        if self.calls >= self.settings.max_tool_calls:
            raise LimitExceeded(
                f"Tool call limit exceeded: more than {self.settings.max_tool_calls} calls",
                limit="max_tool_calls",
                max=self.settings.max_tool_calls,
            )
        if self.remaining_s() <= 0:
            raise _timeout(self.settings)
        self.calls += 1

    def used(self, address: str) -> None:
        if address not in self.tools_used:
            self.tools_used.append(address)

    def record(self, address: str, digest: str, started: float, ok: bool) -> float:
        """Trace one finished call; returns its duration in milliseconds."""
        duration_ms = (time.perf_counter() - started) * 1000
        self.trace.append(
            {
                "tool": address,
                "argsDigest": digest,
                "durationMs": round(duration_ms, 3),
                "success": ok,
            }
        )
        return duration_ms


def _timeout(settings: SandboxSettings) -> ExecutionTimeout:
    return ExecutionTimeout(
        f"Execution exceeded the time limit of {settings.wall_time_s:g} s",
        limit="wall_time_s",
    )


class RunCaller:
    """``ToolCaller`` for one run (the top-level snippet, or one nested capability)."""

    def __init__(
        self,
        plan: Plan,
        budget: Budget,
        *,
        pool: UpstreamPool,
        nested: NestedRun,
        chain: tuple[str, ...] = (),
        policy: PolicyEnforcer | None = None,
    ) -> None:
        self._plan = plan
        self._budget = budget
        self._pool = pool
        self._nested = nested
        self._chain = chain
        self._policy = policy
        if policy is not None and budget.request is None:
            raise ValueError("a run under a policy needs the request's policy decision")

    async def call_tool(self, ref: ToolRef, arguments: dict[str, Any]) -> Any:
        target = self._plan.targets.get((ref.namespace, ref.name))
        if target is None:
            self._refused(ref)
        assert target is not None
        self._budget.count_call()
        if target.kind == "capability":
            return await self._capability(target, arguments)
        if target.in_gateway:
            return await self._registry_tool(target, arguments)
        return await self._tool(target, arguments)

    def _refused(self, ref: ToolRef) -> None:
        request = self._budget.request
        if self._policy is not None and request is not None:
            details = {"tool": str(ref), "rule": "not-named-in-code"}
            self._policy.emit(request, "PERMISSION_DENIED", details, "not-named-in-code")
        raise PermissionDenied(
            f"The snippet called {ref}, which its code does not name: write tool calls "
            'as mcp.<server>.<tool>(...) or mcp["<fqdn>"](...)',
            tool=str(ref),
        )

    async def _tool(self, target: Target, arguments: dict[str, Any]) -> Any:
        budget = self._budget
        address = target.address
        digest = args_digest(arguments)
        started = time.perf_counter()
        recorded = budget.journal.replay(address, digest)
        if recorded is not None:  # completed before the run paused: never sent twice
            budget.used(address)
            self._finished(target, digest, started, recorded.get("isError") is not True, True)
            raise_for_error(address, recorded)
            return snippet_value(recorded)
        policy, request = self._policy, budget.request
        if policy is not None and request is not None:
            await policy.authorize(request, target.server, target.tool, arguments)
            policy.tool_call_started(request, address)
        started = time.perf_counter()
        budget.used(address)
        try:
            result = await self._pool.call_tool_raw(
                target.server, target.tool, arguments, timeout_s=max(budget.remaining_s(), 0.001)
            )
        except PmlError:
            self._finished(target, digest, started, False, False)
            raise
        limit = budget.settings.max_tool_result_bytes
        size = bounded_json_size(result, limit)
        if size > limit:
            self._finished(target, digest, started, False, False)
            raise too_large_result(address, limit)
        if policy is not None:  # only a run under a policy can pause and be resumed
            budget.journal.record(address, digest, result, size=size)
        self._finished(target, digest, started, result.get("isError") is not True, False)
        raise_for_error(address, result)
        return snippet_value(result)

    async def _registry_tool(self, target: Target, arguments: dict[str, Any]) -> Any:
        """``mcp.pml.<tool>``: authorized and audited like an upstream call, answered by the
        gateway; traced, but no ``tool_usage`` row (as when called directly)."""
        tools = self._plan.registry_tools
        if tools is None:  # a plan made where PML's tools are not offered (a client's)
            raise UnknownTool(f"{target.address}: {NOT_ON_CLIENT}", unknown=[target.address])
        budget, address = self._budget, target.address
        policy, request = self._policy, budget.request
        if policy is not None and request is not None:
            await policy.authorize(request, target.server, target.tool, arguments)
            policy.tool_call_started(request, address)
        digest, started, ok = args_digest(arguments), time.perf_counter(), False
        budget.used(address)
        try:
            value = await tools.call(target.tool, arguments, timeout_s=budget.remaining_s())
            ok = True
        except TimeoutError:
            raise _timeout(budget.settings) from None
        finally:
            duration_ms = budget.record(address, digest, started, ok=ok)
            if policy is not None and request is not None:
                policy.tool_call_ended(
                    request, address, ok=ok, duration_ms=duration_ms, replayed=False
                )
        return value

    def _finished(
        self, target: Target, digest: str, started: float, ok: bool, replayed: bool
    ) -> None:
        budget = self._budget
        duration_ms = budget.record(target.address, digest, started, ok=ok)
        budget.call_log.append(
            CallRecord("tool", target.server, target.tool, duration_ms, ok, replayed)
        )
        if self._policy is not None and budget.request is not None:
            self._policy.tool_call_ended(
                budget.request, target.address, ok=ok, duration_ms=duration_ms, replayed=replayed
            )

    async def _capability(self, target: Target, arguments: dict[str, Any]) -> Any:
        if target.fqdn in self._chain:
            raise LimitExceeded(
                f"Capability {target.fqdn} calls itself (through {' -> '.join(self._chain)})",
                limit="nesting",
            )
        if len(self._chain) >= MAX_NESTING:
            raise LimitExceeded(
                f"Capabilities nested more than {MAX_NESTING} deep", limit="nesting"
            )
        budget = self._budget
        digest = args_digest(arguments)
        started = time.perf_counter()
        budget.used(target.fqdn)
        try:
            value = await self._nested(target.fqdn, arguments, budget, (*self._chain, target.fqdn))
        except BaseException as error:
            duration_ms = budget.record(target.fqdn, digest, started, ok=False)
            if not isinstance(error, ApprovalRequired):  # paused, not failed: not counted
                judged = judged_failure(error)
                budget.call_log.append(
                    CallRecord("capability", "", target.fqdn, duration_ms, False, judged=judged)
                )
            raise
        duration_ms = budget.record(target.fqdn, digest, started, ok=True)
        budget.call_log.append(CallRecord("capability", "", target.fqdn, duration_ms, True))
        return value
