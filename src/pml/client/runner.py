"""Running code the shared gateway handed back (``execute_locally``) on this machine.

    runner = LocalRunner(pool=pool, engine=engine, registry=registry, limits=settings.sandbox,
                         policy=enforcer, scope=scope)
    run = await runner.run(handoff)        # handoff: the gateway's execute_locally answer
    run.answer()                           # what the agent gets, at once
    run.trace()                            # what the trace syncer sends to the gateway

The code runs exactly as it would on the gateway: parsed and checked (size, syntax, the
tools it names must be this machine's servers), the static policy check, then the sandbox
with the same limits, every tool call through this machine's enforcement point (its
``[policy]`` and ``[permissions]``, its grants, its audit log). A call that needs approval
cannot wait here: it fails with ``PERMISSION_DENIED`` saying how to grant it on this
machine (``pml perms grant``). Calls to capabilities from client-run code are not
supported: capabilities run on the gateway.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from pml.config import SandboxSettings
from pml.errors import ApprovalRequired, InvalidInput, PermissionDenied, PmlError, UnknownTool
from pml.execution.answers import analysis_of
from pml.execution.caller import Budget, RunCaller
from pml.execution.references import plan_references, upstream_tools
from pml.policy.enforcer import PolicyEnforcer, refusal_data
from pml.registry.scope import Scope
from pml.registry.service import CapabilityRegistry
from pml.sandbox.base import SandboxEngine
from pml.upstream.base import UpstreamPool

CLIENT_SOURCE = "client_run"


@dataclass(slots=True)
class LocalRun:
    """One finished local run: its value or its error, and what it called."""

    workflow_id: str
    duration_ms: float
    value: Any = None
    logs: list[str] = field(default_factory=list[str])
    error: PmlError | None = None
    tools_used: list[str] = field(default_factory=list[str])
    task_results: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])

    @property
    def success(self) -> bool:
        return self.error is None

    def answer(self) -> dict[str, Any]:
        """The ``pml_execute`` answer the agent gets (the capability is captured later, on
        the gateway, when the trace arrives)."""
        common = {"workflowId": self.workflow_id, "routing": "local", "executedOn": "client"}
        if self.error is not None:
            return {"status": "error", "error": self.error.to_dict(), **common}
        return {
            "status": "success",
            "result": self.value,
            "logs": list(self.logs),
            "toolsUsed": list(self.tools_used),
            "executionTimeMs": round(self.duration_ms, 3),
            "capture": "queued",
            **common,
        }

    def trace(self) -> dict[str, Any]:
        """``{workflowId, success, error?, durationMs, taskResults}`` for the gateway."""
        trace: dict[str, Any] = {
            "workflowId": self.workflow_id,
            "success": self.success,
            "durationMs": round(self.duration_ms, 3),
            "taskResults": list(self.task_results),
        }
        if self.error is not None:
            trace["error"] = f"{self.error.code}: {self.error.message}"
        return trace


def handoff_fields(handoff: Mapping[str, Any]) -> tuple[str, str, dict[str, Any], str]:
    """``(workflowId, code, args, intent)`` of an ``execute_locally`` answer, checked."""
    workflow_id, code = handoff.get("workflowId"), handoff.get("code")
    args, intent = handoff.get("args", {}), handoff.get("intent", "")
    if not isinstance(workflow_id, str) or not workflow_id or len(workflow_id) > 64:
        raise InvalidInput("execute_locally without a valid workflowId", field="workflowId")
    if not isinstance(code, str):
        raise InvalidInput("execute_locally without code", field="code")
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise InvalidInput("execute_locally with args that are not an object", field="args")
    return workflow_id, code, cast(dict[str, Any], args), intent if isinstance(intent, str) else ""


class LocalRunner:
    """Runs handed-over code against this machine's upstream servers."""

    def __init__(
        self,
        *,
        pool: UpstreamPool,
        engine: SandboxEngine,
        registry: CapabilityRegistry,
        limits: SandboxSettings,
        scope: Scope,
        policy: PolicyEnforcer | None = None,
    ) -> None:
        self._pool = pool
        self._engine = engine
        self._registry = registry
        self._limits = limits
        self._scope = scope
        self._policy = policy

    async def run(self, handoff: Mapping[str, Any]) -> LocalRun:
        """Run the handed-over code; a failure is in ``LocalRun.error``, never raised.

        Only this machine's servers can be called: a reference to anything else (another
        server, a capability) is ``UNKNOWN_TOOL``."""
        started = time.perf_counter()
        workflow_id = ""  # until checked: a hostile one is never echoed or traced
        budget: Budget | None = None
        try:
            workflow_id, code, args, intent = handoff_fields(handoff)
            limits = self._limits_of(handoff)
            analysis = await analysis_of(code, limits.max_code_bytes)
            plan = await plan_references(
                analysis.calls,
                scope=self._scope,
                registry=self._registry,
                pool=self._pool,
                start_wait_s=limits.wall_time_s,  # a local server still starting is waited for
            )
            capabilities = [t.fqdn for t in plan.targets.values() if t.kind == "capability"]
            if capabilities:
                raise UnknownTool(
                    "Capabilities cannot be called from code run by pml connect: "
                    + ", ".join(capabilities),
                    unknown=capabilities,
                )
            request = None
            if self._policy is not None:
                request = await self._policy.begin(self._scope, intent, source=CLIENT_SOURCE)
                tools = await upstream_tools(self._scope, self._registry, plan, [])
                self._policy.check_static(request, tools)
            budget = Budget.start(limits, request=request)
            caller = RunCaller(
                plan, budget, pool=self._pool, nested=_no_nesting, policy=self._policy
            )
            outcome = await self._engine.run(code, args=args, caller=caller, limits=budget.limits())
        except ApprovalRequired as waiting:
            return self._finished(workflow_id, started, budget, error=_needs_grant(waiting))
        except PmlError as error:
            return self._finished(workflow_id, started, budget, error=error)
        run = self._finished(workflow_id, started, budget)
        run.value, run.logs = outcome.value, list(outcome.logs)
        return run

    def _limits_of(self, handoff: Mapping[str, Any]) -> SandboxSettings:
        timeout_ms = handoff.get("timeoutMs")
        if (
            isinstance(timeout_ms, int | float)
            and not isinstance(timeout_ms, bool)
            and timeout_ms > 0
        ):
            wall = min(self._limits.wall_time_s, float(timeout_ms) / 1000)
            return self._limits.model_copy(update={"wall_time_s": wall})
        return self._limits

    @staticmethod
    def _finished(
        workflow_id: str, started: float, budget: Budget | None, *, error: PmlError | None = None
    ) -> LocalRun:
        run = LocalRun(workflow_id, (time.perf_counter() - started) * 1000, error=error)
        if budget is not None:
            run.tools_used = list(budget.tools_used)
            run.task_results = list(budget.trace)
        return run


async def _no_nesting(
    fqdn: str, _arguments: dict[str, Any], _budget: Budget, _chain: tuple[str, ...]
) -> Any:
    raise UnknownTool(f"Capabilities cannot be called from code run by pml connect: {fqdn}")


def _needs_grant(waiting: ApprovalRequired) -> PermissionDenied:
    data = refusal_data(waiting)
    tool = data.get("tool") or "this tool"
    return PermissionDenied(
        f"{waiting.message}. pml connect cannot wait for an approval: allow {tool} on this "
        f"machine with `pml perms grant` (or an [permissions] allow rule in its pml.toml) "
        f"and run the code again",
        **data,
    )
