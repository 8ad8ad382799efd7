"""The policy pipeline of a gateway, built from settings (SPEC §10).

    async with open_policy(settings, db, llm) as policy:
        policy.enforcer      # the one enforcement point (router, gate, rules, grants, audit)
        policy.approvals     # pauses runs that need approval, resumes approved ones
        policy.approvals.desk  # where a person decides them (CLI, REST, elicitation)
        policy.audit         # the audit log (file + table), flushed at exit
        policy.purges        # clean-up jobs for the post-hook (expired grants and workflows)

With ``[policy] debug_routing = true`` (``--debug-routing``), each request's router output,
policy decision and permission checks are printed to stderr as they happen.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, TextIO

import anyio

from pml.config import Settings, audit_file_path
from pml.execution.approval_desk import ApprovalDesk
from pml.execution.approvals import ApprovalFlow
from pml.gateway.background import in_background
from pml.llm import JsonCompleter
from pml.policy.audit import AuditLog
from pml.policy.capability_map import CapabilityMap
from pml.policy.enforcer import PolicyEnforcer
from pml.policy.gate import PolicyGate
from pml.policy.grant_stamp import grant_stamp_for
from pml.policy.grants import GrantService
from pml.policy.memory_gate import MemoryGate
from pml.policy.permissions import PermissionRules
from pml.policy.router import IntentRouter
from pml.policy.version import policy_version
from pml.storage.dashboard_session_repo import purge_expired_dashboard_sessions
from pml.storage.database import Database
from pml.storage.workflow_repo import WorkflowStateStore

logger = logging.getLogger(__name__)

PURGE_INTERVAL_S = 300.0
# The events --debug-routing prints: the pipeline's decisions, not every tool call.
DEBUG_EVENTS = frozenset(
    {
        "ROUTER_OUTPUT",
        "POLICY_DECISION",
        "POLICY_DENIED",
        "PERMISSION_CHECK",
        "PERMISSION_DENIED",
        "PERMISSION_GRANTED",
        "APPROVAL_REQUIRED",
    }
)


@dataclass(frozen=True, slots=True)
class PolicyServices:
    enforcer: PolicyEnforcer
    approvals: ApprovalFlow
    audit: AuditLog
    grants: GrantService
    workflows: WorkflowStateStore
    purges: dict[str, Callable[[], Awaitable[int]]]


def build_enforcer(
    settings: Settings,
    auditor: AuditLog,
    grants: GrantService | None,
    llm: JsonCompleter | None,
) -> PolicyEnforcer:
    """The enforcement point for ``settings`` (configuration errors raise ``CONFIG_ERROR``)."""
    policy = settings.policy
    router = IntentRouter(
        llm,
        model=settings.llm.model if settings.llm is not None else "",
        min_confidence=policy.llm_min_confidence,
    )
    return PolicyEnforcer(
        router=router,
        gate=PolicyGate(policy, version=policy_version(settings)),
        capabilities=CapabilityMap.from_settings(policy),
        rules=PermissionRules.from_settings(settings.permissions),
        grants=grants,
        auditor=auditor,
        mode=policy.mode,
        memory=MemoryGate(
            settings.memory,
            llm=llm,
            model=settings.llm.model if settings.llm is not None else "llm",
        ),
    )


@asynccontextmanager
async def open_policy(
    settings: Settings,
    db: Database,
    llm: JsonCompleter | None,
    *,
    debug_stream: TextIO | None = None,
) -> AsyncGenerator[PolicyServices]:
    """The pipeline, its audit log running (written at exit)."""
    audit = AuditLog(
        db, audit_file_path(settings), coalesce_window_s=settings.audit.coalesce_window_s
    )
    if settings.policy.debug_routing:
        audit.add_listener(_debug_printer(debug_stream or sys.stderr))
    grants = GrantService(
        db, audit, policy_version=policy_version(settings), stamp=grant_stamp_for(settings)
    )
    enforcer = build_enforcer(settings, audit, grants, llm)
    workflows = WorkflowStateStore(db, pending_per_user=settings.limits.pending_workflows_per_user)
    desk = ApprovalDesk(workflows, grants, audit, settings.permissions)
    approvals = ApprovalFlow(workflows, desk, enforcer, settings.permissions)
    purges: dict[str, Callable[[], Awaitable[int]]] = {
        "grants": grants.purge_expired,
        "approvals": desk.purge_expired,  # before "workflows": expired approvals are audited
        "workflows": workflows.purge_expired,
        "dashboard sessions": partial(purge_expired_dashboard_sessions, db),
    }
    async with audit.running(), _purging(purges, PURGE_INTERVAL_S):
        yield PolicyServices(enforcer, approvals, audit, grants, workflows, purges)


@asynccontextmanager
async def _purging(
    purges: dict[str, Callable[[], Awaitable[int]]], interval_s: float
) -> AsyncGenerator[None]:
    """Expired grants and workflow states purged every ``interval_s`` in the background (a
    gateway that only hands code to clients runs no post-hooks). An exception of the block
    is raised as it is, not wrapped by the task group."""

    async def purge_forever() -> None:
        while True:
            await anyio.sleep(interval_s)
            for name, purge in purges.items():
                try:
                    purged = await purge()
                except Exception:  # a failed clean-up is retried at the next interval
                    logger.exception("purge of expired %s failed", name)
                else:
                    if purged:
                        logger.info("purged %d expired %s", purged, name)

    async with in_background(purge_forever):
        yield


def _debug_printer(stream: TextIO) -> Callable[[dict[str, Any]], None]:
    def show(event: dict[str, Any]) -> None:
        if event.get("event") not in DEBUG_EVENTS:
            return
        line = json.dumps(
            {
                "pml_routing": event.get("event"),
                "request_id": event.get("request_id"),
                "decided_by": event.get("decided_by"),
                **(event.get("details") or {}),
            },
            ensure_ascii=False,
            default=str,
        )
        stream.write(line + "\n")
        stream.flush()

    return show
