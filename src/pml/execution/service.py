"""``pml_execute``: run a snippet or a capability, and learn from every run that works.

    service = ExecuteService(registry=registry, pool=pool, engine=engine, db=db,
                             recorder=recorder, limits=settings.sandbox, discovery=discovery)
    answer = await service.execute(scope, ExecuteParams(intent="read a.json", code=code))
    answer["capabilityFqdn"], answer["created"], answer["result"]

Direct mode: analyse (size, syntax, references) → check the name → run in the sandbox →
capture (one capture service for every path that learns). Call by name: resolve → merge
the arguments over the schema defaults → validate → run the stored code → count the use.
Neither: ranked suggestions. A run that fails raises its ``PmlError`` and stores nothing.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

from pml.analysis.snippet import SnippetAnalysis, analyze_snippet
from pml.config import SandboxSettings
from pml.discovery.base import Discoverer
from pml.errors import ExecutionFailed, InvalidInput, NotFound, PmlError
from pml.execution.caller import Budget, RunCaller
from pml.execution.capture import CaptureService, RunReport
from pml.execution.recorder import UsageRecorder
from pml.execution.references import Plan, plan_references
from pml.execution.suggest import suggestions
from pml.execution.values import check_args, merged_args
from pml.gateway.schemas import ExecuteParams
from pml.registry import naming
from pml.registry.fqdn import message_value
from pml.registry.models import Resolved
from pml.registry.scope import Scope
from pml.registry.service import CapabilityRegistry
from pml.sandbox.base import RunOutcome, SandboxEngine, SnippetToolError
from pml.storage.database import Database
from pml.storage.usage_repo import CAPABILITY_SERVER_ID
from pml.upstream.base import UpstreamPool

logger = logging.getLogger(__name__)

ANALYSIS_CACHE_SIZE = 128


@functools.lru_cache(maxsize=ANALYSIS_CACHE_SIZE)
def _analysis(code: str, max_code_bytes: int) -> SnippetAnalysis:
    """Analyses are immutable: a snippet run again (or a capability called by name) reuses one.

    Only successes are cached (``lru_cache`` does not keep raised errors).
    """
    return analyze_snippet(code, max_code_bytes=max_code_bytes)


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
    ) -> None:
        self._registry = registry
        self._discovery = discovery
        self._pool = pool
        self._engine = engine
        self._db = db
        self._limits = limits
        self._recorder = recorder
        self._capture = CaptureService(registry, recorder)

    async def flush(self) -> None:
        """Write the queued usage counts and traces now."""
        await self._recorder.flush()

    async def execute(self, scope: Scope, params: ExecuteParams) -> dict[str, Any]:
        """The ``pml_execute`` answer (SPEC §5); a failure raises its ``PmlError``."""
        if params.code is not None:
            return await self._direct(scope, params, params.code)
        if params.capability is not None:
            limits = self._limits_for(params)
            return await self._by_name(scope, params.capability, params.args or {}, limits)
        found = await suggestions(params.intent, scope=scope, discovery=self._discovery)
        return {"status": "suggestions", "suggestions": found}

    # -- direct ----------------------------------------------------------------------------

    async def _direct(self, scope: Scope, params: ExecuteParams, code: str) -> dict[str, Any]:
        started = time.perf_counter()
        limits = self._limits_for(params)
        analysis = _analysis(code, limits.max_code_bytes)
        if params.update:
            if params.name is None:
                raise InvalidInput("update: true needs the name of the capability", field="name")
            await self._registry.resolve(scope, params.name)  # NOT_FOUND before running
        elif params.name is not None:
            await naming.check_name_before_run(self._db, scope, params.name, analysis.code_hash)
        plan = await plan_references(
            analysis.calls, scope=scope, registry=self._registry, pool=self._pool
        )
        budget = Budget.start(limits)
        outcome = await self._run(scope, code, params.args or {}, plan, budget, ())
        elapsed_ms = (time.perf_counter() - started) * 1000
        report = RunReport(
            scope=scope,
            intent=params.intent,
            analysis=analysis,
            plan=plan,
            budget=budget,
            duration_ms=elapsed_ms,
        )
        if params.update:
            assert params.name is not None
            record = await self._capture.new_version(report, params.name, params.routing)
            created = False
        else:
            record, created = await self._capture.capture(report, params.name, params.routing)
        return _success(
            outcome,
            budget,
            record.id,
            record.display_name,
            record.fqdn,
            created=created,
            routing=record.routing,
            elapsed_ms=elapsed_ms,
        )

    # -- by name ---------------------------------------------------------------------------

    async def run_capability(self, scope: Scope, ref: str, args: dict[str, Any]) -> dict[str, Any]:
        """A named capability called as an MCP tool: the by-name path, named ones only."""
        return await self._by_name(scope, ref, args, self._limits, named_only=True)

    async def _by_name(
        self,
        scope: Scope,
        name: str,
        args: dict[str, Any],
        limits: SandboxSettings,
        *,
        named_only: bool = False,
    ) -> dict[str, Any]:
        started = time.perf_counter()
        resolved = await self._registry.resolve(scope, name)
        if named_only and not (
            resolved.record.named and resolved.record.record_type == "capability"
        ):
            raise NotFound(f"Capability not found: {message_value(name)}")
        budget = Budget.start(limits)
        try:
            outcome = await self._run_resolved(scope, resolved, args, budget, ())
        except PmlError:
            self._count(scope, resolved, success=False, started=started)
            raise
        elapsed_ms = self._count(scope, resolved, success=True, started=started)
        record = resolved.record
        answer = _success(
            outcome,
            budget,
            record.id,
            record.display_name,
            record.fqdn,
            created=False,
            routing=resolved.version.routing,
            elapsed_ms=elapsed_ms,
        )
        if resolved.deprecated_alias is not None:
            answer["deprecatedAlias"] = resolved.deprecated_alias
        return answer

    async def run_nested(
        self, scope: Scope, fqdn: str, args: dict[str, Any], budget: Budget, chain: tuple[str, ...]
    ) -> Any:
        """A capability called from a snippet: same limits, its failures are the caller's
        ``ToolError`` (catchable), except limits and denials, which end the whole run."""
        started = time.perf_counter()
        resolved = await self._registry.resolve(scope, fqdn)
        try:
            outcome = await self._run_resolved(scope, resolved, args, budget, chain)
        except PmlError as error:
            self._count(scope, resolved, success=False, started=started)
            if error.code in ("EXECUTION_FAILED", "TOOL_ERROR", "INVALID_ARGS"):
                raise SnippetToolError(fqdn, error.message) from None
            raise
        self._count(scope, resolved, success=True, started=started)
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
        analysis = self._stored_analysis(version.code, record.fqdn)
        plan = await plan_references(
            analysis.calls, scope=scope, registry=self._registry, pool=self._pool
        )
        return await self._run(scope, version.code, args, plan, budget, chain)

    def _stored_analysis(self, code: str, fqdn: str) -> SnippetAnalysis:
        try:
            return _analysis(code, max(self._limits.max_code_bytes, len(code.encode())))
        except PmlError as error:
            raise ExecutionFailed(f"Stored code of {fqdn} cannot run: {error.message}") from None

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

        def counted(server: str, tool: str, latency_ms: float, ok: bool) -> None:
            self._recorder.tool_call(scope, server, tool, latency_ms=latency_ms, success=ok)

        caller = RunCaller(
            plan, budget, pool=self._pool, nested=nested, chain=chain, on_tool_call=counted
        )
        return await self._engine.run(code, args=args, caller=caller, limits=budget.limits())

    def _count(self, scope: Scope, resolved: Resolved, *, success: bool, started: float) -> float:
        """Count one run of a capability: its usage stats and its ``tool_usage`` row."""
        elapsed_ms = (time.perf_counter() - started) * 1000
        fqdn = resolved.record.fqdn
        self._recorder.count(fqdn, success=success, latency_ms=elapsed_ms)
        self._recorder.tool_call(
            scope, CAPABILITY_SERVER_ID, fqdn, latency_ms=elapsed_ms, success=success
        )
        return elapsed_ms

    def _limits_for(self, params: ExecuteParams) -> SandboxSettings:
        options = params.options
        if options is None or options.timeout_ms is None:
            return self._limits
        wall = min(self._limits.wall_time_s, options.timeout_ms / 1000)
        return self._limits.model_copy(update={"wall_time_s": wall})


def _success(
    outcome: RunOutcome,
    budget: Budget,
    capability_id: str,
    name: str,
    fqdn: str,
    *,
    created: bool,
    routing: str,
    elapsed_ms: float,
) -> dict[str, Any]:
    return {
        "status": "success",
        "result": outcome.value,
        "logs": list(outcome.logs),
        "toolsUsed": list(budget.tools_used),
        "capabilityId": capability_id,
        "capabilityName": name,
        "capabilityFqdn": fqdn,
        "created": created,
        "routing": routing,
        "executionTimeMs": round(elapsed_ms, 3),
    }
