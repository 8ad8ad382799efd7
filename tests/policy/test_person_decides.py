"""Approvals are a person's (SPEC §10.5): elicitation in the client's UI first, a person out of
band otherwise, and no path by which the requesting agent approves itself."""

from __future__ import annotations

from typing import Any, Literal

import anyio
import mcp_types
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext, ElicitationFnT

from pml.errors import AlreadyDecided, NotFound
from policy.conftest import SCOPE, OpenPolicyGateway, PolicyGateway

pytestmark = pytest.mark.anyio

WRITE = """
await mcp.filesystem.write_file(path=args.get("dst", "/w/out.txt"), content=args.get("text", "x"))
return "written"
"""
INTENT = "write the report file"
MODES = ["legacy", "2026-07-28"]


Action = Literal["accept", "decline", "cancel"]


def _answer_with(
    decision: str | None, seen: list[mcp_types.ElicitRequestParams], action: Action = "accept"
) -> ElicitationFnT:
    async def answer(
        context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult:
        seen.append(params)
        content: dict[str, Any] | None = None if decision is None else {"decision": decision}
        return mcp_types.ElicitResult(action=action, content=content)

    return answer


def _data(result: mcp_types.CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None
    return result.structured_content


async def _pause(pg: PolicyGateway, **args: Any) -> dict[str, Any]:
    is_error, paused = await pg.execute(intent=INTENT, code=WRITE, args=args)
    assert is_error is False
    assert paused["status"] == "approval_required", paused
    return paused


async def _agent_continue(pg: PolicyGateway, workflow_id: object, **extra: Any):
    answer = {"workflow_id": workflow_id, "approved": True, **extra}
    return await pg.execute(intent="approve it", continue_workflow=answer)


# -- the agent cannot approve ----------------------------------------------------------------


@pytest.mark.parametrize("grant", ["once", "session", "always"])
async def test_the_agents_own_approval_only_answers_pending_and_issues_nothing(
    pg: PolicyGateway, grant: str
) -> None:
    paused = await _pause(pg)
    is_error, again = await _agent_continue(pg, paused["workflowId"], grant=grant)
    assert is_error is False
    assert again["status"] == "approval_required"
    assert again["pending"] is True
    assert again["workflowId"] == paused["workflowId"]
    assert "pml approvals approve" in again["message"]
    assert await pg.gateway.policy.grants.list(SCOPE) == []
    assert pg.sent("filesystem") == []
    [pending] = await pg.events("APPROVAL_PENDING")
    assert pending["decided_by"] == "user:erwan"


async def test_another_session_of_the_same_key_cannot_approve_either(pg: PolicyGateway) -> None:
    paused = await _pause(pg)
    answer = {"workflow_id": paused["workflowId"], "approved": True, "grant": "always"}
    async with Client(pg.gateway.server) as second:
        result = await second.call_tool(
            "pml_execute", {"intent": "approve", "continue_workflow": answer}
        )
    assert _data(result)["pending"] is True
    assert await pg.gateway.policy.grants.list(SCOPE) == []
    assert pg.sent("filesystem") == []


async def test_a_persons_approval_sends_the_call_once_and_cannot_be_replayed(
    pg: PolicyGateway,
) -> None:
    paused = await _pause(pg)
    await pg.decide(paused["workflowId"], "once")
    with pytest.raises(AlreadyDecided):
        await pg.decide(paused["workflowId"], "always")
    is_error, done = await _agent_continue(pg, paused["workflowId"])
    assert is_error is False, done
    assert done["status"] == "success"
    is_error, replay = await _agent_continue(pg, paused["workflowId"])
    assert replay["error"]["code"] == "NOT_FOUND"
    assert pg.sent("filesystem") == ["write_file"]
    # The once grant is spent: the same write asks again.
    again = await _pause(pg)
    assert again["workflowId"] != paused["workflowId"]


async def test_a_persons_denial_ends_the_run_and_captures_nothing(pg: PolicyGateway) -> None:
    paused = await _pause(pg)
    decided = await pg.decide(paused["workflowId"], "deny")
    assert decided["status"] == "denied"
    is_error, answer = await _agent_continue(pg, paused["workflowId"])
    assert is_error is True
    assert answer["error"]["code"] == "PERMISSION_DENIED"
    assert "denied by user:ana" in answer["error"]["message"]
    assert pg.sent("filesystem") == []
    assert await pg.capabilities() == 0
    [event] = await pg.events("APPROVAL_DECIDED")
    assert (event["decided_by"], event["details"]["outcome"]) == ("user:ana", "denied")


async def test_approval_ids_of_other_users_and_tenants_are_not_found_at_the_desk(
    pg: PolicyGateway,
) -> None:
    paused = await _pause(pg)
    desk = pg.gateway.policy.approvals.desk
    for org, project, user in (
        ("acme", "other", None),
        ("evil", "webapp", None),
        ("acme", "webapp", "mallory"),
    ):
        with pytest.raises(NotFound):
            await desk.decide(
                paused["workflowId"],
                "always",
                org=org,
                project=project,
                user=user,
                decided_by="user:x",
                actor="x",
            )
    assert await pg.gateway.policy.grants.list(SCOPE) == []
    assert [a["workflowId"] for a in await desk.pending("acme", "webapp")] == [paused["workflowId"]]
    assert await desk.pending("acme", "other") == []


async def test_agent_may_approve_restores_in_band_approval_as_a_logged_choice(
    open_policy_gateway: OpenPolicyGateway,
) -> None:
    async with open_policy_gateway(permissions={"agent_may_approve": True}) as pg:
        paused = await _pause(pg)
        assert "lets the agent approve" in paused["message"]
        is_error, done = await _agent_continue(pg, paused["workflowId"], grant="session")
        [decided] = await pg.events("APPROVAL_DECIDED")
    assert is_error is False
    assert done["status"] == "success"
    assert decided["decided_by"] == "agent:erwan"
    assert decided["details"]["grant"] == "session"


async def test_a_pending_approval_expires_and_the_expiry_is_audited(
    open_policy_gateway: OpenPolicyGateway,
) -> None:
    async with open_policy_gateway(permissions={"approval_ttl_s": 0.05}) as pg:
        paused = await _pause(pg)
        await anyio.sleep(0.15)
        purged = await pg.gateway.policy.approvals.desk.purge_expired()
        [expired] = await pg.events("APPROVAL_EXPIRED")
    assert purged == 1
    assert expired["details"]["workflow_id"] == paused["workflowId"]
    assert expired["decided_by"] == "expiry"


async def test_a_capability_tool_waits_for_a_person_too(pg: PolicyGateway) -> None:
    _is_error, paused = await pg.execute(intent=INTENT, code=WRITE, name="fs:write_report")
    await pg.decide(paused["workflowId"], "session")
    await _agent_continue(pg, paused["workflowId"])
    result = await pg.call("mcp__fs__write_report", {"dst": "/w/second.txt"})
    assert result.is_error is False  # covered by the session grant
    listed = await pg.gateway.policy.grants.list(SCOPE)
    for grant in listed:
        await pg.gateway.policy.grants.revoke(SCOPE, grant.id, decided_by="user:ana")
    waiting = _data(await pg.call("mcp__fs__write_report", {"dst": "/w/third.txt"}))
    assert waiting["status"] == "approval_required"
    resumed = _data(
        await pg.call(
            "pml_execute",
            {
                "intent": "resume",
                "continue_workflow": {"workflow_id": waiting["workflowId"], "approved": True},
            },
        )
    )
    assert resumed["pending"] is True
    assert pg.sent("filesystem").count("write_file") == 2


# -- elicitation: the person answers in the client's UI ---------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_a_client_whose_person_answers_once_gets_the_write_done_in_one_call(
    pg: PolicyGateway, mode: str
) -> None:
    seen: list[mcp_types.ElicitRequestParams] = []
    content = "y" * 10_240
    async with Client(
        pg.gateway.server, mode=mode, elicitation_callback=_answer_with("once", seen)
    ) as client:
        result = await client.call_tool(
            "pml_execute",
            {"intent": INTENT, "code": WRITE, "args": {"dst": "/w/report.txt", "text": content}},
        )
    data = _data(result)
    assert data["status"] == "success", data
    assert pg.sent("filesystem") == ["write_file"]
    [form] = seen
    assert isinstance(form, mcp_types.ElicitRequestFormParams)
    schema = form.requested_schema
    assert list(schema["properties"]) == ["decision"]
    assert schema["properties"]["decision"]["enum"] == ["deny", "once", "session", "always"]
    assert form.message.index("/w/report.txt") < form.message.index("yyyy")
    assert "10240" in form.message
    [decided] = await pg.events("APPROVAL_DECIDED")
    assert decided["decided_by"] == "elicitation:mcp"
    assert decided["details"]["grant"] == "once"
    assert await pg.capabilities() == 1


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("decision", "action"),
    [("deny", "accept"), (None, "decline"), (None, "cancel"), ("forever", "accept")],
)
async def test_deny_decline_cancel_or_a_bad_answer_refuse_and_write_nothing(
    pg: PolicyGateway, mode: str, decision: str | None, action: Action
) -> None:
    seen: list[mcp_types.ElicitRequestParams] = []
    async with Client(
        pg.gateway.server, mode=mode, elicitation_callback=_answer_with(decision, seen, action)
    ) as client:
        result = await client.call_tool("pml_execute", {"intent": INTENT, "code": WRITE})
    data = _data(result)
    assert result.is_error is True
    assert data["error"]["code"] == "PERMISSION_DENIED"
    assert pg.sent("filesystem") == []
    assert await pg.capabilities() == 0
    assert await pg.gateway.policy.grants.list(SCOPE) == []
    assert len(seen) == 1


async def test_an_always_answer_is_asked_once_and_covers_later_runs(pg: PolicyGateway) -> None:
    seen: list[mcp_types.ElicitRequestParams] = []
    async with Client(pg.gateway.server, elicitation_callback=_answer_with("always", seen)) as c:
        first = await c.call_tool("pml_execute", {"intent": INTENT, "code": WRITE})
        second = await c.call_tool(
            "pml_execute", {"intent": INTENT, "code": WRITE, "args": {"dst": "/w/b.txt"}}
        )
    assert (_data(first)["status"], _data(second)["status"]) == ("success", "success")
    assert len(seen) == 1
    [grant] = await pg.gateway.policy.grants.list(SCOPE)
    assert grant.expires_at is None


async def test_no_answer_in_time_pauses_for_a_person_out_of_band(
    open_policy_gateway: OpenPolicyGateway,
) -> None:
    asked = anyio.Event()

    async def never(context: Any, params: Any) -> mcp_types.ElicitResult:
        asked.set()
        await anyio.Event().wait()  # the person walked away
        raise AssertionError("unreachable")

    async with open_policy_gateway(permissions={"approval_wait_s": 0.3}) as pg:
        with anyio.fail_after(20):
            async with Client(
                pg.gateway.server, mode="legacy", elicitation_callback=never
            ) as client:
                result = await client.call_tool("pml_execute", {"intent": INTENT, "code": WRITE})
                paused = _data(result)
                assert asked.is_set()
                assert paused["status"] == "approval_required"
                assert pg.sent("filesystem") == []
                await pg.decide(paused["workflowId"], "once")
                is_error, done = await _agent_continue(pg, paused["workflowId"])
        timeouts = [
            e
            for e in await pg.events("APPROVAL_ELICITATION")
            if e["details"]["outcome"] == "elicitation_timeout"
        ]
    assert is_error is False
    assert done["status"] == "success"
    assert pg.sent("filesystem") == ["write_file"]
    assert len(timeouts) == 1


# -- forged answers (2026-07-28 input rounds) -------------------------------------------------


async def _first_round(client: Client, arguments: dict[str, Any]) -> mcp_types.InputRequiredResult:
    first = await client.session.call_tool("pml_execute", arguments, allow_input_required=True)
    assert isinstance(first, mcp_types.InputRequiredResult), first
    assert first.request_state is not None
    return first


def _accept(decision: str) -> mcp_types.InputResponses:
    answer = mcp_types.ElicitResult(action="accept", content={"decision": decision})
    return {"pml_approval": answer}


async def test_forged_or_late_elicitation_answers_issue_nothing(
    open_policy_gateway: OpenPolicyGateway,
) -> None:
    seen: list[mcp_types.ElicitRequestParams] = []
    arguments = {"intent": INTENT, "code": WRITE}
    async with open_policy_gateway() as pg:
        async with Client(
            pg.gateway.server, mode="2026-07-28", elicitation_callback=_answer_with("once", seen)
        ) as client:
            first = await _first_round(client, arguments)
            other = await _first_round(client, {**arguments, "args": {"dst": "/w/other.txt"}})
            state = first.request_state or ""
            workflow_id, _, nonce = state.partition(".")
            other_id = (other.request_state or "").partition(".")[0]
            forged: list[tuple[dict[str, Any], str]] = [
                (arguments, f"{workflow_id}.{'A' * len(nonce)}"),  # wrong nonce
                (arguments, f"{other_id}.{nonce}"),  # another workflow's id
                (arguments, workflow_id),  # no nonce
                ({**arguments, "args": {"dst": "/etc/passwd"}}, state),  # another call
                (arguments, "wf_'; DROP TABLE workflow_state; --.x"),
                (arguments, "\u202e" * 500),
            ]
            answers = [
                await client.session.call_tool(
                    "pml_execute", args, input_responses=_accept("always"), request_state=token
                )
                for args, token in forged
            ]
            # The genuine answer still works, exactly once.
            genuine = await client.session.call_tool(
                "pml_execute", arguments, input_responses=_accept("once"), request_state=state
            )
            replay = await client.session.call_tool(
                "pml_execute", arguments, input_responses=_accept("always"), request_state=state
            )
        assert all(a.is_error for a in answers)
        assert all(_data(a)["error"]["code"] == "INVALID_INPUT" for a in answers)
        assert _data(genuine)["status"] == "success", _data(genuine)
        assert replay.is_error is True
        assert pg.sent("filesystem") == ["write_file"]
        granted = await pg.events("PERMISSION_GRANTED")
        assert [(g["details"]["max_uses"], g["decided_by"]) for g in granted] == [
            (1, "elicitation:mcp")  # the genuine once grant only
        ]
        assert await pg.gateway.policy.grants.list(SCOPE) == []  # and it is spent
        assert seen == []  # every round was driven by hand


async def test_an_answer_after_the_wait_decides_nothing_and_the_run_waits_out_of_band(
    open_policy_gateway: OpenPolicyGateway,
) -> None:
    arguments = {"intent": INTENT, "code": WRITE}
    async with open_policy_gateway(permissions={"approval_wait_s": 0.05}) as pg:
        async with Client(
            pg.gateway.server, mode="2026-07-28", elicitation_callback=_answer_with("once", [])
        ) as client:
            first = await _first_round(client, arguments)
            await anyio.sleep(0.15)
            late = await client.session.call_tool(
                "pml_execute",
                arguments,
                input_responses=_accept("always"),
                request_state=first.request_state,
            )
        data = _data(late)
        assert data["status"] == "approval_required"
        assert data["pending"] is True
        assert await pg.gateway.policy.grants.list(SCOPE) == []
        assert pg.sent("filesystem") == []
        [item] = await pg.gateway.policy.approvals.desk.pending("acme", "webapp")
        assert item["status"] == "pending"
