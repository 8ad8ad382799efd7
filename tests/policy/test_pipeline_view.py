"""One request's pipeline record (SPEC §13): from a ``PIPELINE_RECORD`` event, assembled from
the events of real ``pml_execute`` runs through the gateway, and from hostile stored rows."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pml.errors import InvalidInput, NotFound
from pml.policy import pipeline_view
from pml.policy.pipeline_view import check_request_id, pipeline_record, request_record
from pml.storage.audit_repo import AuditEntry, AuditRepository, AuditRow
from pml.storage.database import Database
from policy.conftest import PolicyGateway
from policy.test_pipeline import READ_LIST_WRITE

pytestmark = pytest.mark.anyio

AT = datetime(2025, 6, 1, 12, 30, tzinfo=UTC)
RECORD_KEYS = {
    "request_id",
    "scope",
    "actor",
    "started_at",
    "ended_at",
    "text",
    "router",
    "policy",
    "tools_offered",
    "round_trips",
    "tool_calls",
    "approvals",
    "permissions",
    "memory",
    "clarifications",
    "capabilities",
    "timing_ms",
    "outcome",
    "assembled",
    "truncated",
    "events",
}
AGENT_RECORD: dict[str, Any] = {
    "request_id": "turn-1",
    "text": "what time is it in Tokyo",
    "router": {"intent": "lookup_search", "confidence": 0.9, "decided_by": "heuristic:time"},
    "policy": {"rule": "policy:lookup_search", "allowed": ["time"], "forbidden": ["file_write"]},
    "tools_offered": ["time:get_current_time", "pml:remember"],
    "round_trips": 2,
    "tool_calls": [
        {"tool": "time:get_current_time", "outcome": "ok", "duration_ms": 12.5, "decided_by": "r"}
    ],
    "memory": {"proposed": 1, "applied": [{"target": "pml"}], "refused": [], "waiting": []},
    "permissions": {"asked": [], "granted": [], "denied": []},
    "clarifications": [{"question": "Which city?", "answer": "Tokyo"}],
    "timing_ms": {"router": 3.0, "executor": 40.0, "tools": 12.5, "posthooks": 1.0, "total": 60},
    "outcome": "answered",
}


def row(index: int, event: str, details: Any = None, **fields: Any) -> AuditRow:
    values: dict[str, Any] = {
        "id": index,
        "ts": AT + timedelta(milliseconds=10 * index),
        "event": event,
        "org": "acme",
        "project": "webapp",
        "details": {} if details is None else details,
        "actor": "erwan",
        "request_id": "turn-1",
        "decided_by": None,
    }
    values.update(fields)
    return AuditRow(**values)


def as_entry(item: AuditRow) -> AuditEntry:
    return AuditEntry(
        ts=item.ts,
        event=item.event,
        org=item.org,
        project=item.project,
        details=item.details,
        actor=item.actor,
        request_id=item.request_id,
        decided_by=item.decided_by,
    )


async def record_of(pg: PolicyGateway, request_id: object) -> dict[str, Any]:
    await pg.gateway.policy.audit.flush()
    repo = AuditRepository(pg.gateway.db)
    return await request_record(repo, org="acme", project="webapp", request_id=str(request_id))


async def last_request_id(pg: PolicyGateway) -> str:
    routed = await pg.events("ROUTER_OUTPUT")
    return str(routed[-1]["request_id"])


# -- a PIPELINE_RECORD is the base ------------------------------------------------------


async def test_a_pipeline_record_event_is_the_record_with_the_events_beside_it(
    db: Database,
) -> None:
    rows = [
        row(1, "ROUTER_OUTPUT", {"intent": "lookup_search"}, decided_by="heuristic:time"),
        row(2, "TOOL_CALL_START", {"tool": "time:get_current_time"}),
        row(3, "TOOL_CALL_END", {"tool": "time:get_current_time", "success": True}),
        row(4, "POSTHOOK_MEMORY", {"target": "pml", "outcome": "applied", "text": "metric"}),
        row(5, "PIPELINE_RECORD", AGENT_RECORD, decided_by="agent"),
    ]
    await AuditRepository(db).insert_many([as_entry(item) for item in rows])
    record = await request_record(
        AuditRepository(db), org="acme", project="webapp", request_id="turn-1"
    )
    assert set(record) == RECORD_KEYS
    assert record["assembled"] is False
    assert record["truncated"] is False
    for key in ("text", "router", "policy", "tools_offered", "round_trips", "tool_calls"):
        assert record[key] == AGENT_RECORD[key], key
    assert record["memory"] == AGENT_RECORD["memory"]
    assert record["clarifications"] == AGENT_RECORD["clarifications"]
    assert record["timing_ms"] == AGENT_RECORD["timing_ms"]
    assert record["outcome"] == "answered"
    assert (record["request_id"], record["scope"], record["actor"]) == (
        "turn-1",
        "acme.webapp",
        "erwan",
    )
    assert record["started_at"] == "2025-06-01T12:30:00.010000+00:00"
    assert record["ended_at"] == "2025-06-01T12:30:00.050000+00:00"
    assert [e["event"] for e in record["events"]] == [item.event for item in rows]
    assert record["events"][0] == {
        "ts": "2025-06-01T12:30:00.010000+00:00",
        "event": "ROUTER_OUTPUT",
        "decided_by": "heuristic:time",
        "summary": '{"intent":"lookup_search"}',
    }
    assert len(record["events"][-1]["summary"]) <= pipeline_view.SUMMARY_CHARS
    json.dumps(record, allow_nan=False)


def test_a_pipeline_record_with_fields_of_the_wrong_shape_falls_back_to_the_events() -> None:
    hostile = {
        "text": 42,
        "router": "lookup",
        "policy": ["x"],
        "tools_offered": "time:get_current_time",
        "round_trips": True,
        "tool_calls": {"tool": "x"},
        "memory": {"proposed": -3, "applied": "yes", "refused": None},
        "permissions": "all",
        "clarifications": "why",
        "timing_ms": {"router": "fast", "total": float("nan"), "tools": 10**400},
        "outcome": ["answered"],
    }
    rows = [
        row(1, "ROUTER_OUTPUT", {"intent": "file_task"}),
        row(2, "PERMISSION_CHECK", {"tool": "fs:read", "outcome": "allow"}, decided_by="rule:r"),
        row(3, "TOOL_CALL_START", {"tool": "fs:read"}),
        row(4, "TOOL_CALL_END", {"tool": "fs:read", "success": True, "duration_ms": 5}),
        row(5, "POSTHOOK_MEMORY", {"outcome": "waiting", "target": "memory"}),
        row(6, "PIPELINE_RECORD", hostile),
    ]
    record = pipeline_record(rows)
    assert record["text"] is None
    assert record["router"] == {"intent": "file_task"}
    assert record["policy"] is None
    assert record["tools_offered"] == []
    assert record["round_trips"] == 0
    assert record["tool_calls"] == [
        {"tool": "fs:read", "outcome": "ok", "duration_ms": 5, "decided_by": "rule:r"}
    ]
    assert record["memory"] == {
        "proposed": 1,
        "applied": [],
        "refused": [],
        "waiting": [{"outcome": "waiting", "target": "memory"}],
    }
    assert record["permissions"] == {"asked": [], "granted": [], "denied": []}
    assert record["clarifications"] == []
    assert record["timing_ms"]["router"] is None
    assert record["timing_ms"]["total"] == 50.0  # first event to last, not the NaN
    assert record["outcome"] == "answered"
    json.dumps(record, allow_nan=False)


# -- assembled from the events of real runs ---------------------------------------------


async def test_a_pml_execute_run_is_assembled_from_its_events(pg: PolicyGateway) -> None:
    is_error, data = await pg.execute(
        intent="what time is it", code="return await mcp.time.get_current_time()"
    )
    assert is_error is False, data
    request_id = await last_request_id(pg)
    rows = [e for e in await pg.events() if e["request_id"] == request_id]
    record = await record_of(pg, request_id)
    assert set(record) == RECORD_KEYS
    assert record["assembled"] is True
    assert record["request_id"] == request_id
    assert (record["scope"], record["actor"]) == ("acme.webapp", "erwan")
    router = rows[0]["details"]
    assert record["router"] == router
    assert record["router"]["source"] == "pml_execute"
    [decision] = [e["details"] for e in rows if e["event"] == "POLICY_DECISION"]
    assert record["policy"] == decision
    [call] = record["tool_calls"]
    [end] = [e["details"] for e in rows if e["event"] == "TOOL_CALL_END"]
    [check] = [e for e in rows if e["event"] == "PERMISSION_CHECK"]
    assert call == {
        "tool": "time:get_current_time",
        "outcome": "ok",
        "duration_ms": end["duration_ms"],
        "decided_by": check["decided_by"],
    }
    assert record["timing_ms"]["tools"] == end["duration_ms"]
    [response] = [e["details"] for e in rows if e["event"] == "EXECUTOR_RESPONSE"]
    assert record["timing_ms"]["executor"] == response["duration_ms"]
    assert record["timing_ms"]["total"] >= 0
    assert record["outcome"] == "answered"
    assert [item["event"] for item in record["capabilities"]][:1] == ["POSTHOOK_CAPTURE"]
    assert "CAPABILITY_CREATED" in {item["event"] for item in record["capabilities"]}
    assert [e["event"] for e in record["events"]] == [e["event"] for e in rows]
    assert record["permissions"] == {"asked": [], "granted": [], "denied": []}
    assert record["started_at"] <= record["ended_at"]


async def test_a_paused_run_shows_the_ask_and_the_persons_approval(pg: PolicyGateway) -> None:
    is_error, paused = await pg.execute(intent="copy the note to a new file", code=READ_LIST_WRITE)
    assert is_error is False
    assert paused["status"] == "approval_required", paused
    request_id = await last_request_id(pg)
    waiting = await record_of(pg, request_id)
    assert waiting["outcome"] == "approval_required"
    assert [(c["tool"], c["outcome"]) for c in waiting["tool_calls"]] == [
        ("filesystem:read_text_file", "ok"),
        ("filesystem:list_directory", "ok"),
        ("filesystem:write_file", "approval_required"),
    ]
    assert waiting["tool_calls"][2]["decided_by"] == "default:ask:file_write"
    assert waiting["permissions"]["asked"] == ["filesystem:write_file"]
    assert [a["event"] for a in waiting["approvals"]] == ["APPROVAL_REQUIRED"]

    await pg.decide(paused["workflowId"], "once")
    resumed = await pg.execute(
        intent="approve",
        continue_workflow={"workflow_id": paused["workflowId"], "approved": True},
    )
    assert resumed[1]["status"] == "success", resumed
    decided = await record_of(pg, request_id)
    assert [(a["event"], a["outcome"]) for a in decided["approvals"]] == [
        ("APPROVAL_REQUIRED", None),
        ("APPROVAL_DECIDED", "approved"),
    ]
    assert decided["approvals"][1]["decided_by"] == "user:ana"
    assert decided["permissions"]["granted"] == ["filesystem:write_file"]
    # the resumed run is its own request: replays, then the approved call sent once
    again = await record_of(pg, await last_request_id(pg))
    assert [(c["tool"], c["outcome"]) for c in again["tool_calls"]] == [
        ("filesystem:read_text_file", "replayed"),
        ("filesystem:list_directory", "replayed"),
        ("filesystem:write_file", "ok"),
    ]
    assert again["tool_calls"][2]["decided_by"].startswith("grant:")
    assert again["permissions"]["granted"] == ["filesystem:write_file"]
    assert again["outcome"] == "answered"
    assert again["timing_ms"]["tools"] == again["tool_calls"][2]["duration_ms"]


async def test_a_forbidden_tool_is_a_denial_and_a_failed_request(pg: PolicyGateway) -> None:
    is_error, _ = await pg.execute(intent="read the note file", code=READ_LIST_WRITE)
    assert is_error is True
    record = await record_of(pg, await last_request_id(pg))
    assert record["permissions"]["denied"] == ["filesystem:write_file"]
    assert record["tool_calls"] == []  # refused before the run: nothing was called
    assert record["outcome"] == "failed"
    assert "POLICY_DENIED" in [e["event"] for e in record["events"]]


async def test_a_pass_through_call_is_a_request_of_its_own(pg: PolicyGateway) -> None:
    result = await pg.call("time__get_current_time", {})
    assert result.is_error is False, result
    record = await record_of(pg, await last_request_id(pg))
    assert record["router"]["source"] == "pass_through"
    assert [(c["tool"], c["outcome"]) for c in record["tool_calls"]] == [
        ("time:get_current_time", "ok")
    ]
    assert record["outcome"] == "answered"


# -- reading: ids, scope, actor, bounds -------------------------------------------------


@pytest.mark.parametrize(
    "request_id",
    [
        "",
        "x" * 65,
        "x" * 10_000,
        "'; DROP TABLE audit_events; --",
        "日本語",
        "a\nb",
        "a b",
        "a\x1b[2J\u202e",
        "../etc/passwd",
        None,
        7,
    ],
)
def test_a_malformed_request_id_is_invalid_input(request_id: object) -> None:
    with pytest.raises(InvalidInput) as raised:
        check_request_id(request_id)
    assert "Invalid request id" in raised.value.message
    assert "\n" not in raised.value.message
    assert len(raised.value.message) < 200


@pytest.mark.parametrize("request_id", ["a", "4f2a9c01d3e5b7a9", "wf:1.2_x-y", "x" * 64])
def test_well_formed_request_ids_pass(request_id: str) -> None:
    assert check_request_id(request_id) == request_id


async def test_an_id_without_events_in_the_scope_or_for_the_actor_is_not_found(
    db: Database,
) -> None:
    repo = AuditRepository(db)
    await repo.insert_many([as_entry(row(1, "ROUTER_OUTPUT", org="globex"))])
    with pytest.raises(NotFound, match="No audit events for request turn-1"):
        await request_record(repo, org="acme", project="webapp", request_id="turn-1")
    found = await request_record(repo, org="globex", project="webapp", request_id="turn-1")
    assert found["scope"] == "globex.webapp"
    with pytest.raises(NotFound):
        await request_record(
            repo, org="globex", project="webapp", request_id="turn-1", actor="someone"
        )
    with pytest.raises(InvalidInput):
        await request_record(repo, org="acme", project="webapp", request_id="a b")


async def test_a_request_with_more_events_than_the_bound_is_read_in_pages_and_truncated(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pipeline_view, "MAX_ROWS", 5)
    monkeypatch.setattr(pipeline_view, "PAGE_ROWS", 2)
    repo = AuditRepository(db)
    await repo.insert_many([as_entry(row(i, "TOOL_CALL_START", {"n": i})) for i in range(1, 8)])
    await repo.insert_many([as_entry(row(9, "TOOL_CALL_START", request_id="other"))])
    record = await request_record(repo, org="acme", project="webapp", request_id="turn-1")
    assert [json.loads(e["summary"])["n"] for e in record["events"]] == [1, 2, 3, 4, 5]
    assert record["truncated"] is True
    exact = await request_record(repo, org="acme", project="webapp", request_id="other")
    assert exact["truncated"] is False
    monkeypatch.setattr(pipeline_view, "MAX_ROWS", 7)
    whole = await request_record(repo, org="acme", project="webapp", request_id="turn-1")
    assert (len(whole["events"]), whole["truncated"]) == (7, False)


# -- hostile stored rows ----------------------------------------------------------------


def deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"d": value}
    return value


HOSTILE_DETAILS: list[Any] = [
    None,
    "just text",
    [1, 2, 3],
    42,
    {"tool": 42, "success": "yes", "duration_ms": "fast", "outcome": ["ask"]},
    {"tool": "x" * 1_000_000, "duration_ms": float("inf"), "replayed": 1},
    {"tool": None, "stage": "call", "scope": "not a mapping"},
    {"capability": {"nested": True}, "fqdn": 10**30, "workflow_id": ["w"]},
    {1: "int key", (2, 3): "tuple key", "n": float("nan"), "big": 10**5000, "f": 1e308 * 10},
    deep(5000),
    {"items": list(range(100_000))},
    {"text": "\x1b[2J\u202e\x00 evil"},
]


def test_hostile_details_of_every_event_never_crash_and_stay_bounded() -> None:
    events = [
        "ROUTER_OUTPUT",
        "POLICY_DECISION",
        "PERMISSION_CHECK",
        "PERMISSION_GRANTED",
        "PERMISSION_DENIED",
        "POLICY_DENIED",
        "APPROVAL_REQUIRED",
        "APPROVAL_DECIDED",
        "TOOL_CALL_START",
        "TOOL_CALL_END",
        "EXECUTOR_TOOL_REFUSED",
        "EXECUTOR_RESPONSE",
        "POSTHOOK_MEMORY",
        "AGENT_CLARIFICATION",
        "CAPABILITY_CREATED",
        "PIPELINE_RECORD",
        "SOMETHING_ELSE",
    ]
    rows = [
        row(index, event, details)
        for index, (event, details) in enumerate(
            ((event, details) for event in events for details in HOSTILE_DETAILS), start=1
        )
    ]
    record = pipeline_record(rows)
    text = json.dumps(record, allow_nan=False, ensure_ascii=False)
    assert len(text) < 2_000_000
    assert set(record) == RECORD_KEYS
    assert len(record["events"]) == len(rows)
    assert all(len(e["summary"]) <= pipeline_view.SUMMARY_CHARS for e in record["events"])
    assert all(isinstance(call["outcome"], str) for call in record["tool_calls"])
    assert all(
        call["tool"] is None or len(call["tool"]) <= pipeline_view.MAX_NAME
        for call in record["tool_calls"]
    )


def test_hostile_row_fields_never_crash() -> None:
    odd = cast(Any, object())
    rows = [
        row(1, "ROUTER_OUTPUT", {"intent": "x"}, actor=cast(Any, 5)),
        row(2, cast(Any, None), {}, id="two", ts="yesterday", request_id=["r"], decided_by=odd),
        row(3, "TOOL_CALL_END", {"tool": "a:b", "success": True}, ts=AT.replace(tzinfo=None)),
        row(4, "x" * 100_000, {"tool": "a:b"}, org="o" * 10_000, project="\u202e"),
    ]
    record = pipeline_record(rows)
    json.dumps(record, allow_nan=False)
    assert record["request_id"] is None  # the first (an id that is no number) has none
    assert record["started_at"] is None  # nor a time
    assert record["actor"] == "erwan"  # the first actor that is a name
    assert record["timing_ms"]["total"] is None
    assert record["tool_calls"] == [
        {"tool": "a:b", "outcome": "ok", "duration_ms": None, "decided_by": None}
    ]
    assert all(e["event"] is None or len(e["event"]) <= 64 for e in record["events"])
    assert len(record["scope"] or "") <= pipeline_view.MAX_NAME


def test_no_rows_is_an_empty_record() -> None:
    record = pipeline_record([])
    assert set(record) == RECORD_KEYS
    assert (record["request_id"], record["events"], record["outcome"]) == (None, [], "unknown")


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=50),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=30,
)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                ["TOOL_CALL_START", "TOOL_CALL_END", "PIPELINE_RECORD", "POSTHOOK_MEMORY"]
            ),
            JSON,
        ),
        max_size=8,
    )
)
def test_any_json_details_give_a_json_record(events: list[tuple[str, Any]]) -> None:
    rows = [row(i, event, details) for i, (event, details) in enumerate(events, start=1)]
    record = pipeline_record(rows)
    text = json.dumps(record, allow_nan=False)
    timing = record["timing_ms"].values()
    assert not any(isinstance(v, float) and not math.isfinite(v) for v in timing)
    assert len(record["events"]) == len(rows)
    assert text
