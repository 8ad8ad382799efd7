"""The one enforcement point every tool call passes (SPEC §10): gate, rules, grants, audit.

    enforcer = PolicyEnforcer(router=..., gate=..., rules=..., auditor=audit_log, ...)
    request = await enforcer.begin(scope, "read the config files", source="pml_execute")
    enforcer.check_static(request, [("filesystem", "write_file")])   # POLICY_DENIED before a run
    decided_by = await enforcer.authorize(request, "filesystem", "read_file", {"path": "a"})

``begin`` classifies the request's intent once (``ROUTER_OUTPUT``) and evaluates the policy
table (``POLICY_DECISION``). ``authorize`` decides one call: a capability the decision
forbids is ``POLICY_DENIED`` (in ``audit`` mode only logged); then the permission rules —
``deny`` is ``PERMISSION_DENIED``, ``allow`` goes on, ``ask`` goes on only with a grant that
covers the call (consumed when limited), else ``APPROVAL_REQUIRED`` (the run pauses for a
person). Whatever goes wrong inside the checks refuses the call (fail closed).
``reconfigure`` swaps the rules as one value. Memory writes: ``pml.policy.memory_gate``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pml.errors import ApprovalRequired, PermissionDenied, PmlError, PolicyDenied
from pml.execution.values import args_digest
from pml.policy.approval_view import args_summary as args_summary
from pml.policy.approval_view import argument_view
from pml.policy.approval_view import refusal_data as refusal_data
from pml.policy.capability_map import CapabilityMap
from pml.policy.gate import PolicyGate
from pml.policy.memory_gate import (
    CREDENTIAL_RULE,
    LOW_CONSENT,
    SENSITIVE_RULE,
    MemoryGate,
    write_details,
)
from pml.policy.model import (
    CAPABILITIES,
    FALLBACK_INTENT,
    Auditor,
    PermissionCapability,
    PolicyDecision,
    RouterOutput,
)
from pml.policy.permissions import CallFacts, Grant, PermissionRules
from pml.registry.scope import Scope
from pml.telemetry import observe

logger = logging.getLogger(__name__)

# A call made without an intent (pass-through): the read-only fallback row applies.
DIRECT = RouterOutput(
    intent=FALLBACK_INTENT, needs=(), risk_level="low", confidence=1.0, decided_by="direct"
)


class Router(Protocol):
    """What classifies an intent (``pml.policy.router.IntentRouter``)."""

    async def route(self, intent: str) -> RouterOutput: ...


class GrantFinder(Protocol):
    """Where grants are looked up and consumed (``pml.policy.grants.GrantService``)."""

    async def find_and_consume(
        self, scope: Scope, call: CallFacts
    ) -> tuple[Grant | None, list[str]]: ...


@dataclass(frozen=True, slots=True)
class _Rules:
    """What a reload replaces, read as one value by every check."""

    gate: PolicyGate
    capabilities: CapabilityMap
    permissions: PermissionRules
    mode: Literal["enforce", "audit"]


@dataclass(frozen=True, slots=True)
class RequestPolicy:
    """One request's classification and policy decision, shared by all its tool calls."""

    request_id: str
    scope: Scope
    source: str
    router: RouterOutput
    decision: PolicyDecision


class PolicyEnforcer:
    """Decides and audits every tool call of every request."""

    def __init__(
        self,
        *,
        router: Router,
        gate: PolicyGate,
        capabilities: CapabilityMap,
        rules: PermissionRules,
        grants: GrantFinder | None,
        auditor: Auditor,
        mode: Literal["enforce", "audit"] = "enforce",
        memory: MemoryGate | None = None,
    ) -> None:
        self._router = router
        self._rules = _Rules(gate, capabilities, rules, mode)
        self._grants = grants
        self.auditor = auditor
        self.memory = memory

    def reconfigure(
        self,
        *,
        gate: PolicyGate,
        capabilities: CapabilityMap,
        rules: PermissionRules,
        mode: Literal["enforce", "audit"],
    ) -> None:
        """Decide with new rules from the next check on (one swap: never half old, half new)."""
        self._rules = _Rules(gate, capabilities, rules, mode)

    @property
    def policy_version(self) -> str:
        return self._rules.gate.version

    def capability_of(self, server: str, tool: str) -> PermissionCapability:
        return self._rules.capabilities.capability_of(server, tool)

    async def begin(
        self,
        scope: Scope,
        intent: str | None,
        *,
        source: str,
        request_id: str | None = None,
    ) -> RequestPolicy:
        """Classify ``intent`` (None: a direct call) and decide the request's policy."""
        with observe.step("policy", source=source) as step:
            request = await self._decide(scope, intent, source, request_id)
            step.set(intent=request.router.intent, rule=request.decision.rule)
            return request

    async def begin_as(
        self, scope: Scope, router: RouterOutput, *, source: str, request_id: str | None = None
    ) -> RequestPolicy:
        """Decide a request whose classification is given (a person's answer to a clarifying
        question, ``decided_by="person:..."``): the same gate, rules and audit as ``begin``."""
        with observe.step("policy", source=source) as step:
            request = self._decided(scope, router, source, request_id or uuid.uuid4().hex[:16])
            step.set(intent=request.router.intent, rule=request.decision.rule)
            return request

    async def _decide(
        self, scope: Scope, intent: str | None, source: str, request_id: str | None
    ) -> RequestPolicy:
        request_id = request_id or uuid.uuid4().hex[:16]
        try:
            router = DIRECT if intent is None else await self._router.route(intent)
        except PmlError:
            raise  # e.g. a blank intent: the caller's error
        except Exception:  # fail closed: an unclassified request gets the read-only row
            logger.exception("the intent router failed; using the read-only fallback")
            router = RouterOutput(FALLBACK_INTENT, (), "low", 0.0, "fallback:router-error")
        return self._decided(scope, router, source, request_id)

    def _decided(
        self, scope: Scope, router: RouterOutput, source: str, request_id: str
    ) -> RequestPolicy:
        gate = self._rules.gate
        try:
            decision = gate.evaluate(router)
        except Exception:  # fail closed: a request the gate cannot evaluate may use nothing
            logger.exception("the policy gate failed; refusing every tool of the request")
            decision = PolicyDecision(
                intent=router.intent,
                allowed=frozenset(),
                forbidden=frozenset({"*", *CAPABILITIES}),
                exceptions=(),
                policy_version=gate.version,
                rule="fail-closed",
            )
        request = RequestPolicy(request_id, scope, source, router, decision)
        self._emit(
            request, "ROUTER_OUTPUT", {**router.to_dict(), "source": source}, router.decided_by
        )
        self._emit(request, "POLICY_DECISION", decision.to_dict(), decision.rule)
        return request

    def check_static(self, request: RequestPolicy, tools: Iterable[tuple[str, str]]) -> None:
        """Before a run: refuse when the code names a tool the policy or a deny rule forbids."""
        rules = self._rules
        for server, tool in tools:
            capability = rules.capabilities.capability_of(server, tool)
            self._check_gate(rules, request, server, tool, capability, stage="static")
            match = rules.permissions.decide(server, tool, capability)
            if match.decision == "deny":
                self._deny_permission(request, server, tool, capability, match.rule, "static")

    def hides(self, request: RequestPolicy, server: str, tool: str) -> bool:
        """Whether discovery must hide ``server:tool`` (forbidden by the gate or denied)."""
        rules = self._rules
        try:
            capability = rules.capabilities.capability_of(server, tool)
            if rules.gate.forbidding_rule(request.decision, server, tool, capability) is not None:
                return rules.mode == "enforce"
            return rules.permissions.decide(server, tool, capability).decision == "deny"
        except Exception:  # fail closed
            logger.exception("policy check failed for %s:%s; hiding it", server, tool)
            return True

    async def authorize(
        self, request: RequestPolicy, server: str, tool: str, arguments: Mapping[str, Any]
    ) -> str:
        """Allow one call (returns what decided it) or raise the refusal (SPEC §10.3-4)."""
        try:
            return await self._authorize(request, server, tool, arguments)
        except PmlError:
            raise
        except Exception:  # fail closed
            logger.exception("permission check failed for %s:%s", server, tool)
            details = {"tool": f"{server}:{tool}", "rule": "fail-closed"}
            self._emit(request, "POLICY_DENIED", details, "fail-closed")
            raise PolicyDenied(
                f"Policy check failed for {server}:{tool}; the call was refused (fail closed)",
                tool=f"{server}:{tool}",
                rule="fail-closed",
            ) from None

    async def authorize_direct(
        self, scope: Scope, server: str, tool: str, arguments: Mapping[str, Any]
    ) -> RequestPolicy:
        """A call made without an intent (pass-through): the read-only fallback policy; it
        cannot wait for approval, so an ``ask`` without a grant is refused."""
        request = await self.begin(scope, None, source="pass_through")
        try:
            await self.authorize(request, server, tool, arguments)
        except ApprovalRequired as waiting:
            data = refusal_data(waiting)
            raise PermissionDenied(
                f"{waiting.message}: a direct call cannot wait for it. Call it from "
                f"pml_execute (which asks for approval), or grant it with "
                f"`pml perms grant {data.get('capability')} --tool '{server}:{tool}'`",
                **data,
            ) from None
        self.tool_call_started(request, f"{server}:{tool}")
        return request

    async def _authorize(
        self, request: RequestPolicy, server: str, tool: str, arguments: Mapping[str, Any]
    ) -> str:
        rules = self._rules
        capability = rules.capabilities.capability_of(server, tool)
        self._check_gate(rules, request, server, tool, capability, stage="call")
        match = rules.permissions.decide(server, tool, capability)
        address = f"{server}:{tool}"
        if match.decision == "deny":
            self._deny_permission(request, server, tool, capability, match.rule, "call")
        decision, rule = match.decision, match.rule
        if capability == "memory_write" and self.memory is not None:
            verdict = await self.memory.verdict(tool, arguments)
            details = write_details(verdict, address, "refused", arguments)
            if verdict.level == "credential":
                self._emit(request, "POSTHOOK_MEMORY", details, CREDENTIAL_RULE)
                self._deny_permission(request, server, tool, capability, CREDENTIAL_RULE, "call")
            if verdict.level == "low" and decision == "ask" and self.memory.auto_store_low:
                applied = {**details, "outcome": "applied"}
                self._emit(request, "POSTHOOK_MEMORY", applied, LOW_CONSENT)
                self._check_event(request, address, capability, "allow", LOW_CONSENT)
                return LOW_CONSENT
            if verdict.level == "high":  # a person consents to what is sensitive, whatever the rule
                decision, rule = "ask", f"{SENSITIVE_RULE} ({', '.join(verdict.reasons[:2])})"
        if decision == "allow":
            self._check_event(request, address, capability, "allow", match.rule)
            return match.rule
        grant: Grant | None = None
        refusals: list[str] = []
        digest = args_digest(dict(arguments))
        if self._grants is not None:
            call = CallFacts(server, tool, capability, arguments, digest)
            grant, refusals = await self._grants.find_and_consume(request.scope, call)
        if grant is not None:
            decided_by = f"grant:{grant.id}"
            self._check_event(request, address, capability, "allow", decided_by)
            return decided_by
        summary = args_summary(arguments)
        details = {"tool": address, "capability": capability, "outcome": "ask"}
        details |= {"args_summary": summary, "grants_refused": refusals[:5]}
        self._emit(request, "PERMISSION_CHECK", details, rule)
        raise ApprovalRequired(
            f"{address} ({capability}) needs approval ({rule})",
            tool=address,
            capability=capability,
            args_summary=summary,
            reason=rule,
            args_digest=digest,
            server=server,
            arguments=argument_view(arguments),
        )

    def _check_gate(
        self,
        rules: _Rules,
        request: RequestPolicy,
        server: str,
        tool: str,
        capability: str,
        *,
        stage: str,
    ) -> None:
        rule = rules.gate.forbidding_rule(request.decision, server, tool, capability)
        if rule is None:
            return
        address = f"{server}:{tool}"
        enforced = rules.mode == "enforce"
        details = {"tool": address, "capability": capability, "rule": rule, "stage": stage}
        details |= {"intent": request.decision.intent, "enforced": enforced}
        self._emit(request, "POLICY_DENIED", details, request.decision.rule)
        if enforced:
            raise PolicyDenied(
                f"Policy denied {address} ({capability}): {rule} "
                f"(intent {request.decision.intent!r})",
                tool=address,
                capability=capability,
                rule=rule,
            )

    def _deny_permission(
        self,
        request: RequestPolicy,
        server: str,
        tool: str,
        capability: str,
        rule: str,
        stage: str,
    ) -> None:
        address = f"{server}:{tool}"
        details = {"tool": address, "capability": capability, "rule": rule, "stage": stage}
        self._emit(request, "PERMISSION_DENIED", details, rule)
        raise PermissionDenied(
            f"Permission denied for {address} ({capability}) by rule {rule}",
            tool=address,
            capability=capability,
            rule=rule,
        )

    def _check_event(
        self, request: RequestPolicy, address: str, capability: str, outcome: str, decided_by: str
    ) -> None:
        details = {"tool": address, "capability": capability, "outcome": outcome}
        self._emit(request, "PERMISSION_CHECK", details, decided_by)

    def tool_call_started(self, request: RequestPolicy, address: str) -> None:
        self._emit(request, "TOOL_CALL_START", {"tool": address}, None)

    def tool_call_ended(
        self, request: RequestPolicy, address: str, *, ok: bool, duration_ms: float, replayed: bool
    ) -> None:
        details = {
            "tool": address,
            "success": ok,
            "duration_ms": round(duration_ms, 3),
            "replayed": replayed,
        }
        self._emit(request, "TOOL_CALL_END", details, None)

    def emit(
        self,
        request: RequestPolicy,
        event: str,
        details: Mapping[str, Any],
        decided_by: str | None = None,
    ) -> None:
        """Audit one more event of ``request``."""
        self._emit(request, event, details, decided_by)

    def _emit(
        self,
        request: RequestPolicy,
        event: str,
        details: Mapping[str, Any],
        decided_by: str | None,
    ) -> None:
        self.auditor.emit(
            event,
            scope=request.scope,
            details=details,
            decided_by=decided_by,
            actor=request.scope.user,
            request_id=request.request_id,
        )
