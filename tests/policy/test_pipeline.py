"""The pipeline through a real client: gate before and during runs, approvals, grants,
post-hooks and the audit trail (SPEC §10)."""

from __future__ import annotations

import json

import anyio
import pytest
import sqlalchemy as sa

from pml.errors import NotFound
from pml.gateway.schemas import ContinueWorkflow, ExecuteParams
from pml.registry.scope import Scope
from pml.storage.tables import tool_usage
from policy.conftest import SCOPE, OpenPolicyGateway, PolicyGateway

pytestmark = pytest.mark.anyio

READ_LIST_WRITE = """
note = await mcp.filesystem.read_text_file(path="/w/note.txt")
listing = await mcp.filesystem.list_directory(path="/w")
await mcp.filesystem.write_file(path=args.get("dst", "/w/copy.txt"), content="x")
return "done"
"""


async def _pause(pg: PolicyGateway, **extra: object) -> dict[str, object]:
    is_error, paused = await pg.execute(
        intent="copy the note to a new file", code=READ_LIST_WRITE, **extra
    )
    assert is_error is False
    assert paused["status"] == "approval_required", paused
    return paused


async def _continue(
    pg: PolicyGateway, workflow_id: object, *, approved: bool = True, grant: str = "once"
):
    """A person decides (``grant``) when the agent resumes with ``approved: true``; then the
    agent's ``continue_workflow``."""
    if approved:
        await pg.decide(workflow_id, grant)
    return await pg.execute(
        intent="approve", continue_workflow={"workflow_id": workflow_id, "approved": approved}
    )


async def test_a_forbidden_tool_is_refused_before_anything_runs(pg: PolicyGateway) -> None:
    is_error, data = await pg.execute(intent="read the note file", code=READ_LIST_WRITE)
    assert is_error is True
    error = data["error"]
    assert error["code"] == "POLICY_DENIED"
    assert error["tool"] == "filesystem:write_file"
    assert error["capability"] == "file_write"
    assert error["rule"] == "policy:file_task forbids file_write"
    assert pg.sent("filesystem") == []  # not even the read before it
    [denied] = await pg.events("POLICY_DENIED")
    assert denied["details"]["stage"] == "static"
    assert denied["decided_by"] == "policy:file_task"
    [router] = await pg.events("ROUTER_OUTPUT")
    assert router["details"]["intent"] == "file_task"
    assert router["request_id"] == denied["request_id"]


async def test_an_ask_pauses_before_the_call_and_approval_sends_each_call_once(
    pg: PolicyGateway,
) -> None:
    paused = await _pause(pg)
    assert pg.sent("filesystem") == ["read_text_file", "list_directory"]
    [approval] = paused["approvals"]  # type: ignore[misc]
    assert {k: approval[k] for k in ("tool", "server", "capability", "args_summary", "rule")} == {
        "tool": "filesystem:write_file",
        "server": "filesystem",
        "capability": "file_write",
        "args_summary": json.dumps({"content": "x", "path": "/w/copy.txt"}),
        "rule": "default:ask:file_write",
    }
    assert [a["name"] for a in approval["arguments"]] == ["path", "content"]
    assert (approval["user"], approval["intent"], approval["status"]) == (
        "erwan",
        "file_edit",
        "pending",
    )
    assert await pg.capabilities() == 0
    is_error, done = await _continue(pg, paused["workflowId"])
    assert is_error is False, done
    assert done["status"] == "success"
    assert done["result"] == "done"
    assert done["created"] is True
    assert pg.sent("filesystem") == ["read_text_file", "list_directory", "write_file"]
    assert await pg.capabilities() == 1
    replayed = [
        e["details"]["tool"] for e in await pg.events("TOOL_CALL_END") if e["details"]["replayed"]
    ]
    assert replayed == ["filesystem:read_text_file", "filesystem:list_directory"]
    [granted] = await pg.events("PERMISSION_GRANTED")
    assert granted["decided_by"] == "user:ana"  # the person, not the agent's user
    assert granted["details"]["max_uses"] == 1


async def test_usage_is_counted_once_across_a_pause(pg: PolicyGateway) -> None:
    paused = await _pause(pg)
    await _continue(pg, paused["workflowId"])
    await pg.gateway.executor.flush()
    query = sa.select(tool_usage.c.tool_name, sa.func.count()).group_by(tool_usage.c.tool_name)
    async with pg.gateway.db.read() as conn:
        counts = {row[0]: row[1] for row in (await conn.execute(query)).all()}
    assert counts == {"read_text_file": 1, "list_directory": 1, "write_file": 1}
    usage = [e["details"] for e in await pg.events("POSTHOOK_USAGE")]
    assert usage == [{"calls": 2, "replayed": 0}, {"calls": 1, "replayed": 2}]


async def test_a_refusal_ends_the_workflow_and_captures_nothing(pg: PolicyGateway) -> None:
    paused = await _pause(pg)
    is_error, refused = await _continue(pg, paused["workflowId"], approved=False)
    assert is_error is True
    assert refused["error"]["code"] == "PERMISSION_DENIED"
    assert "withdrawn by erwan" in refused["error"]["message"]
    assert await pg.capabilities() == 0
    assert pg.sent("filesystem") == ["read_text_file", "list_directory"]
    is_error, again = await pg.execute(
        intent="approve", continue_workflow={"workflow_id": paused["workflowId"], "approved": True}
    )
    assert again["error"]["code"] == "NOT_FOUND"
    denials = await pg.events("PERMISSION_DENIED")
    assert [d["decided_by"] for d in denials] == ["user:erwan", "user:erwan"]


async def test_a_once_grant_does_not_cover_other_arguments(pg: PolicyGateway) -> None:
    paused = await _pause(pg)
    await _continue(pg, paused["workflowId"])
    again = await _pause(pg, args={"dst": "/w/other.txt"})  # same code, other arguments
    assert again["approvals"][0]["args_summary"].endswith('"path": "/w/other.txt"}')  # type: ignore[index]
    assert pg.sent("filesystem").count("write_file") == 1


async def test_a_session_grant_covers_the_next_runs_until_revoked(pg: PolicyGateway) -> None:
    paused = await _pause(pg)
    is_error, _ = await _continue(pg, paused["workflowId"], grant="session")
    assert is_error is False
    is_error, second = await pg.execute(
        intent="copy the note to a new file", code=READ_LIST_WRITE, args={"dst": "/w/b.txt"}
    )
    assert second["status"] == "success"
    grants = await pg.gateway.policy.grants.list(SCOPE)
    [grant] = grants
    assert grant.max_uses is None
    assert grant.expires_at is not None
    await pg.gateway.policy.grants.revoke(SCOPE, grant.id, decided_by="user:erwan")
    third = await _pause(pg, args={"dst": "/w/c.txt"})
    assert third["status"] == "approval_required"
    assert pg.sent("filesystem").count("write_file") == 2


async def test_another_user_cannot_approve_a_workflow(pg: PolicyGateway) -> None:
    paused = await _pause(pg)
    executor = pg.gateway.executor
    for other in (
        Scope("acme", "webapp", "mallory"),
        Scope("acme", "other", "erwan"),
        Scope("evil", "webapp", "erwan"),
    ):
        params = ExecuteParams(
            intent="approve",
            continue_workflow=ContinueWorkflow(
                workflow_id=str(paused["workflowId"]), approved=True
            ),
        )
        with pytest.raises(NotFound):
            await executor.execute(other, params)
    assert await pg.gateway.policy.grants.list(SCOPE) == []
    _is_error, done = await _continue(pg, paused["workflowId"])  # still the owner's
    assert done["status"] == "success"
    not_found = [
        e
        for e in await pg.events("PERMISSION_DENIED")
        if e["details"].get("outcome") == "not_found"
    ]
    assert {(e["org"], e["actor"]) for e in not_found} == {
        ("acme", "mallory"),
        ("acme", "erwan"),
        ("evil", "erwan"),
    }


async def test_an_expired_approval_cannot_be_resumed(
    open_policy_gateway: OpenPolicyGateway,
) -> None:
    async with open_policy_gateway(permissions={"approval_ttl_s": 0.05}) as pg:
        paused = await _pause(pg)
        await anyio.sleep(0.2)
        with pytest.raises(NotFound):  # too late for the person too
            await pg.decide(paused["workflowId"])
        is_error, late = await pg.execute(
            intent="approve",
            continue_workflow={"workflow_id": paused["workflowId"], "approved": True},
        )
    assert is_error is True
    assert late["error"]["code"] == "NOT_FOUND"
    assert pg.sent("filesystem").count("write_file") == 0


async def test_audit_mode_logs_what_it_would_refuse_and_runs_it(
    open_policy_gateway: OpenPolicyGateway,
) -> None:
    async with open_policy_gateway(
        policy={"mode": "audit"}, permissions={"allow": ["filesystem:write_file"]}
    ) as pg:
        is_error, data = await pg.execute(intent="read the note file", code=READ_LIST_WRITE)
        denied = await pg.events("POLICY_DENIED")
    assert is_error is False, data
    assert pg.sent("filesystem")[-1] == "write_file"
    assert denied
    assert all(d["details"]["enforced"] is False for d in denied)


async def test_deny_rules_beat_grants_and_intents(open_policy_gateway: OpenPolicyGateway) -> None:
    async with open_policy_gateway(permissions={"deny": ["filesystem:write_*"]}) as pg:
        await pg.gateway.policy.grants.issue(
            SCOPE, capability="file_write", ttl_s=60, max_uses=None, decided_by="test"
        )
        is_error, data = await pg.execute(
            intent="copy the note to a new file", code=READ_LIST_WRITE
        )
    assert is_error is True
    assert data["error"]["code"] == "PERMISSION_DENIED"
    assert data["error"]["rule"] == "permissions.deny[0]:filesystem:write_*"
    assert pg.sent("filesystem") == []


async def test_configured_policy_rows_and_exceptions_replace_the_defaults(
    open_policy_gateway: OpenPolicyGateway,
) -> None:
    policy = {
        "intents": {
            "file_task": {
                "allowed": ["file_read"],
                "forbidden": ["file_write"],
                "exceptions": ["filesystem:write_file"],
            }
        }
    }
    async with open_policy_gateway(policy=policy, permissions={"allow": ["filesystem:*"]}) as pg:
        is_error, data = await pg.execute(intent="read the note file", code=READ_LIST_WRITE)
    assert is_error is False, data
    assert pg.sent("filesystem")[-1] == "write_file"


async def test_every_run_goes_through_post_hooks_in_the_audit_trail(pg: PolicyGateway) -> None:
    is_error, data = await pg.execute(
        intent="what time is it", code="return await mcp.time.get_current_time()"
    )
    assert is_error is False, data
    events = [e["event"] for e in await pg.events()]
    for expected in (
        "ROUTER_OUTPUT",
        "POLICY_DECISION",
        "PERMISSION_CHECK",
        "TOOL_CALL_START",
        "TOOL_CALL_END",
        "POSTHOOK_CAPTURE",
        "CAPABILITY_CREATED",
        "EXECUTOR_RESPONSE",
    ):
        assert expected in events, (expected, events)
    assert events.index("TOOL_CALL_END") < events.index("POSTHOOK_CAPTURE")
    lines = [json.loads(line) for line in pg.audit_file.read_text().splitlines()]
    assert [line["event"] for line in lines] == events
    assert all("decided_by" in line and "ts" in line for line in lines)


async def test_renames_are_audited_with_who_decided(pg: PolicyGateway) -> None:
    is_error, data = await pg.execute(
        intent="what time is it", code="return await mcp.time.get_current_time()"
    )
    assert is_error is False
    renamed = await pg.call(
        "cap_rename", {"name": data["capabilityName"], "new_name": "clock:now", "tags": ["t"]}
    )
    assert renamed.is_error is False
    [event] = await pg.events("CAPABILITY_RENAMED")
    assert event["decided_by"] == "user:erwan"
    assert event["details"] == {
        "capability": data["capabilityFqdn"],
        "from": data["capabilityName"],
        "to": "clock:now",
        "changed": ["tags"],
    }


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        ({"workflow_id": "wf_'; DROP TABLE workflow_state; --", "approved": True}, "NOT_FOUND"),
        ({"workflow_id": "wf_\u202eexe.txt", "approved": True}, "NOT_FOUND"),
        ({"workflow_id": "x" * 5000, "approved": True}, "NOT_FOUND"),
        ({"workflow_id": "", "approved": True}, "INVALID_INPUT"),
        ({"workflow_id": 123, "approved": True}, "INVALID_INPUT"),
        ({"workflow_id": "wf_1"}, "INVALID_INPUT"),
        ({"workflow_id": "wf_1", "approved": "yes"}, "INVALID_INPUT"),
        ({"workflow_id": "wf_1", "approved": True, "grant": "forever"}, "INVALID_INPUT"),
        ({"workflow_id": "wf_1", "approved": True, "extra": 1}, "INVALID_INPUT"),
    ],
)
async def test_hostile_continue_workflow_answers_change_nothing(
    pg: PolicyGateway, answer: dict[str, object], code: str
) -> None:
    paused = await _pause(pg)
    is_error, data = await pg.execute(intent="approve", continue_workflow=answer)
    assert is_error is True
    assert data["error"]["code"] == code
    assert len(data["error"]["message"]) < 400
    assert await pg.gateway.policy.grants.list(SCOPE) == []
    is_error, done = await _continue(pg, paused["workflowId"])  # the real one still waits
    assert done["status"] == "success"
