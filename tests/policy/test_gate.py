"""The policy gate: the built-in table, configured rows, needs, exceptions, the fallback row,
caching, and the validation of ``[policy.intents.<name>]`` in a real TOML file."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pml.config import IntentPolicySettings, PolicySettings, load_settings
from pml.errors import ConfigError
from pml.policy.gate import DEFAULT_INTENT_POLICIES, PolicyGate
from pml.policy.model import (
    CAPABILITIES,
    FALLBACK_INTENT,
    INTENTS,
    PermissionCapability,
    PolicyDecision,
    RouterOutput,
)
from samples import write

VERSION = "3f2a9c01ab12"
NOT_CHAT = [intent for intent in INTENTS if intent != "chat_only"]


def router(intent: str, *needs: PermissionCapability, decided_by: str = "test") -> RouterOutput:
    return RouterOutput(
        intent=intent, needs=needs, risk_level="low", confidence=0.9, decided_by=decided_by
    )


def gate(rows: dict[str, IntentPolicySettings] | None = None, version: str = VERSION) -> PolicyGate:
    return PolicyGate(PolicySettings(intents=rows or {}), version=version)


def row(
    allowed: list[str] | None = None,
    forbidden: list[str] | None = None,
    exceptions: list[str] | None = None,
) -> IntentPolicySettings:
    return IntentPolicySettings.model_validate(
        {"allowed": allowed or [], "forbidden": forbidden or [], "exceptions": exceptions or []}
    )


def refused(
    decision: PolicyDecision, capability: str, server: str = "srv", tool: str = "t"
) -> bool:
    return PolicyGate.forbidding_rule(decision, server, tool, capability) is not None


# --- the built-in table -------------------------------------------------------------------


def test_every_intent_has_a_built_in_row_and_is_decided_by_it() -> None:
    assert set(INTENTS) <= set(DEFAULT_INTENT_POLICIES)
    assert FALLBACK_INTENT in INTENTS
    policy = gate()
    for intent in INTENTS:
        decision = policy.evaluate(router(intent))
        assert decision.intent == intent
        assert decision.rule == f"policy:{intent}"


@pytest.mark.parametrize("intent", sorted(DEFAULT_INTENT_POLICIES))
def test_built_in_rows_name_only_real_capabilities_and_never_allow_what_they_forbid(
    intent: str,
) -> None:
    built_in = DEFAULT_INTENT_POLICIES[intent]
    assert set(built_in.allowed) <= set(CAPABILITIES)
    assert set(built_in.forbidden) <= {*CAPABILITIES, "*"}
    assert not set(built_in.allowed) & set(built_in.forbidden)
    decision = gate().evaluate(router(intent))
    assert not decision.allowed & decision.forbidden


def test_chat_only_forbids_every_capability_even_the_ones_it_needs() -> None:
    decision = gate().evaluate(router("chat_only", *CAPABILITIES))

    assert decision.allowed == frozenset()
    assert set(CAPABILITIES) <= decision.forbidden
    assert "*" in decision.forbidden
    for capability in CAPABILITIES:
        assert PolicyGate.forbidding_rule(decision, "time", "now", capability) == (
            f"policy:chat_only forbids {capability}"
        )


def test_file_task_reads_files_but_does_not_write_execute_or_reach_the_network() -> None:
    decision = gate().evaluate(router("file_task"))

    for capability in ("file_write", "system_execute", "network", "web_search", "browser"):
        assert PolicyGate.forbidding_rule(decision, "fs", "tool", capability) == (
            f"policy:file_task forbids {capability}"
        )
    assert PolicyGate.forbidding_rule(decision, "fs", "read_file", "file_read") is None
    assert "file_read" in decision.allowed
    assert "file_write" not in decision.allowed


def test_file_edit_may_write_files_but_not_execute() -> None:
    decision = gate().evaluate(router("file_edit"))

    assert not refused(decision, "file_write")
    assert not refused(decision, "file_read")
    assert refused(decision, "system_execute")
    assert refused(decision, "network")


@pytest.mark.parametrize("intent", NOT_CHAT)
def test_unknown_tools_are_never_forbidden_outside_chat_only(intent: str) -> None:
    decision = gate().evaluate(router(intent))

    assert "unknown" not in decision.forbidden
    assert PolicyGate.forbidding_rule(decision, "mystery", "do_it", "unknown") is None


def test_chat_only_forbids_unknown_tools_too() -> None:
    decision = gate().evaluate(router("chat_only"))

    assert PolicyGate.forbidding_rule(decision, "mystery", "do_it", "unknown") == (
        "policy:chat_only forbids unknown"
    )


@pytest.mark.parametrize(
    "intent",
    [
        "deploy",
        "",
        "FILE_TASK",
        "file_task ",
        " chat_only",
        "chat_only\u202e",
        "chat\u200bonly",
        "'; DROP TABLE audit_events; --",
        "policy:file_edit",
        "x" * 100_000,
        "__class__",
    ],
)
def test_an_intent_the_table_does_not_know_gets_the_general_row(intent: str) -> None:
    decision = gate().evaluate(router(intent))
    general = gate().evaluate(router(FALLBACK_INTENT))

    assert decision.intent == "general"
    assert decision.rule == "policy:general"
    assert decision == general
    assert refused(decision, "file_write")
    assert not refused(decision, "file_read")


# --- needs --------------------------------------------------------------------------------


def test_needs_never_remove_a_forbidden_capability() -> None:
    # An LLM that claims file_task needs file_write does not make it writable.
    decision = gate().evaluate(router("file_task", "file_write", "system_execute"))

    assert "file_write" not in decision.allowed
    assert "system_execute" not in decision.allowed
    assert PolicyGate.forbidding_rule(decision, "fs", "write_file", "file_write") == (
        "policy:file_task forbids file_write"
    )
    assert decision == gate().evaluate(router("file_task"))


def test_needs_that_are_not_forbidden_are_allowed() -> None:
    plain = gate().evaluate(router("general"))
    decision = gate().evaluate(router("general", "unknown", "file_read"))

    assert "unknown" not in plain.allowed
    assert decision.allowed == plain.allowed | {"unknown"}
    assert decision.forbidden == plain.forbidden


def test_needs_are_allowed_by_a_configured_row_unless_it_forbids_them() -> None:
    policy = gate({"deploy": row(allowed=["time"], forbidden=["network"])})

    decision = policy.evaluate(router("deploy", "system_execute", "network"))

    assert decision.allowed == {"time", "system_execute"}
    assert refused(decision, "network")


@given(
    intent=st.sampled_from([*INTENTS, "nope", ""]),
    needs=st.lists(st.sampled_from(CAPABILITIES), max_size=len(CAPABILITIES)),
)
def test_no_decision_ever_allows_what_it_forbids(
    intent: str, needs: list[PermissionCapability]
) -> None:
    policy = gate()
    decision = policy.evaluate(router(intent, *needs))
    without = policy.evaluate(router(intent))

    assert not decision.allowed & decision.forbidden
    assert decision.forbidden == without.forbidden
    assert decision.allowed == without.allowed | (set(needs) - without.forbidden)


# --- configured rows ----------------------------------------------------------------------


def test_a_configured_row_replaces_the_built_in_one() -> None:
    policy = gate({"file_task": row(allowed=["file_read", "file_write"], forbidden=["network"])})

    decision = policy.evaluate(router("file_task"))

    assert decision.rule == "config:policy.intents.file_task"
    assert decision.intent == "file_task"
    assert decision.allowed == {"file_read", "file_write"}
    assert decision.forbidden == {"network"}
    assert PolicyGate.forbidding_rule(decision, "fs", "write_file", "file_write") is None
    assert PolicyGate.forbidding_rule(decision, "fs", "system", "system_execute") is None
    assert PolicyGate.forbidding_rule(decision, "web", "get", "network") == (
        "config:policy.intents.file_task forbids network"
    )
    # The other rows are untouched.
    other = policy.evaluate(router("file_edit"))
    assert other.rule == "policy:file_edit"
    assert other == gate().evaluate(router("file_edit"))


def test_an_empty_configured_row_forbids_nothing() -> None:
    decision = gate({"chat_only": IntentPolicySettings()}).evaluate(router("chat_only"))

    assert decision.rule == "config:policy.intents.chat_only"
    assert decision.forbidden == frozenset()
    assert decision.allowed == frozenset()
    for capability in CAPABILITIES:
        assert not refused(decision, capability)


def test_a_configured_row_may_name_a_new_intent() -> None:
    policy = gate({"deploy": row(allowed=["system_execute"], forbidden=["browser", "unknown"])})

    decision = policy.evaluate(router("deploy"))

    assert decision.intent == "deploy"
    assert decision.rule == "config:policy.intents.deploy"
    assert not refused(decision, "system_execute")
    assert PolicyGate.forbidding_rule(decision, "m", "x", "unknown") == (
        "config:policy.intents.deploy forbids unknown"
    )
    # Without the configuration the same name falls back to the general row.
    assert gate().evaluate(router("deploy")).rule == "policy:general"


def test_a_configured_general_row_becomes_the_fallback_for_unknown_intents() -> None:
    policy = gate({"general": row(allowed=["time"], forbidden=["*"], exceptions=["time:*"])})

    decision = policy.evaluate(router("never-heard-of-it"))

    assert decision.intent == "general"
    assert decision.rule == "config:policy.intents.general"
    assert PolicyGate.forbidding_rule(decision, "fs", "read_file", "file_read") == (
        "config:policy.intents.general forbids file_read"
    )
    assert PolicyGate.forbidding_rule(decision, "time", "now", "time") is None


def test_a_configured_star_forbids_every_capability() -> None:
    decision = gate({"quiet": row(allowed=["time"], forbidden=["*"])}).evaluate(
        router("quiet", "time")
    )

    assert decision.allowed == frozenset()
    assert set(CAPABILITIES) <= decision.forbidden
    for capability in CAPABILITIES:
        assert refused(decision, capability)


# --- exceptions ---------------------------------------------------------------------------


def test_an_exception_lets_a_forbidden_capability_through_for_matching_tools_only() -> None:
    policy = gate(
        {
            "file_task": row(
                allowed=["file_read"], forbidden=["file_write"], exceptions=["fs:write_*"]
            )
        }
    )
    decision = policy.evaluate(router("file_task"))

    assert decision.exceptions == ("fs:write_*",)
    assert PolicyGate.forbidding_rule(decision, "fs", "write_file", "file_write") is None
    assert PolicyGate.forbidding_rule(decision, "fs", "write_", "file_write") is None
    for server, tool in [
        ("fsx", "write_file"),
        ("xfs", "write_file"),
        ("fs", "delete_file"),
        ("fs", "rewrite_file"),
        ("FS", "write_file"),
        ("fs", "WRITE_FILE"),
        ("fs", "write"),
        ("", "fs:write_file"),
    ]:
        assert PolicyGate.forbidding_rule(decision, server, tool, "file_write") == (
            "config:policy.intents.file_task forbids file_write"
        ), (server, tool)


def test_an_exception_applies_whatever_the_capability_is() -> None:
    policy = gate({"locked": row(forbidden=["*"], exceptions=["time:now"])})
    decision = policy.evaluate(router("locked"))

    for capability in CAPABILITIES:
        assert PolicyGate.forbidding_rule(decision, "time", "now", capability) is None
        assert refused(decision, capability, "time", "now_utc")
        assert refused(decision, capability, "time", "no")


@pytest.mark.parametrize(
    ("pattern", "matching", "not_matching"),
    [
        ("fs:write_[ab]", ["write_a", "write_b"], ["write_c", "write_ab", "write_[ab]"]),
        ("fs:write_[!a]", ["write_b", "write_z"], ["write_a", "write_"]),
        ("fs:wr?te", ["write", "wrxte"], ["wrte", "wriite"]),
        ("fs:write.file", ["write.file"], ["write_file", "writeXfile"]),
        ("fs:write+", ["write+"], ["writee", "write"]),
        ("fs:(a|b)", ["(a|b)"], ["a", "b"]),
        ("fs:^write$", ["^write$"], ["write"]),
        ("fs:[*]", ["*"], ["x", "[*]"]),
    ],
)
def test_exception_patterns_are_shell_globs_not_regular_expressions(
    pattern: str, matching: list[str], not_matching: list[str]
) -> None:
    decision = gate({"x": row(forbidden=["file_write"], exceptions=[pattern])}).evaluate(
        router("x")
    )

    for tool in matching:
        assert PolicyGate.forbidding_rule(decision, "fs", tool, "file_write") is None, tool
    for tool in not_matching:
        assert refused(decision, "file_write", "fs", tool), tool


def test_a_built_in_row_has_no_exceptions() -> None:
    for intent in INTENTS:
        assert gate().evaluate(router(intent)).exceptions == ()


def test_forbidding_rule_ignores_capabilities_that_are_not_forbidden() -> None:
    decision = gate().evaluate(router("lookup_search"))

    assert PolicyGate.forbidding_rule(decision, "web", "search", "web_search") is None
    assert PolicyGate.forbidding_rule(decision, "fs", "read_file", "file_read") == (
        "policy:lookup_search forbids file_read"
    )


# --- caching and versions -----------------------------------------------------------------


def test_equal_inputs_give_equal_decisions_whoever_classified_them() -> None:
    policy = gate()

    first = policy.evaluate(router("file_task", "file_read", "time", decided_by="llm:x"))
    second = policy.evaluate(
        RouterOutput(
            intent="file_task",
            needs=("file_read", "time"),
            risk_level="high",
            confidence=0.1,
            decided_by="heuristic:read",
        )
    )
    reordered = policy.evaluate(router("file_task", "time", "file_read"))

    assert first == second == reordered
    assert first == gate().evaluate(router("file_task", "file_read", "time"))


def test_a_cached_decision_does_not_leak_into_another_gate() -> None:
    built_in = gate()
    configured = gate({"file_task": row(allowed=["file_write"])}, version="other")

    assert built_in.evaluate(router("file_task")).rule == "policy:file_task"
    decision = configured.evaluate(router("file_task"))
    assert decision.rule == "config:policy.intents.file_task"
    assert decision.policy_version == "other"
    assert built_in.evaluate(router("file_task")).policy_version == VERSION


def test_decisions_stay_correct_after_many_distinct_intents() -> None:
    policy = gate({"deploy": row(forbidden=["browser"])})
    general = policy.evaluate(router(FALLBACK_INTENT))

    for index in range(5000):
        assert policy.evaluate(router(f"intent-{index}")) == general
    assert policy.evaluate(router("deploy")).rule == "config:policy.intents.deploy"
    assert policy.evaluate(router("intent-4999", "unknown")).allowed == (
        general.allowed | {"unknown"}
    )


@pytest.mark.parametrize("version", ["3f2a9c01ab12", "", "v\u202e2", "x" * 1000])
def test_the_policy_version_is_carried_by_every_decision(version: str) -> None:
    policy = gate(version=version)

    assert policy.version == version
    for intent in [*INTENTS, "unheard-of"]:
        assert policy.evaluate(router(intent)).policy_version == version


def test_a_decision_serialises_to_sorted_lists() -> None:
    decision = gate(version="abc").evaluate(router("chat_only"))
    data = decision.to_dict()

    assert data["forbidden"] == sorted({"*", *CAPABILITIES})
    assert data["allowed"] == []
    assert data["exceptions"] == []
    assert data["policy_version"] == "abc"
    assert data["rule"] == "policy:chat_only"


def test_a_router_output_with_unhashable_needs_is_refused_not_guessed() -> None:
    hostile = RouterOutput(
        intent="file_task",
        needs=["file_write"],  # type: ignore[arg-type]  # a list, as a buggy caller sends
        risk_level="low",
        confidence=1.0,
        decided_by="test",
    )

    with pytest.raises(TypeError):
        gate().evaluate(hostile)


# --- validation of [policy.intents.<name>] ------------------------------------------------


def load(tmp_path: Path, text: str) -> PolicySettings:
    path = write(tmp_path / "pml.toml", text)
    return load_settings(path, environ={}, cwd=tmp_path).policy


def test_a_valid_configured_row_is_loaded_and_used_by_the_gate(tmp_path: Path) -> None:
    policy = load(
        tmp_path,
        '[policy.intents.file_task]\nallowed = ["file_read", "file_write"]\n'
        'forbidden = ["network"]\nexceptions = ["fs:write_*"]\n'
        '[policy.intents.deploy]\nforbidden = ["*"]\n',
    )

    assert policy.intents["file_task"].exceptions == ["fs:write_*"]
    built = PolicyGate(policy, version="v1")
    decision = built.evaluate(router("file_task"))
    assert decision.rule == "config:policy.intents.file_task"
    assert not refused(decision, "file_write")
    assert refused(decision, "network", "web", "get")
    assert PolicyGate.forbidding_rule(decision, "fs", "write_file", "network") is None
    assert refused(built.evaluate(router("deploy")), "time")


@pytest.mark.parametrize(
    ("toml", "where"),
    [
        ('[policy.intents.file_task]\nallowed = ["file_reed"]\n', "file_task.allowed[0]"),
        ('[policy.intents.x]\nforbidden = ["shell"]\n', "x.forbidden[0]"),
        ('[policy.intents.x]\nallowed = ["*"]\n', "x.allowed[0]"),
        ('[policy.intents.x]\nallowed = ["FILE_READ"]\n', "x.allowed[0]"),
        ('[policy.intents.x]\nallowed = ["file_read\u202e"]\n', "x.allowed[0]"),
        ('[policy.intents.x]\nallowed = [" file_read"]\n', "x.allowed[0]"),
        ('[policy.intents.x]\nforbidden = ["file_read", 3]\n', "x.forbidden[1]"),
        ('[policy.intents.x]\nforbidden = "file_write"\n', "x.forbidden"),
        ('[policy.intents.x]\nallowed = "file_read"\n', "x.allowed"),
        ('[policy.intents.x]\nexceptions = "fs:*"\n', "x.exceptions"),
        ('[policy.intents.x]\nexceptions = [["fs:*"]]\n', "x.exceptions[0]"),
        ("[policy.intents.x]\nallowed = { file_read = true }\n", "x.allowed"),
        ('[policy.intents.x]\ncolour = "red"\n', "x.colour"),
        ("[policy]\nintents = 3\n", "policy.intents"),
        ('[policy]\nintents = { x = "file_read" }\n', "intents.x"),
    ],
)
def test_an_invalid_configured_row_is_a_config_error(tmp_path: Path, toml: str, where: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, toml)

    assert str(tmp_path / "pml.toml") in str(caught.value)
    assert where in str(caught.value)
    assert caught.value.code == "CONFIG_ERROR"


def test_an_invalid_row_from_the_environment_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(
            environ={"PML_POLICY__INTENTS__X__ALLOWED": '["root"]'},
            cwd=tmp_path,
        )

    assert "environment" in str(caught.value)
    assert "allowed" in str(caught.value)
