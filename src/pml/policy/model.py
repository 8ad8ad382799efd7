"""The vocabulary shared by the router, the gate, the permission rules, grants and audit.

    RouterOutput(intent="file_task", needs=("file_read",), risk_level="low",
                 confidence=0.9, decided_by="heuristic:read")
    PolicyDecision(intent="file_task", allowed=frozenset({"file_read", ...}),
                   forbidden=frozenset({"file_write", ...}), exceptions=(),
                   policy_version="3f2a9c01", rule="policy:file_task")

Every upstream tool maps to exactly one permission capability (``CAPABILITIES``); the
policy table, the permission defaults, grants and audit events all speak in these names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, get_args

from pml.registry.scope import Scope
from pml.sections import PermissionCapabilityName

PermissionCapability = PermissionCapabilityName
CAPABILITIES: tuple[PermissionCapability, ...] = get_args(PermissionCapabilityName)

RiskLevel = Literal["low", "medium", "high"]

# The intent taxonomy: the seed's nine, file edits, and the read-only fallback.
INTENTS: tuple[str, ...] = (
    "chat_only",
    "lookup_search",
    "browse_once",
    "one_shot_discovery",
    "screen_observe",
    "file_task",
    "file_edit",
    "system_task",
    "memory_read",
    "memory_write",
    "edit_task",
    "general",
)
FALLBACK_INTENT = "general"

# Capabilities a tool call needs permission for unless a rule says otherwise (SPEC §10.4).
ASK_BY_DEFAULT: frozenset[PermissionCapability] = frozenset(
    {"file_write", "system_execute", "memory_write", "unknown"}
)

PermissionDecision = Literal["allow", "ask", "deny"]


@dataclass(frozen=True, slots=True)
class RouterOutput:
    """What one request's intent needs (SPEC §10.1).

    ``decided_by`` names what classified it: ``prefix:/file``, ``heuristic:<rule>``,
    ``llm:<model>``, ``fallback`` (nothing matched), ``direct`` (a call without intent).
    """

    intent: str
    needs: tuple[PermissionCapability, ...]
    risk_level: RiskLevel
    confidence: float
    decided_by: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "intent": self.intent,
            "needs": list(self.needs),
            "risk_level": self.risk_level,
            "confidence": round(self.confidence, 3),
            "decided_by": self.decided_by,
        }


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    """The policy gate's answer for one request (SPEC §10.3).

    ``forbidden`` holds ``"*"`` when the intent may use nothing; ``exceptions`` are
    ``server:tool`` patterns permitted whatever their capability. ``rule`` names the row
    that decided (``policy:<intent>`` built in, ``config:policy.intents.<intent>``).
    """

    intent: str
    allowed: frozenset[str]
    forbidden: frozenset[str]
    exceptions: tuple[str, ...]
    policy_version: str
    rule: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "intent": self.intent,
            "allowed": sorted(self.allowed),
            "forbidden": sorted(self.forbidden),
            "exceptions": list(self.exceptions),
            "policy_version": self.policy_version,
            "rule": self.rule,
        }


# Audit event names (SPEC §10.6).
AUDIT_EVENTS: tuple[str, ...] = (
    "ROUTER_OUTPUT",
    "POLICY_DECISION",
    "POLICY_DENIED",
    "PERMISSION_CHECK",
    "PERMISSION_GRANTED",
    "PERMISSION_DENIED",
    "PERMISSION_REVOKED",
    "APPROVAL_REQUIRED",
    "APPROVAL_PENDING",
    "APPROVAL_DECIDED",
    "APPROVAL_WITHDRAWN",
    "APPROVAL_EXPIRED",
    "APPROVAL_ELICITATION",
    "TOOL_CALL_START",
    "TOOL_CALL_END",
    "EXECUTOR_RESPONSE",
    "EXECUTOR_TOOL_REFUSED",
    "POSTHOOK_CAPTURE",
    "POSTHOOK_USAGE",
    "POSTHOOK_CLEANUP",
    "POSTHOOK_MEMORY",
    "POSTHOOK_FAILED",
    "AGENT_CLARIFICATION",
    "PIPELINE_RECORD",
    "CAPABILITY_CREATED",
    "CAPABILITY_RENAMED",
    "CAPABILITY_VERSIONED",
    "CAPABILITY_ARCHIVED",
    "CAPABILITY_RESTORED",
    "CAPABILITY_PURGED",
    "CAPABILITY_DEPRECATED",
    "CAPABILITY_TAGGED",
    "CAPABILITY_ROUTING_CHANGED",
    "CAPABILITIES_IMPORTED",
    "TOOL_DEFINITION_ACCEPTED",
    "DASHBOARD_SIGNED_IN",
    "AUDIT_DROPPED",
    "PROMPT_GET",
    "RESOURCE_READ",
    "RESOURCE_SUBSCRIBE",
    "RESOURCE_UNSUBSCRIBE",
    "LOG_LEVEL_SET",
    "RELAYED_REQUEST",
)


class Auditor(Protocol):
    """Where pipeline events go (``pml.policy.audit.AuditLog``).

    ``emit`` never blocks and never raises: events are scrubbed of secrets and queued;
    the log writes them to its JSON-lines file and the ``audit_events`` table in batches.
    """

    def emit(
        self,
        event: str,
        *,
        scope: Scope,
        details: Mapping[str, Any],
        decided_by: str | None = None,
        actor: str | None = None,
        request_id: str | None = None,
    ) -> None: ...
