"""Runs that wait for a person (SPEC §10.4): pausing on ``ask``, resuming when approved.

    flow = ApprovalFlow(workflows, grants, policy, settings.permissions)
    answer = await flow.pause(scope, request, error, budget, resume={"mode": "direct", ...})
    # {"status": "approval_required", "workflowId": "wf_...", "approvals": [...],
    #  "expiresAt": "...", "message": "..."}
    resume, journal = await flow.resume(scope, workflow_id, approved=True, grant="once")

A run stops at the first call that needs approval. Its request (code or capability,
arguments, name), the decision it waits for and the journal of the calls it completed are
stored as workflow state for ``approval_ttl_s``. Approving issues a grant — ``once`` (that
call with those arguments, one use), ``session`` (that tool, for ``session_grant_ttl_s``) or
``always`` — and the caller runs the request again with the journal, so that completed
calls are answered from it and never sent twice. Refusing ends the workflow:
``PERMISSION_DENIED``, nothing captured. A workflow belongs to the user who started it.
"""

from __future__ import annotations

import secrets
from typing import Any, Literal, cast

from pml.config import PermissionsSettings
from pml.errors import ApprovalRequired, InternalError, NotFound, PermissionDenied
from pml.execution.caller import Budget
from pml.execution.journal import Journal
from pml.policy.enforcer import PolicyEnforcer, RequestPolicy
from pml.policy.grants import GrantService
from pml.registry.fqdn import message_value
from pml.registry.scope import Scope
from pml.storage.workflow_repo import WorkflowStateStore

APPROVAL_KIND = "approval"
GrantLifetime = Literal["once", "session", "always"]


def new_workflow_id() -> str:
    return "wf_" + secrets.token_hex(12)


class ApprovalFlow:
    """Stores paused runs and turns approvals into grants."""

    def __init__(
        self,
        workflows: WorkflowStateStore,
        grants: GrantService,
        policy: PolicyEnforcer,
        settings: PermissionsSettings,
    ) -> None:
        self._workflows = workflows
        self._grants = grants
        self._policy = policy
        self._settings = settings

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
        approval = {
            "tool": data.get("tool"),
            "capability": data.get("capability"),
            "args_summary": data.get("args_summary"),
            "reason": data.get("reason"),
        }
        workflow_id = new_workflow_id()
        state = {
            "resume": resume,
            "journal": budget.journal.to_json(),
            "approvals": [{**approval, "args_digest": data.get("args_digest")}],
            "request_id": request.request_id,
            "intent": request.router.intent,
        }
        expires_at = await self._workflows.put(
            workflow_id,
            kind=APPROVAL_KIND,
            scope=scope,
            state=state,
            ttl_s=self._settings.approval_ttl_s,
        )
        details = {"workflow_id": workflow_id, **approval}
        self._policy.emit(request, "APPROVAL_REQUIRED", details, str(data.get("reason")))
        return {
            "status": "approval_required",
            "workflowId": workflow_id,
            "approvals": [approval],
            "expiresAt": expires_at.isoformat(),
            "message": (
                f"{approval['tool']} needs approval. Resume with pml_execute "
                f'{{"continue_workflow": {{"workflow_id": "{workflow_id}", "approved": true}}}} '
                "(or false to refuse)."
            ),
        }

    async def resume(
        self,
        scope: Scope,
        request: RequestPolicy,
        workflow_id: str,
        *,
        approved: bool,
        grant: GrantLifetime,
    ) -> tuple[dict[str, Any], Journal]:
        """The paused request and its journal, after issuing the approved grants.

        A workflow that does not exist, has expired, or belongs to someone else is
        ``NOT_FOUND`` (and audited); a refusal is ``PERMISSION_DENIED``.
        """
        state = await self._workflows.take(workflow_id, kind=APPROVAL_KIND, scope=scope)
        if state is None:
            details = {"workflow_id": workflow_id[:80], "outcome": "not_found"}
            self._policy.emit(request, "PERMISSION_DENIED", details, f"user:{scope.user}")
            raise NotFound(
                f"Workflow not found or expired: {message_value(workflow_id)}",
                workflow_id=workflow_id[:80],
            )
        approvals = _approvals_of(state.get("approvals"))
        resume = state.get("resume")
        if not approvals or not isinstance(resume, dict):
            raise InternalError(f"Workflow {workflow_id} has no resumable state")
        decided_by = f"user:{scope.user}"
        if not approved:
            for approval in approvals:
                details = {
                    "workflow_id": workflow_id,
                    "tool": approval.get("tool"),
                    "outcome": "refused",
                }
                self._policy.emit(request, "PERMISSION_DENIED", details, decided_by)
            tools = ", ".join(str(approval.get("tool")) for approval in approvals)
            raise PermissionDenied(
                f"Approval refused by {scope.user} for {tools}; nothing was captured",
                workflow_id=workflow_id,
            )
        for approval in approvals:
            await self._issue(scope, approval, grant, decided_by, workflow_id)
        return cast(dict[str, Any], resume), Journal.resumed(state.get("journal"))

    async def _issue(
        self,
        scope: Scope,
        approval: dict[str, Any],
        lifetime: GrantLifetime,
        decided_by: str,
        workflow_id: str,
    ) -> None:
        tool = str(approval.get("tool"))
        once = lifetime == "once"
        ttl_s: float | None = {
            "once": self._settings.once_grant_ttl_s,
            "session": self._settings.session_grant_ttl_s,
            "always": None,
        }[lifetime]
        await self._grants.issue(
            scope,
            capability=str(approval.get("capability")),
            tool_pattern=_exact_pattern(tool),
            purpose=f"approved workflow {workflow_id} ({lifetime})",
            ttl_s=ttl_s,
            max_uses=1 if once else None,
            args_digest=str(approval.get("args_digest")) if once else None,
            decided_by=decided_by,
        )


def _exact_pattern(tool: str) -> str:
    """``server:tool`` as a glob matching only itself (``[`` ``*`` ``?`` escaped)."""
    return "".join(f"[{c}]" if c in "[]*?" else c for c in tool)


def _approvals_of(value: object) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        return []
    items = cast(list[object], value)
    return [cast(dict[str, Any], item) for item in items if isinstance(item, dict)]
