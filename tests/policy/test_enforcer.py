"""The enforcement point in isolation: what it decides, what it audits, and that whatever
breaks inside it refuses the call (fail closed)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from pml.config import PermissionsSettings, PolicySettings, SandboxSettings
from pml.errors import ApprovalRequired, InvalidInput, PermissionDenied, PolicyDenied
from pml.execution.caller import Budget
from pml.execution.hooks import FinishedRun, PostHooks
from pml.policy.capability_map import CapabilityMap
from pml.policy.enforcer import PolicyEnforcer, args_summary
from pml.policy.gate import PolicyGate
from pml.policy.model import RouterOutput
from pml.policy.permissions import PermissionRules
from pml.policy.router import IntentRouter
from pml.registry.scope import Scope

pytestmark = pytest.mark.anyio

SCOPE = Scope("acme", "webapp", "erwan")


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any], str | None]] = []

    def emit(
        self,
        event: str,
        *,
        scope: Scope,
        details: Mapping[str, Any],
        decided_by: str | None = None,
        actor: str | None = None,
        request_id: str | None = None,
    ) -> None:
        self.events.append((event, dict(details), decided_by))

    def named(self, event: str) -> list[tuple[str, dict[str, Any], str | None]]:
        return [e for e in self.events if e[0] == event]


class BrokenMap(CapabilityMap):
    def capability_of(self, server: str, tool: str) -> Any:
        raise RuntimeError("map exploded")


class BrokenRouter:
    async def route(self, intent: str) -> RouterOutput:
        raise RuntimeError("router exploded")


def enforcer(
    recorder: Recorder,
    *,
    capabilities: CapabilityMap | None = None,
    router: Any = None,
    permissions: PermissionsSettings | None = None,
    mode: Any = "enforce",
) -> PolicyEnforcer:
    return PolicyEnforcer(
        router=router or IntentRouter(),
        gate=PolicyGate(PolicySettings(), version="v1"),
        capabilities=capabilities or CapabilityMap(),
        rules=PermissionRules.from_settings(permissions or PermissionsSettings()),
        grants=None,
        auditor=recorder,
        mode=mode,
    )


async def test_begin_audits_the_router_output_and_the_decision() -> None:
    recorder = Recorder()
    request = await enforcer(recorder).begin(SCOPE, "read the config file", source="test")
    assert request.router.intent == "file_task"
    assert [e[0] for e in recorder.events] == ["ROUTER_OUTPUT", "POLICY_DECISION"]
    assert recorder.events[1][2] == "policy:file_task"


async def test_a_blank_intent_is_the_callers_error() -> None:
    with pytest.raises(InvalidInput):
        await enforcer(Recorder()).begin(SCOPE, "   ", source="test")


async def test_a_broken_router_falls_back_to_the_read_only_row() -> None:
    recorder = Recorder()
    police = enforcer(recorder, router=BrokenRouter())
    request = await police.begin(SCOPE, "delete everything", source="test")
    assert request.router.decided_by == "fallback:router-error"
    assert request.decision.intent == "general"
    with pytest.raises(PolicyDenied):
        await police.authorize(request, "filesystem", "write_file", {"path": "/x"})


async def test_a_broken_capability_map_refuses_every_call() -> None:
    recorder = Recorder()
    police = enforcer(recorder, capabilities=BrokenMap())
    request = await police.begin(SCOPE, "what time is it", source="test")
    with pytest.raises(PolicyDenied) as raised:
        await police.authorize(request, "time", "get_current_time", {})
    assert raised.value.data["rule"] == "fail-closed"
    assert recorder.named("POLICY_DENIED")[-1][2] == "fail-closed"
    assert police.hides(request, "time", "get_current_time") is True


async def test_allow_ask_and_deny_are_decided_and_audited() -> None:
    recorder = Recorder()
    rules = PermissionsSettings(deny=["filesystem:move_file"], allow=["filesystem:write_file"])
    police = enforcer(recorder, permissions=rules)
    request = await police.begin(SCOPE, "/system rebuild the project", source="test")
    assert await police.authorize(request, "filesystem", "write_file", {}) == (
        "permissions.allow[0]:filesystem:write_file"
    )
    with pytest.raises(PermissionDenied):
        await police.authorize(request, "filesystem", "move_file", {})
    with pytest.raises(ApprovalRequired) as asked:
        await police.authorize(
            request, "shell", "run", {"command": "make", "token": "sk-live-1234567890abcdef"}
        )
    assert asked.value.data["reason"] == "default:ask:system_execute"
    assert "sk-live" not in asked.value.data["args_summary"]
    outcomes = [e[1].get("outcome") for e in recorder.named("PERMISSION_CHECK")]
    assert outcomes == ["allow", "ask"]
    assert recorder.named("PERMISSION_DENIED")[0][2] == "permissions.deny[0]:filesystem:move_file"


async def test_audit_mode_lets_a_forbidden_call_through_but_not_a_deny_rule() -> None:
    recorder = Recorder()
    rules = PermissionsSettings(allow=["filesystem:write_file"], deny=["shell:*"])
    police = enforcer(recorder, permissions=rules, mode="audit")
    request = await police.begin(SCOPE, "read the config file", source="test")
    await police.authorize(request, "filesystem", "write_file", {})
    assert recorder.named("POLICY_DENIED")[0][1]["enforced"] is False
    with pytest.raises(PermissionDenied):
        await police.authorize(request, "shell", "run", {})


def test_argument_summaries_are_short_and_scrubbed() -> None:
    summary = args_summary({"path": "/w/" + "x" * 1000, "api_key": "AKIAIOSFODNN7EXAMPLE"})
    assert len(summary) == 200
    assert summary.endswith("…")
    assert "AKIA" not in summary


class Hook:
    def __init__(self, name: str, *, required: bool, fails: bool, seen: list[str]) -> None:
        self.name, self.required, self._fails, self._seen = name, required, fails, seen

    async def __call__(self, run: FinishedRun) -> None:
        self._seen.append(self.name)
        if self._fails:
            raise RuntimeError(f"{self.name} exploded")


async def test_a_failing_post_hook_is_audited_and_the_others_still_run() -> None:
    recorder = Recorder()
    police = enforcer(recorder)
    request = await police.begin(SCOPE, "what time is it", source="test")
    seen: list[str] = []
    hooks = PostHooks(
        [
            Hook("first", required=False, fails=True, seen=seen),
            Hook("second", required=False, fails=False, seen=seen),
        ],
        policy=police,
    )
    run = FinishedRun(SCOPE, request, Budget.start(SandboxSettings()), 1.0)
    await hooks.run(run)
    assert seen == ["first", "second"]
    [failed] = recorder.named("POSTHOOK_FAILED")
    assert failed[1] == {"hook": "first", "code": "INTERNAL_ERROR"}
    required = PostHooks([Hook("capture", required=True, fails=True, seen=seen)], policy=police)
    with pytest.raises(RuntimeError):
        await required.run(run)
