"""``pml_execute``: run a snippet or a capability, and learn from every run that works.

    service = ExecuteService(registry=registry, pool=pool, engine=engine, db=db, ...)
    answer = await service.execute(scope, ExecuteParams(intent="read a.json", code=code))

Every request is first classified and given its policy decision (SPEC §10). Direct mode:
analyse (size, syntax, references) → check the name → refuse what the policy forbids
(before anything runs) → run in the sandbox, each tool call passing the enforcer → post-
hooks (capture, usage, audit, clean-up). Call by name: resolve → policy → merge the
arguments over the schema defaults → validate → run the stored code → post-hooks. A run
that reaches a call needing approval pauses (``approval_required``) and resumes with
``continue_workflow``. Neither: ranked suggestions. A run that fails raises its
``PmlError`` and stores nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from pml.analysis.snippet import SnippetAnalysis
from pml.config import SandboxSettings
from pml.discovery.base import Discoverer
from pml.errors import (
    ApprovalRequired,
    ClientToolsRequireClient,
    InvalidInput,
    NotAvailable,
    NotFound,
    PmlError,
    UnknownTool,
)
from pml.execution import answers
from pml.execution.approvals import ApprovalFlow
from pml.execution.caller import Budget, CallerFaultError, RunCaller
from pml.execution.capture import CaptureService, RunReport
from pml.execution.clients import HOW_TO_CONNECT, ClientCaller, current_client
from pml.execution.handoff import ClientHandoff
from pml.execution.hooks import FinishedRun, PostHook, not_saved_answer, standard_hooks
from pml.execution.journal import Journal
from pml.execution.recorder import UsageRecorder
from pml.execution.references import Plan, plan_references, upstream_tools
from pml.execution.refusals import audit_refusal, pause_or_refuse
from pml.execution.registry_calls import SnippetRegistryTools
from pml.execution.suggest import suggestions
from pml.execution.values import check_args, merged_args
from pml.gateway.schemas import ExecuteParams
from pml.policy.enforcer import PolicyEnforcer, RequestPolicy
from pml.registry.fqdn import message_value
from pml.registry.models import Resolved, RoutingRules
from pml.registry.scope import Scope
from pml.registry.service import CapabilityRegistry
from pml.sandbox.base import RunOutcome, SandboxEngine, SnippetToolError
from pml.storage.database import Database
from pml.telemetry import observe
from pml.upstream.base import UpstreamPool

logger = logging.getLogger(__name__)


class ExecuteService:
    """The three modes of ``pml_execute`` for any caller scope."""

    def __init__(
        self,
        *,
        registry: CapabilityRegistry,
        pool: UpstreamPool,
        engine: SandboxEngine,
        db: Database,
        recorder: UsageRecorder,
        limits: SandboxSettings,
        discovery: Discoverer,
        policy: PolicyEnforcer | None = None,
        approvals: ApprovalFlow | None = None,
        hooks: Sequence[PostHook] = (),
        handoff: ClientHandoff | None = None,
    ) -> None:
        self._registry = registry
        self._handoff = handoff
        self._discovery = discovery
        self._pool = pool
        self._engine = engine
        self._db = db
        self._limits = limits
        self._recorder = recorder
        self._policy = policy
        self._approvals = approvals
        self._hooks = standard_hooks(CaptureService(registry, recorder), recorder, policy, hooks)

    def reconfigure(
        self, limits: SandboxSettings, *, routing: RoutingRules, workflow_ttl_s: float
    ) -> None:
        """A reload's ``[sandbox]`` limits and ``[routing]``, from the next run on."""
        self._limits = limits
        if self._handoff is not None:
            self._handoff.routing, self._handoff.ttl_s = routing, workflow_ttl_s

    async def flush(self) -> None:
        """Write the queued usage counts and traces now."""
        await self._recorder.flush()

    async def execute(self, scope: Scope, params: ExecuteParams) -> dict[str, Any]:
        """The ``pml_execute`` answer (SPEC §5); a failure raises its ``PmlError``."""
        with observe.step("execute", mode=answers.mode_of(params)) as step:
            answer = await self._execute(scope, params)
            step.outcome = str(answer.get("status", "ok"))
            return answer

    async def _execute(self, scope: Scope, params: ExecuteParams) -> dict[str, Any]:
        if params.continue_workflow is not None:
            return await self._continue(scope, params)
        if params.code is None and params.capability is None:
            found = await suggestions(params.intent, scope=scope, discovery=self._discovery)
            return {"status": "suggestions", "suggestions": found}
        request = await self._begin(scope, params.intent, "pml_execute")
        stored = answers.stored_request(params)
        resume = {"mode": "execute", "intent": params.intent, "params": stored}
        return await self._dispatch(scope, params, request, Journal(), resume)

    async def run_capability(self, scope: Scope, ref: str, args: dict[str, Any]) -> dict[str, Any]:
        """A named capability called as an MCP tool: the by-name path, named ones only.

        Its policy is decided from the capability's stored intent."""
        with observe.step("execute", mode="capability_tool") as step:
            resolved = await self._registry.resolve(scope, ref)
            intent = resolved.record.intent or resolved.record.display_name
            request = await self._begin(scope, intent, "capability_tool")
            resume = {"mode": "tool", "intent": intent, "ref": ref, "args": args}
            answer = await self._by_name(
                scope, ref, args, self._limits, request, Journal(), resume, named_only=True
            )
            step.outcome = str(answer.get("status", "ok"))
            return answer

    async def _begin(self, scope: Scope, intent: str, source: str) -> RequestPolicy | None:
        if self._policy is None:
            return None
        return await self._policy.begin(scope, intent, source=source)

    async def _dispatch(
        self,
        scope: Scope,
        params: ExecuteParams,
        request: RequestPolicy | None,
        journal: Journal,
        resume: dict[str, Any],
    ) -> dict[str, Any]:
        if params.code is not None:
            return await self._direct(scope, params, params.code, request, journal, resume)
        assert params.capability is not None
        limits = answers.limits_for(self._limits, params)
        return await self._by_name(
            scope, params.capability, params.args or {}, limits, request, journal, resume
        )

    # -- approvals -------------------------------------------------------------------------

    async def _continue(self, scope: Scope, params: ExecuteParams) -> dict[str, Any]:
        """Resume a run that waited for approval (or end it, refused)."""
        answer = params.continue_workflow
        assert answer is not None
        if self._approvals is None or self._policy is None:
            raise NotAvailable("continue_workflow is not available in this gateway")
        request = await self._policy.begin(scope, params.intent, source="continue_workflow")
        outcome = await self._approvals.resume(
            scope, request, answer.workflow_id, approved=answer.approved, grant=answer.grant
        )
        if isinstance(outcome, dict):  # nobody has decided yet: still waiting
            return outcome
        resume, journal = outcome
        intent = str(resume.get("intent") or params.intent)
        if resume.get("mode") == "tool":
            ref, args = str(resume.get("ref")), resume.get("args")
            rerun = await self._policy.begin(scope, intent, source="capability_tool")
            return await self._by_name(
                scope,
                ref,
                dict(args) if isinstance(args, dict) else {},  # pyright: ignore[reportUnknownArgumentType]
                self._limits,
                rerun,
                journal,
                resume,
                named_only=True,
            )
        original = ExecuteParams.model_validate(resume.get("params"))
        rerun = await self._policy.begin(scope, intent, source="pml_execute")
        return await self._dispatch(scope, original, rerun, journal, resume)

    async def _check_static(
        self, scope: Scope, request: RequestPolicy | None, plan: Plan | None, used: list[str]
    ) -> None:
        """Refuse before running when the code names a tool the policy forbids."""
        if self._policy is not None and request is not None:
            tools = await upstream_tools(scope, self._registry, plan, used)
            self._policy.check_static(request, tools)

    # -- direct ----------------------------------------------------------------------------

    async def _direct(
        self,
        scope: Scope,
        params: ExecuteParams,
        code: str,
        request: RequestPolicy | None,
        journal: Journal,
        resume: dict[str, Any],
    ) -> dict[str, Any]:
        started = time.perf_counter()
        limits = answers.limits_for(self._limits, params)
        try:
            analysis = await answers.analysis_of(code, limits.max_code_bytes, scope.tenant)
            if params.update:
                if params.name is None:
                    raise InvalidInput(
                        "update: true needs the name of the capability", field="name"
                    )
                await self._registry.resolve(scope, params.name)  # NOT_FOUND before running
            elif params.name is not None:
                await self._registry.check_name_before_run(scope, params.name, analysis.code_hash)
            plan = await self._plan(scope, analysis, client=current_client())
            await self._check_static(scope, request, plan, [])
        except PmlError as error:
            audit_refusal(self._policy, request, error)
            raise
        if plan.client_tools and self._handoff is not None:
            return await self._handoff.direct(scope, params, analysis, plan, request)
        budget = Budget.start(limits, request=request, journal=journal)
        finished = FinishedRun(scope, request, budget, 0.0, name=params.name, code=analysis)
        try:
            outcome = await self._run(scope, code, params.args or {}, plan, budget, ())
        except ApprovalRequired as waiting:
            await self._finish(finished, started, waiting)
            return await pause_or_refuse(self._approvals, scope, request, waiting, budget, resume)
        except PmlError as error:
            await self._finish(finished, started, error)
            raise
        finished.report = RunReport(
            scope=scope,
            intent=params.intent,
            analysis=analysis,
            plan=plan,
            called=tuple(budget.tools_used),
            task_results=budget.trace,
            duration_ms=(time.perf_counter() - started) * 1000,
        )
        finished.routing, finished.update = params.routing, params.update
        finished.version_tag = params.version_tag
        elapsed_ms = await self._finish(finished, started, None)
        record = finished.captured
        if record is None:  # the project's capability quota refused the capture
            return not_saved_answer(outcome, budget, finished, ms=elapsed_ms)
        answer = answers.success_answer(
            outcome, budget, record, created=finished.created, routing=record.routing, ms=elapsed_ms
        )
        return {**answer, **plan.notice()}  # canonicalSpellings, when a name was respelled

    async def _finish(self, finished: FinishedRun, started: float, error: PmlError | None) -> float:
        """Run the post-hooks; the run's duration in milliseconds."""
        if finished.report is not None:
            finished.duration_ms = finished.report.duration_ms
        else:
            finished.duration_ms = (time.perf_counter() - started) * 1000
        finished.error = error
        await self._hooks.run(finished)
        return finished.duration_ms

    # -- by name ---------------------------------------------------------------------------

    async def _by_name(
        self,
        scope: Scope,
        name: str,
        args: dict[str, Any],
        limits: SandboxSettings,
        request: RequestPolicy | None,
        journal: Journal,
        resume: dict[str, Any],
        *,
        named_only: bool = False,
    ) -> dict[str, Any]:
        started = time.perf_counter()
        resolved = await self._registry.resolve(scope, name)
        if named_only and not (
            resolved.record.named and resolved.record.record_type == "capability"
        ):
            raise NotFound(f"Capability not found: {message_value(name)}")
        await self._check_static(scope, request, None, resolved.version.tools_used)
        client = current_client()
        if client is not None and self._handoff is not None and resolved.version.code:
            plan = await self._stored_plan(scope, resolved, client)
            handed = await self._handoff.capability(scope, resolved, args, plan, request)
            if handed is not None:
                return handed
        budget = Budget.start(limits, request=request, journal=journal)
        finished = FinishedRun(scope, request, budget, 0.0, resume=resume)
        try:
            outcome = await self._run_resolved(scope, resolved, args, budget, ())
        except ApprovalRequired as waiting:
            await self._finish(finished, started, waiting)
            return await pause_or_refuse(self._approvals, scope, request, waiting, budget, resume)
        except PmlError as error:
            finished.capability_fqdn = resolved.record.fqdn
            await self._finish(finished, started, error)
            raise
        finished.capability_fqdn = resolved.record.fqdn
        elapsed_ms = await self._finish(finished, started, None)
        routing = resolved.version.routing
        answer = answers.success_answer(
            outcome, budget, resolved.record, created=False, routing=routing, ms=elapsed_ms
        )
        if resolved.deprecated_alias is not None:
            answer["deprecatedAlias"] = resolved.deprecated_alias
        return answer

    async def run_nested(
        self, scope: Scope, fqdn: str, args: dict[str, Any], budget: Budget, chain: tuple[str, ...]
    ) -> Any:
        """A capability called from a snippet: same limits and policy, its failures are the
        caller's ``ToolError`` (catchable), except limits, denials and approvals, which end
        the whole run. Its usage is counted by the post-hooks, from the call log."""
        resolved = await self._registry.resolve(scope, fqdn)
        try:
            outcome = await self._run_resolved(scope, resolved, args, budget, chain)
        except PmlError as error:
            if error.code in ("EXECUTION_FAILED", "TOOL_ERROR", "INVALID_ARGS"):
                fault = CallerFaultError if error.code == "INVALID_ARGS" else SnippetToolError
                raise fault(fqdn, error.message) from None  # arguments: not held against it
            raise
        return outcome.value

    async def _run_resolved(
        self,
        scope: Scope,
        resolved: Resolved,
        given: dict[str, Any],
        budget: Budget,
        chain: tuple[str, ...],
    ) -> RunOutcome:
        record, version = resolved.record, resolved.version
        if record.record_type != "capability" or not version.code:
            raise InvalidInput(
                f"'{record.display_name}' is an MCP server record, not a capability to run",
                field="capability",
            )
        schema = version.parameters_schema
        args = merged_args(schema, given)
        check_args(schema, args, capability=record.display_name)
        plan = await self._stored_plan(scope, resolved, None)
        return await self._run(scope, version.code, args, plan, budget, chain)

    async def _plan(
        self, scope: Scope, analysis: SnippetAnalysis, *, client: ClientCaller | None
    ) -> Plan:
        return await plan_references(
            analysis.calls,
            scope=scope,
            registry=self._registry,
            pool=self._pool,
            client=client if self._handoff is not None else None,
            routing=self._handoff.routing if self._handoff is not None else None,
            pml_tools=SnippetRegistryTools(self._registry, self._discovery),  # mcp.pml.<tool>
            start_wait_s=self._limits.wall_time_s,  # a server still starting is waited for
        )

    async def _stored_plan(
        self, scope: Scope, resolved: Resolved, client: ClientCaller | None
    ) -> Plan:
        code, fqdn, limit = resolved.version.code or "", resolved.record.fqdn, self._limits
        analysis = await answers.stored_analysis(code, fqdn, limit.max_code_bytes, scope.tenant)
        try:
            return await self._plan(scope, analysis, client=client)
        except UnknownTool as error:  # learned from a client's run: say where it can run
            if client is None and self._handoff is not None and resolved.version.routing == "local":
                where = f"{resolved.record.display_name} runs on the user's machine"
                raise ClientToolsRequireClient(f"{where}: {HOW_TO_CONNECT}", **error.data) from None
            raise

    async def _run(
        self,
        scope: Scope,
        code: str,
        args: dict[str, Any],
        plan: Plan,
        budget: Budget,
        chain: tuple[str, ...],
    ) -> RunOutcome:
        async def nested(
            fqdn: str, arguments: dict[str, Any], shared: Budget, path: tuple[str, ...]
        ) -> Any:
            return await self.run_nested(scope, fqdn, arguments, shared, path)

        caller = RunCaller(
            plan, budget, pool=self._pool, nested=nested, chain=chain, policy=self._policy
        )
        limits, tenant = budget.limits(), scope.tenant
        return await self._engine.run(code, args=args, caller=caller, limits=limits, tenant=tenant)
