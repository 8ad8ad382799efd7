"""Memory writes at the enforcement point: sensitivity decides who consents, the model can
only raise it, a credential is never let through, and a verdict is asked for once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from test_enforcer import Recorder

from pml.config import PermissionsSettings, PolicySettings
from pml.errors import ApprovalRequired, PermissionDenied
from pml.policy.capability_map import CapabilityMap
from pml.policy.enforcer import PolicyEnforcer
from pml.policy.gate import PolicyGate
from pml.policy.memory_gate import LOW_CONSENT, MemoryGate
from pml.policy.permissions import PermissionRules
from pml.policy.router import IntentRouter
from pml.registry.scope import Scope
from pml.sections_agent import MemorySettings

pytestmark = pytest.mark.anyio

SCOPE = Scope("acme", "webapp", "erwan")
INTENT = "remember this in the knowledge graph"


def entities(fact: str) -> dict[str, Any]:
    return {"entities": [{"name": "n", "entityType": "fact", "observations": [fact]}]}


class Model:
    """A stand-in ``JsonCompleter`` answering one fixed verdict (or failing), counting calls."""

    def __init__(self, answer: object) -> None:
        self.answer = answer
        self.calls = 0

    async def complete_json(
        self, system: str, user: str, schema_name: str, json_schema: Mapping[str, Any]
    ) -> dict[str, Any]:
        self.calls += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer  # type: ignore[return-value]


def enforcer(
    recorder: Recorder, gate: MemoryGate | None, permissions: PermissionsSettings | None = None
) -> PolicyEnforcer:
    return PolicyEnforcer(
        router=IntentRouter(),
        gate=PolicyGate(PolicySettings(), version="v1"),
        capabilities=CapabilityMap(),
        rules=PermissionRules.from_settings(permissions or PermissionsSettings()),
        grants=None,
        auditor=recorder,
        memory=gate,
    )


async def test_a_low_write_goes_on_without_asking_and_is_audited() -> None:
    recorder = Recorder()
    checks = enforcer(recorder, MemoryGate(MemorySettings()))
    request = await checks.begin(SCOPE, INTENT, source="test")
    decided = await checks.authorize(request, "memory", "create_entities", entities("metric"))
    assert decided == LOW_CONSENT
    [(_, details, by)] = recorder.named("POSTHOOK_MEMORY")
    assert (details["outcome"], details["sensitivity"], by) == ("applied", "low", LOW_CONSENT)
    assert "metric" in details["text"]


async def test_without_the_gate_memory_writes_ask_as_before() -> None:
    checks = enforcer(Recorder(), None)
    request = await checks.begin(SCOPE, INTENT, source="test")
    with pytest.raises(ApprovalRequired):
        await checks.authorize(request, "memory", "create_entities", entities("metric"))


async def test_a_credential_is_refused_even_where_a_rule_allows_and_never_audited_as_text() -> None:
    recorder = Recorder()
    allow = PermissionsSettings(allow=["memory:*"])
    checks = enforcer(recorder, MemoryGate(MemorySettings()), allow)
    request = await checks.begin(SCOPE, INTENT, source="test")
    secret = "password is Tr0ub4dor&3-horse"
    with pytest.raises(PermissionDenied) as refused:
        await checks.authorize(request, "memory", "create_entities", entities(f"my {secret}"))
    assert "memory:credential" in refused.value.message
    assert "Tr0ub4dor" not in repr(recorder.events)


@pytest.mark.parametrize(
    ("tool", "fact"),
    [
        ("create_entities", "my card number is 4111 1111 1111 1111"),
        ("add_observations", "she takes 50 mg of sertraline daily"),
        ("delete_entities", "metric units"),
    ],
)
async def test_sensitive_writes_and_deletions_ask_a_person_whatever_the_rule(
    tool: str, fact: str
) -> None:
    recorder = Recorder()
    allow = PermissionsSettings(allow=["memory:*"])
    checks = enforcer(recorder, MemoryGate(MemorySettings()), allow)
    request = await checks.begin(SCOPE, INTENT, source="test")
    with pytest.raises(ApprovalRequired) as asked:
        await checks.authorize(request, "memory", tool, entities(fact))
    assert str(asked.value.data["reason"]).startswith("memory:sensitive (")
    assert "4111" not in repr(recorder.named("POSTHOOK_MEMORY"))


async def test_auto_store_none_asks_for_low_writes_too() -> None:
    checks = enforcer(Recorder(), MemoryGate(MemorySettings(auto_store="none")))
    request = await checks.begin(SCOPE, INTENT, source="test")
    with pytest.raises(ApprovalRequired):
        await checks.authorize(request, "memory", "create_entities", entities("metric"))


async def test_a_deny_rule_still_wins_over_a_low_write() -> None:
    deny = PermissionsSettings(deny=["memory:create_entities"])
    checks = enforcer(Recorder(), MemoryGate(MemorySettings()), deny)
    request = await checks.begin(SCOPE, INTENT, source="test")
    with pytest.raises(PermissionDenied):
        await checks.authorize(request, "memory", "create_entities", entities("metric"))


async def test_the_model_can_raise_a_verdict_and_is_asked_once_per_write() -> None:
    model = Model({"level": "high", "reasons": ["a family matter"]})
    gate = MemoryGate(MemorySettings(), llm=model, model="small")
    checks = enforcer(Recorder(), gate)
    request = await checks.begin(SCOPE, INTENT, source="test")
    reasons: list[str] = []
    for _ in range(3):
        with pytest.raises(ApprovalRequired) as asked:
            await checks.authorize(request, "memory", "create_entities", entities("uncle visits"))
        reasons.append(str(asked.value.data["reason"]))
    assert all("a family matter" in reason for reason in reasons)
    assert model.calls == 1


@pytest.mark.parametrize(
    "answer",
    [
        {"level": "low", "reasons": []},
        RuntimeError("endpoint down"),
        {"level": "nonsense"},
        ["not", "an", "object"],
    ],
    ids=["lower", "failing", "invalid", "not-object"],
)
async def test_the_model_never_lowers_a_verdict_and_its_failures_leave_the_heuristics(
    answer: object,
) -> None:
    gate = MemoryGate(MemorySettings(), llm=Model(answer))
    card = await gate.verdict("create_entities", entities("card 4111 1111 1111 1111"))
    plain = await gate.verdict("create_entities", entities("metric units"))
    assert card.level == "high"
    assert plain.level == "low"


async def test_llm_classify_off_never_asks_the_model() -> None:
    model = Model({"level": "high", "reasons": ["x"]})
    gate = MemoryGate(MemorySettings(llm_classify=False), llm=model)
    verdict = await gate.verdict("create_entities", entities("metric units"))
    assert verdict.level == "low"
    assert model.calls == 0


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"entities": "not a list"},
        {"entities": [{"observations": [None, 1, 2.5, True]}]},
        {"deep": [[[[[[[[[["x"]]]]]]]]]] * 50},
        {"k" * 10_000: "v" * 1_000_000},
        {"bidi": "\u202emetric\u200b units"},
    ],
    ids=["empty", "wrong-type", "non-strings", "deep", "huge", "bidi"],
)
async def test_hostile_arguments_are_classified_without_raising(arguments: dict[str, Any]) -> None:
    gate = MemoryGate(MemorySettings())
    verdict = await gate.verdict("create_entities", arguments)
    assert verdict.level in ("low", "high", "credential")
