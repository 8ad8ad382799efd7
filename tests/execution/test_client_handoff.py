"""Code for a PML client's servers is handed back (``execute_locally``), never run here
(SPEC §9.1): through a real gateway acting for a ``pml connect`` caller."""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from execution.clientrouting import (
    ECHO,
    FS,
    OTHER,
    READ_INTENT,
    READ_NOTE,
    WRITE_NOTE,
    Hub,
    open_hub,
    trace,
)
from pml.execution.clients import (
    CLIENT_HEADER,
    MAX_CLIENT_SERVERS,
    SERVERS_HEADER,
    ClientCaller,
    calling_as,
    client_from_headers,
    current_client,
)
from pml.execution.handoff import LearningContext
from pml.storage.tables import audit_events

pytestmark = pytest.mark.anyio

LOCAL_FS = {"local": ["filesystem"]}
HANDOFF_FIELDS = {
    "status",
    "workflowId",
    "code",
    "args",
    "intent",
    "toolsUsed",
    "clientTools",
    "routing",
    "expiresAt",
}


@pytest.fixture
async def hub(sqlite_url: str) -> AsyncGenerator[Hub]:
    """``[routing] local = ["filesystem"]``: the gateway never runs it, clients do."""
    async with open_hub(sqlite_url, routing=LOCAL_FS) as opened:
        yield opened


async def _named_capability(hub: Hub) -> str:
    """``fs:read_note`` (its code uses the client's filesystem), learned from a client run."""
    handed = await hub.hand_off(READ_NOTE, name="fs:read_note")
    [result] = await hub.ingest([trace(handed["workflowId"])])
    assert result["status"] == "captured", result
    assert result["capabilityName"] == "fs:read_note"
    return result["capabilityFqdn"]


@pytest.mark.parametrize("routing", [{}, LOCAL_FS], ids=["default-routing", "routing-local"])
async def test_code_using_a_client_server_is_handed_back_and_nothing_runs_here(
    sqlite_url: str, routing: dict[str, Any]
) -> None:
    async with open_hub(sqlite_url, routing=routing) as hub:
        before = datetime.now(UTC)
        handed = await hub.hand_off(READ_NOTE, args={"path": "/notes/b.txt", "n": [1, "ü"]})
        assert set(handed) == HANDOFF_FIELDS
        assert re.fullmatch(r"wf_[0-9a-f]{32}", handed["workflowId"])
        assert handed["code"] == READ_NOTE
        assert handed["args"] == {"path": "/notes/b.txt", "n": [1, "ü"]}
        assert handed["intent"] == READ_INTENT
        assert handed["toolsUsed"] == ["filesystem:read_text_file"]
        assert handed["clientTools"] == ["filesystem:read_text_file"]
        assert handed["routing"] == "local"
        expires = datetime.fromisoformat(handed["expiresAt"])
        assert before + timedelta(seconds=3590) < expires < before + timedelta(seconds=3700)
        assert hub.sent() == []
        counts = await hub.counts()
        assert counts == {"capabilities": 0, "versions": 0, "traces": 0, "states": 1}
        state = await hub.state(handed["workflowId"])
        assert state is not None
        context = LearningContext.from_state(state)
        assert context is not None
        assert (context.mode, context.code, context.intent) == ("direct", READ_NOTE, READ_INTENT)
        assert context.tools_used == ["filesystem:read_text_file"]
        assert context.plan.client_tools == ["filesystem:read_text_file"]
        assert (context.name, context.update, context.routing, context.capability) == (
            None,
            False,
            None,
            None,
        )
        assert await hub.state(handed["workflowId"], OTHER) is None  # another tenant sees none


async def test_the_hand_off_is_audited_as_the_executor_response(hub: Hub) -> None:
    await hub.hand_off(READ_NOTE)
    await hub.gateway.policy.audit.flush()
    query = sa.select(audit_events.c.details).where(audit_events.c.event == "EXECUTOR_RESPONSE")
    async with hub.gateway.db.read() as conn:
        details = [row.details for row in await conn.execute(query)]
    assert len(details) == 1
    assert details[0]["status"] == "execute_locally"
    assert details[0]["client_tools"] == ["filesystem:read_text_file"]
    # the id itself is not compared: the audit scrubber redacts ~2% of workflow ids (see
    # test_the_capture_audit_names_the_workflow_it_came_from)
    assert "workflow_id" in details[0]


async def test_the_hand_off_keeps_the_name_routing_and_timeout_asked_for(hub: Hub) -> None:
    handed = await hub.hand_off(
        READ_NOTE, name="fs:read_note", routing="cloud", options={"timeout_ms": 2500}
    )
    assert handed["timeoutMs"] == 2500
    state = await hub.state(handed["workflowId"])
    assert state is not None
    context = LearningContext.from_state(state)
    assert context is not None
    assert (context.name, context.routing, context.update) == ("fs:read_note", "cloud", False)


async def test_each_hand_off_is_its_own_workflow(hub: Hub) -> None:
    first = await hub.hand_off(READ_NOTE)
    second = await hub.hand_off(READ_NOTE)
    assert first["workflowId"] != second["workflowId"]
    assert (await hub.counts())["states"] == 2


async def test_code_using_only_the_gateways_servers_runs_here_for_a_client(hub: Hub) -> None:
    is_error, answer = await hub.execute({"intent": "say hello", "code": ECHO})
    assert not is_error, answer
    assert answer["status"] == "success"
    assert answer["result"]["args"] == {"text": "hello"}
    assert answer["toolsUsed"] == ["a:echo"]
    assert hub.sent() == [("a", "echo")]
    counts = await hub.counts()
    assert (counts["capabilities"], counts["states"]) == (1, 0)


async def test_code_mixing_client_and_gateway_tools_is_refused_before_anything_runs(
    hub: Hub,
) -> None:
    mixed = READ_NOTE.replace("return note", 'return [note, await mcp.a.echo(text="hi")]')
    is_error, answer = await hub.execute({"intent": "read and echo", "code": mixed})
    assert is_error
    assert answer["error"]["code"] == "INVALID_INPUT"
    assert "filesystem:read_text_file" in answer["error"]["message"]
    assert "a:echo" in answer["error"]["message"]
    assert hub.sent() == []
    counts = await hub.counts()
    assert (counts["capabilities"], counts["states"]) == (0, 0)


async def test_a_server_the_gateway_runs_as_cloud_runs_here_even_if_the_client_has_one(
    sqlite_url: str,
) -> None:
    both = ClientCaller(version="t", servers=frozenset({"filesystem", "a"}))
    async with open_hub(sqlite_url, routing={"cloud": ["a"], "local": ["filesystem"]}) as hub:
        is_error, answer = await hub.execute({"intent": "say hello", "code": ECHO}, client=both)
        assert not is_error, answer
        assert answer["status"] == "success"
        assert answer["routing"] == "cloud"
        assert hub.sent() == [("a", "echo")]
        assert (await hub.counts())["states"] == 0


async def test_a_server_the_gateway_runs_as_local_goes_to_the_client_that_runs_it(
    hub: Hub,
) -> None:
    mine = ClientCaller(version="t", servers=frozenset({"b"}))
    handed = await hub.hand_off('return await mcp.b.echo(text="mine")', client=mine)
    assert handed["clientTools"] == ["b:echo"]
    assert hub.sent() == []


async def test_a_caller_that_is_not_a_pml_client_is_told_to_run_pml_connect(hub: Hub) -> None:
    error = await hub.refused({"intent": READ_INTENT, "code": READ_NOTE}, client=None)
    assert error["code"] == "CLIENT_TOOLS_REQUIRE_CLIENT"
    assert "pml connect" in error["message"]
    assert "filesystem" in error["message"]
    assert error["servers"] == ["filesystem"]
    assert await hub.counts() == {"capabilities": 0, "versions": 0, "traces": 0, "states": 0}


async def test_a_client_without_that_server_is_told_to_add_it(hub: Hub) -> None:
    other = ClientCaller(version="t", servers=frozenset({"git"}))
    error = await hub.refused({"intent": READ_INTENT, "code": READ_NOTE}, client=other)
    assert error["code"] == "CLIENT_TOOLS_REQUIRE_CLIENT"
    assert "pml connect" in error["message"]
    assert "pml.toml" in error["message"]
    assert error["servers"] == ["filesystem"]
    assert (await hub.counts())["states"] == 0


@pytest.mark.parametrize("client", [None, FS], ids=["agent", "pml-client"])
async def test_an_unknown_server_outside_routing_local_is_still_an_unknown_tool(
    hub: Hub, client: ClientCaller | None
) -> None:
    error = await hub.refused({"intent": "x", "code": "return await mcp.nope.go()"}, client=client)
    assert error["code"] == "UNKNOWN_TOOL"
    assert "mcp.nope.go" in error["message"]


async def test_without_routing_local_a_server_nobody_runs_is_an_unknown_tool(
    sqlite_url: str,
) -> None:
    async with open_hub(sqlite_url) as hub:
        error = await hub.refused({"intent": READ_INTENT, "code": READ_NOTE}, client=None)
        assert error["code"] == "UNKNOWN_TOOL"


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("return (", "SYNTAX_ERROR"),
        ("x = 1\n" * 40_000 + READ_NOTE, "CODE_TOO_LARGE"),
        (READ_NOTE + "\nreturn await mcp.a.nothing_here()", "UNKNOWN_TOOL"),
    ],
    ids=["syntax", "too-large", "unknown-tool-beside"],
)
async def test_code_the_gateway_would_refuse_is_refused_before_any_hand_off(
    hub: Hub, code: str, expected: str
) -> None:
    error = await hub.refused({"intent": READ_INTENT, "code": code})
    assert error["code"] == expected
    assert (await hub.counts())["states"] == 0


async def test_the_policy_refuses_forbidden_tools_before_the_hand_off(hub: Hub) -> None:
    error = await hub.refused({"intent": READ_INTENT, "code": WRITE_NOTE})
    assert error["code"] == "POLICY_DENIED"
    assert error["tool"] == "filesystem:write_file"
    assert "forbids file_write" in error["message"]
    assert await hub.counts() == {"capabilities": 0, "versions": 0, "traces": 0, "states": 0}


async def test_a_taken_name_is_refused_before_the_hand_off(hub: Hub) -> None:
    await _named_capability(hub)
    other_code = READ_NOTE.replace("a.txt", "b.txt") + "\n# another"
    error = await hub.refused({"intent": READ_INTENT, "code": other_code, "name": "fs:read_note"})
    assert error["code"] == "NAME_TAKEN"
    assert (await hub.counts())["states"] == 0


async def test_update_of_a_missing_capability_is_refused_before_the_hand_off(hub: Hub) -> None:
    arguments = {"intent": READ_INTENT, "code": READ_NOTE, "name": "fs:nothing", "update": True}
    error = await hub.refused(arguments)
    assert error["code"] == "NOT_FOUND"
    assert (await hub.counts())["states"] == 0


async def test_a_capability_using_a_client_server_called_by_name_is_handed_back(
    hub: Hub,
) -> None:
    fqdn = await _named_capability(hub)
    uses = (await hub.record(fqdn)).usage_count
    arguments = {"intent": "read it again", "capability": "fs:read_note", "args": {}}
    is_error, handed = await hub.execute(arguments)
    assert not is_error, handed
    assert handed["status"] == "execute_locally"
    assert set(handed) == HANDOFF_FIELDS | {"capabilityFqdn", "capabilityName"}
    assert (handed["capabilityFqdn"], handed["capabilityName"]) == (fqdn, "fs:read_note")
    assert handed["args"] == {"path": "/notes/a.txt"}  # the schema's default, merged
    assert "args" in handed["code"]
    assert "mcp.filesystem.read_text_file" in handed["code"]
    assert handed["clientTools"] == ["filesystem:read_text_file"]
    state = await hub.state(handed["workflowId"])
    assert state is not None
    context = LearningContext.from_state(state)
    assert context is not None
    assert (context.mode, context.capability) == ("capability", fqdn)
    # given arguments win over the defaults
    is_error, given = await hub.execute({**arguments, "args": {"path": "/notes/z.txt"}})
    assert not is_error
    assert given["args"] == {"path": "/notes/z.txt"}
    assert hub.sent() == []
    assert (await hub.record(fqdn)).usage_count == uses  # the client's trace counts it


async def test_arguments_of_a_handed_back_capability_are_validated(hub: Hub) -> None:
    await _named_capability(hub)
    states = (await hub.counts())["states"]
    arguments = {"intent": "read", "capability": "fs:read_note", "args": {"path": 5}}
    error = await hub.refused(arguments)
    assert error["code"] == "INVALID_ARGS"
    assert "path" in error["message"]
    assert (await hub.counts())["states"] == states


@pytest.mark.parametrize("routing", [LOCAL_FS, {}], ids=["routing-local", "default-routing"])
async def test_a_caller_that_is_not_a_client_cannot_run_a_capability_learned_on_one(
    sqlite_url: str, routing: dict[str, Any]
) -> None:
    async with open_hub(sqlite_url, routing=routing) as hub:
        await _named_capability(hub)
        arguments = {"intent": "read", "capability": "fs:read_note", "args": {}}
        error = await hub.refused(arguments, client=None)
        assert error["code"] == "CLIENT_TOOLS_REQUIRE_CLIENT"
        assert "pml connect" in error["message"]
        tool_error = await hub.refused({}, client=None, tool="mcp__fs__read_note")
        assert tool_error["code"] == "CLIENT_TOOLS_REQUIRE_CLIENT"


async def test_a_capability_tool_called_by_a_client_answers_the_hand_off(hub: Hub) -> None:
    fqdn = await _named_capability(hub)
    is_error, handed = await hub.execute({"path": "/notes/c.txt"}, tool="mcp__fs__read_note")
    assert not is_error, handed
    assert handed["status"] == "execute_locally"
    assert handed["capabilityFqdn"] == fqdn
    assert handed["args"] == {"path": "/notes/c.txt"}
    assert await hub.state(handed["workflowId"]) is not None
    assert hub.sent() == []


async def test_a_capability_the_policy_forbids_is_refused_before_the_hand_off(
    hub: Hub,
) -> None:
    handed = await hub.hand_off(WRITE_NOTE, intent="save the note file", name="fs:save_note")
    [result] = await hub.ingest([trace(handed["workflowId"])])
    assert result["status"] == "captured"
    states = (await hub.counts())["states"]
    arguments = {"intent": "read", "capability": "fs:save_note", "args": {}}
    error = await hub.refused(arguments)
    assert error["code"] == "POLICY_DENIED"  # the capability's tools, against "read"
    assert error["tool"] == "filesystem:write_file"
    assert (await hub.counts())["states"] == states


# -- who is calling ------------------------------------------------------------------------


def test_calling_as_marks_the_calls_inside_the_block_only() -> None:
    assert current_client() is None
    with calling_as(FS):
        assert current_client() == FS
        with calling_as(None):
            assert current_client() is None
        assert current_client() == FS
    assert current_client() is None


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        (
            {CLIENT_HEADER: "pml-connect/0.4.0", SERVERS_HEADER: "filesystem,git"},
            {"filesystem", "git"},
        ),
        ({CLIENT_HEADER: " pml-connect/1.2.3+dev ", SERVERS_HEADER: " a , b ,,a"}, {"a", "b"}),
        ({CLIENT_HEADER: "pml-connect"}, set[str]()),
        ({CLIENT_HEADER: "pml-connect/1", SERVERS_HEADER: ""}, set[str]()),
        (
            {CLIENT_HEADER: "pml-connect/1", SERVERS_HEADER: "ok,../etc,a b,x*,fïle,日本,,;,-"},
            {"ok", "-"},
        ),
        ({CLIENT_HEADER: "pml-connect/1", SERVERS_HEADER: "x" * 65 + ",y"}, {"y"}),
        ({CLIENT_HEADER: "pml-connect/1", SERVERS_HEADER: "a\x00b,c\r\nd,e"}, {"e"}),
    ],
    ids=[
        "plain",
        "spaces-and-repeats",
        "no-version",
        "empty-list",
        "bad-names",
        "too-long",
        "controls",
    ],
)
def test_a_client_announcement_keeps_only_valid_server_names(
    headers: dict[str, str], expected: set[str]
) -> None:
    client = client_from_headers(headers)
    assert client is not None
    assert client.servers == frozenset(expected)


@pytest.mark.parametrize(
    "announced",
    [
        "",
        "garbage",
        "pml-connect/",
        "pml-connect/1.0 extra",
        "PML-CONNECT/1.0",
        "pml-connect/" + "1" * 33,
        "pml-connect/1.0;rm -rf",
        "pml-connect/1\x00",
        "pml-connect/ü",
        "curl/8.0 pml-connect/1.0",
        "x" * 100_000,
    ],
)
def test_a_malformed_announcement_is_not_a_pml_client(announced: str) -> None:
    assert client_from_headers({CLIENT_HEADER: announced, SERVERS_HEADER: "filesystem"}) is None


def test_without_the_announcement_servers_alone_make_no_client() -> None:
    assert client_from_headers({SERVERS_HEADER: "filesystem"}) is None
    assert client_from_headers({}) is None


def test_a_huge_server_list_is_cut_at_the_limit() -> None:
    names = ",".join(f"s{index}" for index in range(100_000))
    client = client_from_headers({CLIENT_HEADER: "pml-connect/1", SERVERS_HEADER: names})
    assert client is not None
    assert len(client.servers) == MAX_CLIENT_SERVERS
    assert client.servers == frozenset(f"s{index}" for index in range(MAX_CLIENT_SERVERS))
    assert client.version == "1"
