"""How ``pml_execute`` ends a run that cannot go on: it pauses for a person, or it is refused.

    answer = await pause_or_refuse(approvals, scope, request, waiting, budget, resume)
    audit_refusal(policy, request, error)     # EXECUTOR_RESPONSE at stage "before-run"

A gateway without the approval flow (or a request without a policy decision) cannot wait:
an ``APPROVAL_REQUIRED`` becomes a ``PERMISSION_DENIED`` carrying the same facts.
"""

from __future__ import annotations

from typing import Any

from pml.errors import ApprovalRequired, PermissionDenied, PmlError
from pml.execution.approvals import ApprovalFlow
from pml.execution.caller import Budget
from pml.policy.enforcer import PolicyEnforcer, RequestPolicy, refusal_data
from pml.registry.scope import Scope


async def pause_or_refuse(
    approvals: ApprovalFlow | None,
    scope: Scope,
    request: RequestPolicy | None,
    waiting: ApprovalRequired,
    budget: Budget,
    resume: dict[str, Any],
) -> dict[str, Any]:
    """The ``approval_required`` answer of a paused run, or its refusal."""
    if approvals is None or request is None:
        raise PermissionDenied(
            f"{waiting.message}, and this gateway cannot wait for approvals",
            **refusal_data(waiting),
        )
    return await approvals.pause(scope, request, waiting, budget, resume)


def audit_refusal(
    policy: PolicyEnforcer | None, request: RequestPolicy | None, error: PmlError
) -> None:
    """A request that ended before running (bad code, unknown tool, policy) is audited."""
    if policy is not None and request is not None:
        details = {"status": "error", "error": error.code, "stage": "before-run"}
        policy.emit(request, "EXECUTOR_RESPONSE", {**details, "message": error.message})
