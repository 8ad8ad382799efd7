"""Runs that wait for a person (SPEC §10.5): pausing on ``ask``, resuming once a person decided.

    flow = ApprovalFlow(workflows, desk, policy, settings.permissions)
    answer = await flow.pause(scope, request, error, budget, resume={"mode": "execute", ...})
    # {"status": "approval_required", "workflowId": "wf_...", "approvals": [...],
    #  "expiresAt": "...", "message": "..."}
    outcome = await flow.resume(scope, request, workflow_id, approved=True, grant="once")
    # (resume, journal) once a person approved; the same answer with "pending": true before

A run stops at the first call that needs approval. Its request (code or capability,
arguments, name), the call it waits for (tool, capability, rule, the arguments as a person
reviews them) and the journal of the calls it completed are stored as workflow state for
``approval_ttl_s``. A *person* decides it at the ``ApprovalDesk`` (``pml approvals``, ``POST
/api/approvals/{id}`` with an admin key, the dashboard, or an elicitation form in the
client's UI). The agent's ``continue_workflow {approved: true}`` only resumes what a person
approved — the run again with the journal, so completed calls are never sent twice — and
before anyone decided it answers ``approval_required`` with ``"pending": true`` and issues
nothing. ``approved: false`` withdraws the request. ``[permissions] agent_may_approve =
true`` lets the agent's own ``approved: true`` decide (``decided_by: agent:<user>``).
"""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import Any, cast

from pml.config import PermissionsSettings
from pml.errors import ApprovalRequired, InternalError, NotFound, PermissionDenied
from pml.execution.approval_desk import APPROVAL_KIND, ApprovalDesk, GrantLifetime, approvals_of
from pml.execution.caller import Budget
from pml.execution.clients import current_key
from pml.execution.journal import Journal
from pml.policy.enforcer import PolicyEnforcer, RequestPolicy
from pml.registry.fqdn import message_value
from pml.registry.scope import Scope
from pml.storage.workflow_repo import StoredWorkflow, WorkflowStateStore

MAX_STATED_INTENT = 500


def new_workflow_id() -> str:
    return "wf_" + secrets.token_hex(12)


class ApprovalFlow:
    """Stores paused runs, answers the agent, and resumes what a person approved."""

    def __init__(
        self,
        workflows: WorkflowStateStore,
        desk: ApprovalDesk,
        policy: PolicyEnforcer,
        settings: PermissionsSettings,
    ) -> None:
        self._workflows = workflows
        self._desk = desk
        self._policy = policy
        self._settings = settings

    @property
    def desk(self) -> ApprovalDesk:
        return self._desk

    def reconfigure(self, settings: PermissionsSettings) -> None:
        """Approval lifetime and ``agent_may_approve`` of a reloaded ``[permissions]`` (its
        desk too)."""
        self._settings = settings
        self._desk.reconfigure(settings)

    async def pause(
        self,
        scope: Scope,
        request: RequestPolicy,
        waiting: ApprovalRequired,
        budget: Budget,
        resume: dict[str, Any],
    ) -> dict[str, Any]:
        """Store the paused run; the ``approval_required`` answer."""
        data = waiting.data
        call = {
            "tool": data.get("tool"),
            "server": data.get("server"),
            "capability": data.get("capability"),
            "args_summary": data.get("args_summary"),
            "reason": data.get("reason"),
            "arguments": data.get("arguments"),
            "args_digest": data.get("args_digest"),
        }
        workflow_id = new_workflow_id()
        stated = str(resume.get("intent") or "")[:MAX_STATED_INTENT]
        state = {
            "resume": resume,
            "journal": budget.journal.to_json(),
            "approvals": [call],
            "request_id": request.request_id,
            "intent": request.router.intent,
            "statedIntent": stated,
            "capabilityName": _capability_name(resume),
            "key": current_key(),
        }
        expires_at = await self._workflows.put(
            workflow_id,
            kind=APPROVAL_KIND,
            scope=scope,
            state=state,
            ttl_s=self._settings.approval_ttl_s,
        )
        details = {
            "workflow_id": workflow_id,
            **{k: v for k, v in call.items() if k not in ("args_digest", "arguments")},
        }
        self._policy.emit(request, "APPROVAL_REQUIRED", details, str(data.get("reason")))
        stored = StoredWorkflow(workflow_id, scope.user, state, None, _now(expires_at), expires_at)
        return self.answer(scope, stored)

    def answer(
        self, scope: Scope, stored: StoredWorkflow, *, pending: bool = False
    ) -> dict[str, Any]:
        """The ``approval_required`` answer of a stored, undecided workflow."""
        view = self._desk.view(stored, scope.org, scope.project)
        answer: dict[str, Any] = {
            "status": "approval_required",
            "workflowId": stored.workflow_id,
            "approvals": [view],
            "expiresAt": stored.expires_at.isoformat(),
            "message": self._message(view),
        }
        if pending:
            answer["pending"] = True
        return answer

    def _message(self, view: dict[str, Any]) -> str:
        workflow_id = view["workflowId"]
        resume = (
            f'pml_execute {{"continue_workflow": {{"workflow_id": "{workflow_id}", '
            '"approved": true}}'
        )
        if self._settings.agent_may_approve:
            return (
                f"{view['tool']} needs approval ({view['rule']}). This gateway lets the agent "
                f"approve: resume with {resume} (false withdraws the request)."
            )
        return (
            f"{view['tool']} needs a person's approval ({view['rule']}); the agent cannot "
            f"give it. A person approves with `pml approvals approve {workflow_id}` in their "
            f"own shell, or POST /api/approvals/{workflow_id} with an admin key. Then resume "
            f'with {resume}; "approved": false withdraws the request. It expires at '
            f"{view['expiresAt']}."
        )

    async def resume(
        self,
        scope: Scope,
        request: RequestPolicy,
        workflow_id: str,
        *,
        approved: bool,
        grant: GrantLifetime,
    ) -> tuple[dict[str, Any], Journal] | dict[str, Any]:
        """The paused request and its journal once a person approved it; before that, the
        ``approval_required`` answer again (``"pending": true``).

        A workflow that does not exist, has expired, or belongs to someone else is
        ``NOT_FOUND`` (and audited); a withdrawal or a person's denial is
        ``PERMISSION_DENIED``."""
        who = f"user:{scope.user}"
        if not approved:
            return self._withdrawn(
                request,
                workflow_id,
                await self._workflows.take(workflow_id, kind=APPROVAL_KIND, scope=scope),
            )
        stored = await self._workflows.find(
            workflow_id, kind=APPROVAL_KIND, org=scope.org, project=scope.project, user=scope.user
        )
        if stored is None:
            raise self._not_found(request, workflow_id, who)
        if stored.decision is None:
            if not self._settings.agent_may_approve:
                details = {"workflow_id": workflow_id, "outcome": "pending"}
                self._policy.emit(request, "APPROVAL_PENDING", details, who)
                return self.answer(scope, stored, pending=True)
            await self._desk.decide(
                workflow_id,
                grant,
                org=scope.org,
                project=scope.project,
                decided_by=f"agent:{scope.user}",
                actor=scope.user,
                user=scope.user,
            )
            stored = await self._workflows.find(
                workflow_id,
                kind=APPROVAL_KIND,
                org=scope.org,
                project=scope.project,
                user=scope.user,
            )
            if stored is None:
                raise self._not_found(request, workflow_id, who)
        decision = str(stored.decision)
        state = await self._workflows.take(
            workflow_id, kind=APPROVAL_KIND, scope=scope, decision=decision
        )
        if state is None:  # resumed by a concurrent continue_workflow
            raise self._not_found(request, workflow_id, who)
        calls = approvals_of(state)
        resume = state.get("resume")
        if not calls or not isinstance(resume, dict):
            raise InternalError(f"Workflow {workflow_id} has no resumable state")
        if decision != "approved":
            decided = state.get("decision")
            by = (
                cast(dict[str, Any], decided).get("decidedBy")
                if isinstance(decided, dict)
                else None
            )
            tools = ", ".join(str(call.get("tool")) for call in calls)
            for call in calls:
                details = {
                    "workflow_id": workflow_id,
                    "tool": call.get("tool"),
                    "outcome": "denied",
                }
                self._policy.emit(request, "PERMISSION_DENIED", details, str(by or "person"))
            raise PermissionDenied(
                f"Approval denied by {by or 'a person'} for {tools}; nothing was captured",
                workflow_id=workflow_id,
            )
        return cast(dict[str, Any], resume), Journal.resumed(state.get("journal"))

    def _withdrawn(
        self, request: RequestPolicy, workflow_id: str, state: dict[str, Any] | None
    ) -> dict[str, Any]:
        who = f"user:{request.scope.user}"
        if state is None:
            raise self._not_found(request, workflow_id, who)
        calls = approvals_of(state)
        for call in calls:
            details = {"workflow_id": workflow_id, "tool": call.get("tool"), "outcome": "withdrawn"}
            self._policy.emit(request, "APPROVAL_WITHDRAWN", details, who)
            self._policy.emit(request, "PERMISSION_DENIED", details, who)
        tools = ", ".join(str(call.get("tool")) for call in calls)
        raise PermissionDenied(
            f"Approval request for {tools} withdrawn by {request.scope.user}; nothing was captured",
            workflow_id=workflow_id,
        )

    def _not_found(self, request: RequestPolicy, workflow_id: str, who: str) -> NotFound:
        details = {"workflow_id": workflow_id[:80], "outcome": "not_found"}
        self._policy.emit(request, "PERMISSION_DENIED", details, who)
        return NotFound(
            f"Workflow not found or expired: {message_value(workflow_id)}",
            workflow_id=workflow_id[:80],
        )

    async def open_round(self, scope: Scope, workflow_id: str, state: dict[str, Any]) -> bool:
        """Store the state of an elicitation round of ``scope``'s undecided workflow."""
        return await self._workflows.replace_undecided(
            workflow_id, kind=APPROVAL_KIND, scope=scope, state=state
        )

    async def stored(self, scope: Scope, workflow_id: str) -> StoredWorkflow | None:
        """``scope``'s own live approval workflow (for the MCP edge's elicitation)."""
        return await self._workflows.find(
            workflow_id, kind=APPROVAL_KIND, org=scope.org, project=scope.project, user=scope.user
        )


def _capability_name(resume: dict[str, Any]) -> str | None:
    if resume.get("mode") == "tool":
        ref = resume.get("ref")
        return ref if isinstance(ref, str) else None
    params = resume.get("params")
    if isinstance(params, dict):
        typed = cast(dict[str, Any], params)
        for key in ("capability", "name"):
            value = typed.get(key)
            if isinstance(value, str):
                return value
    return None


def _now(expires_at: datetime) -> datetime:
    return datetime.now(expires_at.tzinfo)
