"""``LocalRunner``: code handed over by the gateway runs on this machine, in the real sandbox,
against this machine's servers, through this machine's enforcement point; a failure of any
kind is in ``LocalRun.error``, never raised (SPEC §9.2)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import anyio
import pytest
import sqlalchemy as sa

from client.connecting import ECHO_LOCAL, LOCAL, Machine, open_machine
from pml.client.runner import LocalRun, handoff_fields
from pml.errors import InvalidInput, PmlError
from pml.storage.tables import audit_events
from samples import make

pytestmark = pytest.mark.anyio

LIMIT_S = 20.0  # the bound on every run: generous, a slow machine must not fail a test
BUSY = f'await mcp.{LOCAL}.echo(text="first")\nwhile True:\n    pass'


@pytest.fixture
async def machine(tmp_path: Path) -> AsyncGenerator[Machine]:
    async with open_machine(tmp_path / "client") as opened:
        yield opened


async def run(machine: Machine, handoff: dict[str, Any]) -> LocalRun:
    """``handoff`` run (with an intent, as the gateway always sends one, unless it has one)."""
    with anyio.fail_after(LIMIT_S):
        return await machine.runner.run({"intent": "echo a text", **handoff})


def failed(outcome: LocalRun, code: str) -> PmlError:
    """The run's error, checked to be ``code`` in the answer and the trace too."""
    assert outcome.error is not None, outcome.value
    assert outcome.error.code == code, outcome.error.to_dict()
    assert not outcome.success
    answer = outcome.answer()
    assert answer == {
        "status": "error",
        "error": outcome.error.to_dict(),
        "workflowId": outcome.workflow_id,
        "routing": "local",
        "executedOn": "client",
    }
    trace = outcome.trace()
    assert trace["success"] is False
    assert trace["error"].startswith(f"{code}: ")
    assert json.loads(json.dumps([answer, trace])) == [answer, trace]  # sent as they are
    return outcome.error


async def test_handed_code_runs_against_this_machines_server(machine: Machine) -> None:
    handoff = {"workflowId": "wf_1", "code": ECHO_LOCAL, "args": {"text": "ünïcode ✓"}}
    outcome = await run(machine, handoff)
    assert outcome.error is None
    assert outcome.value == {"server": LOCAL, "tool": "echo", "args": {"text": "ünïcode ✓"}}
    assert machine.upstream.calls == [("echo", {"text": "ünïcode ✓"})]
    answer = outcome.answer()
    assert answer == {
        "status": "success",
        "result": outcome.value,
        "logs": [],
        "toolsUsed": [f"{LOCAL}:echo"],
        "executionTimeMs": answer["executionTimeMs"],
        "capture": "queued",
        "workflowId": "wf_1",
        "routing": "local",
        "executedOn": "client",
    }
    assert 0 < answer["executionTimeMs"] < LIMIT_S * 1000


async def test_the_trace_says_which_tools_ran_but_never_with_what(machine: Machine) -> None:
    secret = "sk-live-0123456789abcdef"
    code = f'await mcp.{LOCAL}.echo(text=args["text"])\nreturn await mcp.{LOCAL}.mixed()'
    outcome = await run(machine, {"workflowId": "wf_2", "code": code, "args": {"text": secret}})
    assert outcome.error is None
    trace = outcome.trace()
    assert set(trace) == {"workflowId", "success", "durationMs", "taskResults"}
    assert (trace["workflowId"], trace["success"]) == ("wf_2", True)
    assert trace["durationMs"] == round(outcome.duration_ms, 3) > 0
    assert [task["tool"] for task in trace["taskResults"]] == [f"{LOCAL}:echo", f"{LOCAL}:mixed"]
    for task in trace["taskResults"]:
        assert set(task) == {"tool", "argsDigest", "durationMs", "success"}
        assert re.fullmatch(r"[0-9a-f]{16}", task["argsDigest"])
        assert task["success"] is True
        assert 0 <= task["durationMs"] <= trace["durationMs"]
    assert secret not in json.dumps(trace)


async def test_print_output_is_in_the_answers_logs(machine: Machine) -> None:
    code = f'print("hello", 42)\nreturn await mcp.{LOCAL}.echo(text="x")'
    outcome = await run(machine, {"workflowId": "wf_3", "code": code})
    assert outcome.error is None
    assert outcome.answer()["logs"] == ["hello 42"]


@pytest.mark.parametrize(
    ("handoff", "field"),
    [
        ({"code": ECHO_LOCAL}, "workflowId"),
        ({"workflowId": "", "code": ECHO_LOCAL}, "workflowId"),
        ({"workflowId": "w" * 65, "code": ECHO_LOCAL}, "workflowId"),
        ({"workflowId": "w" * 1_000_000, "code": ECHO_LOCAL}, "workflowId"),
        ({"workflowId": 12, "code": ECHO_LOCAL}, "workflowId"),
        ({"workflowId": ["wf"], "code": ECHO_LOCAL}, "workflowId"),
        ({"workflowId": "wf_4"}, "code"),
        ({"workflowId": "wf_4", "code": None}, "code"),
        ({"workflowId": "wf_4", "code": 42}, "code"),
        ({"workflowId": "wf_4", "code": [ECHO_LOCAL]}, "code"),
        ({"workflowId": "wf_4", "code": ECHO_LOCAL, "args": [1, 2]}, "args"),
        ({"workflowId": "wf_4", "code": ECHO_LOCAL, "args": "text=x"}, "args"),
        ({"workflowId": "wf_4", "code": ECHO_LOCAL, "args": 0}, "args"),
    ],
    ids=[
        "no-workflow-id",
        "empty-workflow-id",
        "65-char-workflow-id",
        "huge-workflow-id",
        "int-workflow-id",
        "list-workflow-id",
        "no-code",
        "null-code",
        "int-code",
        "list-code",
        "list-args",
        "string-args",
        "zero-args",
    ],
)
async def test_a_malformed_handoff_is_an_error_in_the_run_never_raised(
    machine: Machine, handoff: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        handoff_fields(handoff)
    assert caught.value.data == {"field": field}
    error = failed(await run(machine, handoff), "INVALID_INPUT")
    assert error.data == {"field": field}
    assert machine.upstream.calls == []


async def test_a_rejected_workflow_id_is_never_echoed_or_traced(machine: Machine) -> None:
    hostile = "wf_" + "x" * 100_000
    outcome = await run(machine, {"workflowId": hostile, "code": ECHO_LOCAL})
    failed(outcome, "INVALID_INPUT")
    assert outcome.workflow_id == ""
    assert hostile not in json.dumps(outcome.answer()) + json.dumps(outcome.trace())


def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "args",
    [{"deep": nested(5000)}, {"x": float("nan")}, {"x": b"raw"}, {1: "int key"}],
    ids=["nested-5000-deep", "nan", "bytes", "int-key"],
)
async def test_args_the_sandbox_cannot_take_are_an_error_in_the_run(
    machine: Machine, args: dict[Any, Any]
) -> None:
    handoff = {"workflowId": "wf_4", "code": ECHO_LOCAL, "args": args}
    error = failed(await run(machine, handoff), "INVALID_INPUT")
    assert error.data == {"field": "args"}
    assert machine.upstream.calls == []


@pytest.mark.parametrize("intent", ["", None, 42], ids=repr)
async def test_a_handoff_without_an_intent_is_refused_by_the_policy(
    machine: Machine, intent: Any
) -> None:
    handoff = {"workflowId": "wf_4", "code": ECHO_LOCAL, "intent": intent}
    error = failed(await run(machine, handoff), "INVALID_INPUT")
    assert "intent" in error.message
    assert machine.upstream.calls == []


@pytest.mark.parametrize("args", [None, {}], ids=["null", "empty"])
async def test_missing_args_are_an_empty_object(machine: Machine, args: Any) -> None:
    outcome = await run(machine, {"workflowId": "wf_5", "code": ECHO_LOCAL, "args": args})
    assert outcome.error is None
    assert outcome.value["args"] == {"text": "hi"}


def test_handoff_fields_keep_a_valid_handoff_as_it_is() -> None:
    handoff = {"workflowId": "w" * 64, "code": "return 1", "args": {"a": [1]}, "intent": "x"}
    assert handoff_fields(handoff) == ("w" * 64, "return 1", {"a": [1]}, "x")
    assert handoff_fields({"workflowId": "w", "code": ""}) == ("w", "", {}, "")
    assert handoff_fields({"workflowId": "w", "code": "", "intent": {"no": 1}})[3] == ""


async def test_code_over_the_sandbox_limit_is_refused_before_running(machine: Machine) -> None:
    limit = machine.settings.sandbox.max_code_bytes
    code = ECHO_LOCAL + "\n" + "# padding\n" * (limit // 10 + 1)
    assert len(code.encode()) > limit
    error = failed(await run(machine, {"workflowId": "wf_6", "code": code}), "CODE_TOO_LARGE")
    assert str(limit) in error.message
    assert machine.upstream.calls == []


async def test_a_syntax_error_is_an_error_in_the_run(machine: Machine) -> None:
    code = f"await mcp.{LOCAL}.echo(text='x')\nreturn (1 +"
    failed(await run(machine, {"workflowId": "wf_7", "code": code}), "SYNTAX_ERROR")
    assert machine.upstream.calls == []


@pytest.mark.parametrize(
    "code",
    [
        'return await mcp["acme.webapp.fs.echo.ab12"]()',
        'return await mcp["fs:echo"]()',
        "return await mcp.fs.echo()",
        "return await mcp.a.echo()",
    ],
    ids=["fqdn", "name", "namespace-action", "gateway-server"],
)
async def test_code_calling_anything_but_this_machines_servers_is_an_unknown_tool(
    machine: Machine, code: str
) -> None:
    failed(await run(machine, {"workflowId": "wf_8", "code": code}), "UNKNOWN_TOOL")
    assert machine.upstream.calls == []


@pytest.mark.parametrize(
    "call",
    ["mcp.fs.echo()", 'mcp["fs:echo"]()'],
    ids=["namespace-action", "name"],
)
async def test_a_capability_this_machine_knows_still_cannot_be_called_from_handed_code(
    machine: Machine, call: str
) -> None:
    scope = machine.runner._scope  # pyright: ignore[reportPrivateUsage]
    await make(machine.registry, scope, ECHO_LOCAL, name="fs:echo", tools_used=[f"{LOCAL}:echo"])
    code = f'await mcp.{LOCAL}.echo(text="x")\nreturn await {call}'
    error = failed(await run(machine, {"workflowId": "wf_9", "code": code}), "UNKNOWN_TOOL")
    assert "Capabilities cannot be called from code run by pml connect" in error.message
    assert machine.upstream.calls == []  # refused before anything ran


async def test_a_tool_this_server_does_not_have_is_an_unknown_tool_with_suggestions(
    machine: Machine,
) -> None:
    code = f'return await mcp.{LOCAL}.ecko(text="x")'
    error = failed(await run(machine, {"workflowId": "wf_10", "code": code}), "UNKNOWN_TOOL")
    assert f"mcp.{LOCAL}.echo" in error.message
    assert machine.upstream.calls == []


async def test_an_error_result_of_a_tool_is_a_tool_error_traced_as_failed(
    machine: Machine,
) -> None:
    code = f"return await mcp.{LOCAL}.fail()"
    outcome = await run(machine, {"workflowId": "wf_11", "code": code})
    error = failed(outcome, "TOOL_ERROR")
    assert f"{LOCAL} says no" in error.message
    assert [(t["tool"], t["success"]) for t in outcome.trace()["taskResults"]] == [
        (f"{LOCAL}:fail", False)
    ]


async def test_an_exception_in_the_code_fails_the_run_after_the_calls_it_made(
    machine: Machine,
) -> None:
    code = f'await mcp.{LOCAL}.echo(text="x")\nraise ValueError("boom")'
    outcome = await run(machine, {"workflowId": "wf_12", "code": code})
    error = failed(outcome, "EXECUTION_FAILED")
    assert "boom" in error.message
    assert machine.upstream.calls == [("echo", {"text": "x"})]
    assert [t["success"] for t in outcome.trace()["taskResults"]] == [True]


def time_limit_s(error: PmlError) -> float:
    """The limit a ``TIMEOUT`` message names (what was left of the run's time)."""
    found = re.fullmatch(r"Execution exceeded the time limit of ([0-9.]+) s", error.message)
    assert found is not None, error.message
    return float(found.group(1))


async def test_the_handoffs_timeout_bounds_the_run(machine: Machine) -> None:
    started = anyio.current_time()
    outcome = await run(machine, {"workflowId": "wf_13", "code": BUSY, "timeoutMs": 300})
    assert 0.2 < time_limit_s(failed(outcome, "TIMEOUT")) <= 0.3
    assert anyio.current_time() - started < 10
    assert machine.upstream.calls == [("echo", {"text": "first"})]


async def test_a_handoff_cannot_raise_this_machines_time_limit(tmp_path: Path) -> None:
    async with open_machine(tmp_path / "client", sandbox={"wall_time_s": 0.3}) as machine:
        outcome = await run(machine, {"workflowId": "wf_14", "code": BUSY, "timeoutMs": 600_000})
        assert 0.2 < time_limit_s(failed(outcome, "TIMEOUT")) <= 0.3


@pytest.mark.parametrize("timeout_ms", [True, -5, 0, "100", float("nan"), None], ids=repr)
async def test_a_timeout_that_is_not_a_positive_number_is_ignored(
    machine: Machine, timeout_ms: Any
) -> None:
    handoff = {"workflowId": "wf_15", "code": ECHO_LOCAL, "timeoutMs": timeout_ms}
    outcome = await run(machine, handoff)
    assert outcome.error is None, outcome.error


async def audit_events_named(machine: Machine, event: str) -> list[dict[str, Any]]:
    await machine.policy.audit.flush()
    query = sa.select(audit_events.c.details).where(audit_events.c.event == event)
    async with machine.db.read() as conn:
        return [row.details for row in await conn.execute(query)]


async def test_this_machines_deny_rule_refuses_the_call_and_is_audited_here(
    tmp_path: Path,
) -> None:
    permissions = {"allow": ["*:*"], "deny": [f"{LOCAL}:echo"]}
    async with open_machine(tmp_path / "client", permissions=permissions) as machine:
        outcome = await run(machine, {"workflowId": "wf_16", "code": ECHO_LOCAL})
        error = failed(outcome, "PERMISSION_DENIED")
        assert f"{LOCAL}:echo" in error.message
        assert machine.upstream.calls == []
        denied = await audit_events_named(machine, "PERMISSION_DENIED")
        assert [details.get("tool") for details in denied] == [f"{LOCAL}:echo"]
        routed = await audit_events_named(machine, "ROUTER_OUTPUT")
        assert [details["source"] for details in routed] == ["client_run"]


async def test_a_call_that_asks_fails_saying_how_to_grant_it_here_then_runs_once_granted(
    tmp_path: Path,
) -> None:
    permissions = {"ask": [f"{LOCAL}:echo"]}
    async with open_machine(tmp_path / "client", permissions=permissions) as machine:
        handoff = {"workflowId": "wf_17", "code": ECHO_LOCAL, "args": {"text": "once"}}
        error = failed(await run(machine, handoff), "PERMISSION_DENIED")
        assert "pml perms grant" in error.message
        assert f"{LOCAL}:echo" in error.message
        assert "args_digest" not in error.data
        assert machine.upstream.calls == []

        scope = machine.runner._scope  # pyright: ignore[reportPrivateUsage]
        await machine.policy.grants.issue(
            scope,
            capability="unknown",
            tool_pattern=f"{LOCAL}:echo",
            ttl_s=None,
            max_uses=None,
            decided_by="user:test",
        )
        outcome = await run(machine, handoff)
        assert outcome.error is None, outcome.error
        assert machine.upstream.calls == [("echo", {"text": "once"})]
