"""Where a person decides the approvals that runs wait for (SPEC §10.5).

    desk = ApprovalDesk(workflows, grants, auditor, settings.permissions)
    await desk.pending("acme", "web")                      # [{workflowId, tool, ...}, ...]
    await desk.show("wf_3f2a...", org="acme", project="web")
    await desk.decide("wf_3f2a...", "session", org="acme", project="web",
                      decided_by="user:ana", actor="ana")   # the grant is issued now

The desk is what people reach: ``pml approvals`` in their shell, ``POST /api/approvals/{id}``
with an admin key, the dashboard, and the elicitation form answered in the client's UI. The
agent never reaches it: its ``continue_workflow`` only resumes a workflow that a person has
decided here (``pml.execution.approvals``). A decision is taken once: approving issues the
grant to the user whose run waits (``once``: that call with those arguments, one use;
``session``: that tool for ``session_grant_ttl_s``; ``always``: that tool until revoked) and
records who decided; denying ends the run at its next resume. Both are audited
(``APPROVAL_DECIDED``) with ``decided_by`` (``user:<name>`` or ``elicitation:<client>``).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any, Literal, cast, get_args

from pml.config import PermissionsSettings
from pml.errors import AlreadyDecided, InvalidInput, NotFound, PmlError
from pml.policy.grants import GrantService
from pml.policy.model import Auditor
from pml.registry.fqdn import message_value
from pml.registry.scope import Scope
from pml.storage.workflow_repo import StoredWorkflow, WorkflowStateStore

logger = logging.getLogger(__name__)

APPROVAL_KIND = "approval"
Decision = Literal["deny", "once", "session", "always"]
DECISIONS: tuple[Decision, ...] = get_args(Decision)
GrantLifetime = Literal["once", "session", "always"]
GRANT_LIFETIMES: tuple[GrantLifetime, ...] = get_args(GrantLifetime)
MAX_LISTED = 500


def check_decision(value: object) -> Decision:
    """The value as a decision, or ``INVALID_INPUT`` naming the allowed ones."""
    for allowed in DECISIONS:
        if value == allowed:
            return allowed
    raise InvalidInput(
        f"Invalid decision: {message_value(value, 40)}. Use one of: {', '.join(DECISIONS)}.",
        field="decision",
    )


def approvals_of(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The calls a stored workflow waits for (malformed entries dropped)."""
    value = state.get("approvals")
    if not isinstance(value, list):
        return []
    items = cast(list[object], value)
    return [cast(dict[str, Any], item) for item in items if isinstance(item, dict)]


def _duration(seconds: float) -> str:
    if seconds >= 86_400 and seconds % 3600 == 0:
        return f"{seconds / 86_400:g} days" if seconds != 86_400 else "1 day"
    if seconds >= 3600:
        return f"{seconds / 3600:g} h"
    if seconds >= 60:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


class ApprovalDesk:
    """Lists, shows and decides approvals (see module)."""

    def __init__(
        self,
        workflows: WorkflowStateStore,
        grants: GrantService,
        auditor: Auditor,
        settings: PermissionsSettings,
    ) -> None:
        self._workflows = workflows
        self._grants = grants
        self._auditor = auditor
        self._settings = settings

    @property
    def settings(self) -> PermissionsSettings:
        return self._settings

    def reconfigure(self, settings: PermissionsSettings) -> None:
        """Grant lifetimes, waits and the approval URL of a reloaded ``[permissions]``."""
        self._settings = settings

    def covers(self, tool: str, scope: Scope) -> dict[str, str]:
        """What each grant choice would cover, in words a person can check."""
        settings = self._settings
        return {
            "once": (
                f"only this call of {tool} with exactly these arguments, once, within "
                f"{_duration(settings.once_grant_ttl_s)}"
            ),
            "session": (
                f"every call of {tool} by {scope.user}, with any arguments, for "
                f"{_duration(settings.session_grant_ttl_s)}"
            ),
            "always": (
                f"every call of {tool} by {scope.user} in {scope.key}, with any arguments, "
                "until revoked (pml perms revoke)"
            ),
        }

    def view(self, stored: StoredWorkflow, org: str, project: str) -> dict[str, Any]:
        """The approval as people and the agent see it (one call: a run stops at the first)."""
        state = stored.state
        requester = Scope(org, project, stored.user)
        calls = approvals_of(state)
        first = calls[0] if calls else {}
        tool = str(first.get("tool") or "?")
        decision = state.get("decision")
        decided = cast(dict[str, Any], decision) if isinstance(decision, dict) else {}
        view: dict[str, Any] = {
            "workflowId": stored.workflow_id,
            "status": stored.decision or "pending",
            "tool": tool,
            "server": first.get("server") or tool.split(":", 1)[0],
            "capability": first.get("capability"),
            "intent": state.get("intent"),
            "statedIntent": state.get("statedIntent"),
            "rule": first.get("reason"),
            "reason": first.get("reason"),
            "capabilityName": state.get("capabilityName"),
            "user": stored.user,
            "key": state.get("key"),
            "arguments": first.get("arguments") or [],
            "args_summary": first.get("args_summary"),
            "grants": self.covers(tool, requester),
            "requestedAt": stored.created_at.isoformat(),
            "expiresAt": stored.expires_at.isoformat(),
        }
        if decided:
            view["decidedBy"] = decided.get("decidedBy")
            view["grant"] = decided.get("grant")
            view["decidedAt"] = decided.get("decidedAt")
        return view

    async def pending(
        self, org: str, project: str, *, user: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """The live approvals of ``org``/``project`` (of ``user`` when given), oldest first."""
        if not 0 < limit <= MAX_LISTED:
            raise InvalidInput(f"limit must be 1 to {MAX_LISTED}", field="limit")
        Scope(org, project, user or "-")  # validates org and project like every request
        found = await self._workflows.live(
            kind=APPROVAL_KIND, org=org, project=project, user=user, limit=limit
        )
        return [self.view(stored, org, project) for stored in found]

    async def show(
        self, workflow_id: str, *, org: str, project: str, user: str | None = None
    ) -> dict[str, Any]:
        """One live approval, or ``NOT_FOUND`` (also for another org's or project's)."""
        return self.view(await self._find(workflow_id, org, project, user), org, project)

    async def decide(
        self,
        workflow_id: str,
        decision: object,
        *,
        org: str,
        project: str,
        decided_by: str,
        actor: str,
        user: str | None = None,
    ) -> dict[str, Any]:
        """A person's decision: grant (``once|session|always``) or ``deny``; the approval after.

        ``NOT_FOUND`` for an unknown, expired or foreign id; ``ALREADY_DECIDED`` when someone
        decided it first (a decision is taken once)."""
        chosen = check_decision(decision)
        stored = await self._find(workflow_id, org, project, user)
        if stored.decision is not None:
            raise self._already(stored)
        outcome = "denied" if chosen == "deny" else "approved"
        state = dict(stored.state)
        state["decision"] = {
            "grant": None if chosen == "deny" else chosen,
            "decidedBy": decided_by,
            "decidedAt": datetime.now(UTC).isoformat(),
        }
        recorded = await self._workflows.decide(
            workflow_id,
            kind=APPROVAL_KIND,
            org=org,
            project=project,
            decision=outcome,
            state=state,
        )
        if not recorded:  # decided by someone else, or expired, in between
            again = await self._find(workflow_id, org, project, user)
            raise self._already(again)
        requester = Scope(org, project, stored.user)
        calls = approvals_of(stored.state)
        if chosen != "deny":
            for call in calls:
                purpose = f"approved workflow {workflow_id} ({chosen})"
                await self.issue_grant(requester, call, chosen, decided_by, actor, purpose)
        for call in calls:
            self._auditor.emit(
                "APPROVAL_DECIDED",
                scope=requester,
                details={
                    "workflow_id": workflow_id,
                    "tool": call.get("tool"),
                    "outcome": outcome,
                    "grant": None if chosen == "deny" else chosen,
                    "requested_by": stored.user,
                },
                decided_by=decided_by,
                actor=actor,
                request_id=_text(stored.state.get("request_id")),
            )
        decided = StoredWorkflow(
            workflow_id,
            stored.user,
            state,
            outcome,
            stored.created_at,
            stored.expires_at,
        )
        return self.view(decided, org, project)

    async def _find(
        self, workflow_id: str, org: str, project: str, user: str | None
    ) -> StoredWorkflow:
        if not isinstance(workflow_id, str) or not 0 < len(workflow_id) <= 64:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise NotFound(f"Approval not found or expired: {message_value(workflow_id, 80)}")
        stored = await self._workflows.find(
            workflow_id, kind=APPROVAL_KIND, org=org, project=project, user=user
        )
        if stored is None:
            raise NotFound(f"Approval not found or expired: {message_value(workflow_id, 80)}")
        return stored

    @staticmethod
    def _already(stored: StoredWorkflow) -> PmlError:
        decision = stored.state.get("decision")
        by = cast(dict[str, Any], decision).get("decidedBy") if isinstance(decision, dict) else None
        return AlreadyDecided(
            f"Approval {stored.workflow_id} was already {stored.decision or 'decided'}"
            + (f" by {by}" if by else ""),
            workflow_id=stored.workflow_id,
            status=stored.decision,
        )

    async def issue_grant(
        self,
        requester: Scope,
        call: dict[str, Any],
        lifetime: GrantLifetime,
        decided_by: str,
        actor: str,
        purpose: str,
    ) -> None:
        """The grant a person's ``lifetime`` choice issues for ``call`` (``tool``,
        ``capability``, ``args_digest``): ``once`` covers those arguments once."""
        tool = str(call.get("tool"))
        once = lifetime == "once"
        ttl_s: float | None = {
            "once": self._settings.once_grant_ttl_s,
            "session": self._settings.session_grant_ttl_s,
            "always": None,
        }[lifetime]
        await self._grants.issue(
            requester,
            capability=str(call.get("capability")),
            tool_pattern=exact_pattern(tool),
            purpose=purpose,
            ttl_s=ttl_s,
            max_uses=1 if once else None,
            args_digest=str(call.get("args_digest")) if once else None,
            decided_by=decided_by,
            actor=actor,
        )

    async def purge_expired(self) -> int:
        """Audit the approvals that expired undecided (``APPROVAL_EXPIRED``) and delete them."""
        expired = await self._workflows.take_expired(kind=APPROVAL_KIND)
        for org, project, stored in expired:
            if stored.decision is not None:
                continue
            for call in approvals_of(stored.state):
                self._auditor.emit(
                    "APPROVAL_EXPIRED",
                    scope=Scope(org, project, stored.user),
                    details={"workflow_id": stored.workflow_id, "tool": call.get("tool")},
                    decided_by="expiry",
                    actor=stored.user,
                    request_id=_text(stored.state.get("request_id")),
                )
        return len(expired)


def exact_pattern(tool: str) -> str:
    """``server:tool`` as a glob matching only itself (``[`` ``*`` ``?`` escaped)."""
    return "".join(f"[{c}]" if c in "[]*?" else c for c in tool)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
