"""Client traces end client-routed workflows (SPEC §9.3–9.4), on SQLite and PostgreSQL:
every status (``captured | duplicate | expired | failed | rejected``), tenants kept apart,
offline runs, and hostile traces refused one by one while the rest of the batch is served."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import AsyncGenerator
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
import sqlalchemy as sa

from execution.clientrouting import (
    ECHO,
    FS,
    OTHER,
    READ_INTENT,
    READ_NOTE,
    SCOPE,
    WRITE_NOTE,
    Hub,
    open_hub,
    trace,
)
from pml.errors import InvalidInput
from pml.execution.answers import cached_analysis
from pml.execution.clients import ClientCaller
from pml.execution.handoff import CLIENT_RUN_KIND, ClientHandoff
from pml.execution.references import plan_references
from pml.execution.trace_wire import MAX_TRACES
from pml.gateway.schemas import ExecuteParams
from pml.registry.changes import INTENTS_CHANGED, UNNAMED_CAPTURE
from pml.registry.scope import Scope
from pml.storage.intent_repo import SqlIntentRepository
from pml.storage.tables import audit_events
from pml.storage.workflow_repo import WorkflowStateStore
from samples import statements_sent

pytestmark = pytest.mark.anyio

ZOE = Scope("acme", "webapp", "zoe")  # same org and project, another user
SECRET = "abc.def.ghi"
WAIT_S = 10.0


@pytest.fixture
async def hub(database_url: str) -> AsyncGenerator[Hub]:
    async with open_hub(database_url, routing={"local": ["filesystem"]}) as opened:
        yield opened


def offline_trace(workflow_id: str, code: str = READ_NOTE, **offline: Any) -> dict[str, Any]:
    """A run ``pml connect`` made while the gateway was unreachable."""
    return trace(workflow_id, offline={"code": code, "intent": READ_INTENT, **offline})


async def _captured(hub: Hub, code: str = READ_NOTE, **arguments: Any) -> dict[str, Any]:
    handed = await hub.hand_off(code, **arguments)
    [result] = await hub.ingest([trace(handed["workflowId"])])
    assert result["status"] == "captured", result
    return result


# -- captured --------------------------------------------------------------------------------


async def test_a_successful_trace_is_captured_under_the_keys_scope(hub: Hub) -> None:
    handed = await hub.hand_off(READ_NOTE)
    wid = handed["workflowId"]
    claimed = [
        {"tool": "filesystem:read_text_file", "argsDigest": "ab" * 8, "durationMs": 1.5},
        {"tool": "shell:run", "durationMs": 0.5},  # not in the code: never a tool it uses
    ]
    results = await hub.ingest([trace(wid, traceId="t-1", taskResults=claimed)])
    assert len(results) == 1
    result = results[0]
    fqdn = result["capabilityFqdn"]
    assert result == {
        "traceId": "t-1",
        "workflowId": wid,
        "status": "captured",
        "created": True,
        "capabilityFqdn": fqdn,
        "capabilityName": result["capabilityName"],
    }
    assert fqdn.startswith("acme.webapp.")
    assert result["capabilityName"].startswith("unnamed_")
    record = await hub.record(fqdn)
    assert record.routing == "local"
    assert record.tools_used == ["filesystem:read_text_file"]
    assert record.intent == READ_INTENT
    assert record.created_by == "erwan"
    assert (record.usage_count, record.success_count) == (1, 1)
    assert record.code is not None
    assert "mcp.filesystem.read_text_file" in record.code
    [row] = await hub.trace_rows(wid)
    assert row["capability_fqdn"] == fqdn
    assert (row["org"], row["project"], row["user_id"]) == ("acme", "webapp", "erwan")
    assert row["success"] is True
    assert row["duration_ms"] == pytest.approx(4.5)
    assert row["intent"] == READ_INTENT
    assert [task["tool"] for task in row["task_results"]] == [
        "filesystem:read_text_file",
        "shell:run",
    ]
    assert await hub.state(wid) is None
    assert await hub.counts() == {"capabilities": 1, "versions": 1, "traces": 1, "states": 0}
    assert hub.sent() == []
    assert await hub.gateway.registry.find_by_code(OTHER, record.code_hash or "") is None


async def test_a_capture_is_audited_as_created_from_a_trace(hub: Hub) -> None:
    result = await _captured(hub)
    await hub.gateway.policy.audit.flush()
    query = sa.select(audit_events).where(audit_events.c.event == "CAPABILITY_CREATED")
    async with hub.gateway.db.read() as conn:
        rows = [dict(row) for row in (await conn.execute(query)).mappings()]
    from_trace = [row for row in rows if row["details"].get("source") == "trace"]
    assert len(from_trace) == 1, rows
    assert from_trace[0]["details"]["capability"] == result["capabilityFqdn"]
    assert from_trace[0]["actor"] == "erwan"


async def test_the_capture_audit_names_the_workflow_it_came_from(hub: Hub) -> None:
    wid = "wf_c_904f8816fe154ed5a9607b745b2c0812"  # the scrubber once took such ids for secrets
    [result] = await hub.ingest([offline_trace(wid)])
    assert result["status"] == "captured"
    await hub.gateway.policy.audit.flush()
    query = sa.select(audit_events.c.request_id).where(audit_events.c.event == "CAPABILITY_CREATED")
    async with hub.gateway.db.read() as conn:
        assert [row.request_id for row in await conn.execute(query)] == [wid]


async def test_the_same_snippet_in_two_workflows_is_one_capability_and_two_traces(
    hub: Hub,
) -> None:
    first = await _captured(hub)
    second = await _captured(hub)
    assert first["created"] is True
    assert second["created"] is False
    assert second["capabilityFqdn"] == first["capabilityFqdn"]
    assert await hub.counts() == {"capabilities": 1, "versions": 1, "traces": 2, "states": 0}
    rows = await hub.trace_rows()
    assert {row["workflow_id"] for row in rows} == {first["workflowId"], second["workflowId"]}
    assert (await hub.record(first["capabilityFqdn"])).usage_count == 2


async def test_the_gateways_ttl_setting_dates_the_hand_off(database_url: str) -> None:
    routing = {"local": ["filesystem"], "workflow_ttl_s": 42}
    async with open_hub(database_url, routing=routing) as hub:
        before = datetime.now(UTC)
        handed = await hub.hand_off(READ_NOTE)
        expires = datetime.fromisoformat(handed["expiresAt"])
        assert before + timedelta(seconds=41) < expires < before + timedelta(seconds=60)


# -- duplicate -------------------------------------------------------------------------------


async def test_a_replayed_trace_is_a_duplicate_and_changes_nothing(hub: Hub) -> None:
    first = await _captured(hub)
    before = await hub.counts()
    uses = (await hub.record(first["capabilityFqdn"])).usage_count
    for _ in range(2):
        [again] = await hub.ingest([trace(first["workflowId"], traceId="t-again")])
        assert again == {
            "traceId": "t-again",
            "workflowId": first["workflowId"],
            "status": "duplicate",
        }
    assert await hub.counts() == before
    assert (await hub.record(first["capabilityFqdn"])).usage_count == uses


async def test_the_same_workflow_twice_in_one_batch_is_captured_once(hub: Hub) -> None:
    handed = await hub.hand_off(READ_NOTE)
    wid = handed["workflowId"]
    first, second = await hub.ingest([trace(wid), trace(wid, success=False)])
    assert first["status"] == "captured"
    assert second["status"] == "duplicate"
    assert "batch" in second["message"]
    assert len(await hub.trace_rows(wid)) == 1


async def test_two_requests_racing_for_one_workflow_capture_it_once(hub: Hub) -> None:
    handed = await hub.hand_off(READ_NOTE)
    wid = handed["workflowId"]
    results: list[dict[str, Any]] = []

    async def send() -> None:
        results.extend(await hub.ingest([trace(wid)]))

    with anyio.fail_after(WAIT_S):
        async with anyio.create_task_group() as group:
            for _ in range(4):
                group.start_soon(send)
    assert_one_captured_the_others_told_to_come_back(results)
    assert len(await hub.trace_rows(wid)) == 1
    assert (await hub.counts())["capabilities"] == 1
    [again] = await hub.ingest([trace(wid)])  # what a client told to come back does
    assert again["status"] == "duplicate"


def assert_one_captured_the_others_told_to_come_back(results: list[dict[str, Any]]) -> None:
    """Racing requests: one captures; the others saw it done (``duplicate``) or in flight
    (``pending``: not final, sent again after ``retryAfterS``)."""
    statuses = sorted(result["status"] for result in results)
    assert statuses[0] == "captured", results
    assert len(statuses) == 4
    assert set(statuses[1:]) <= {"duplicate", "pending"}, results
    for result in results:
        if result["status"] == "pending":
            assert 1 <= result["retryAfterS"] <= 5
            assert "again later" in result["message"]


# -- failed ----------------------------------------------------------------------------------


async def test_a_failed_run_ends_the_workflow_and_creates_nothing(hub: Hub) -> None:
    handed = await hub.hand_off(READ_NOTE)
    wid = handed["workflowId"]
    failing = [{"tool": "filesystem:read_text_file", "success": False, "error": "no such file"}]
    [result] = await hub.ingest(
        [trace(wid, success=False, error="ToolError: no such file", taskResults=failing)]
    )
    assert result == {"traceId": None, "workflowId": wid, "status": "failed"}
    assert await hub.state(wid) is None
    counts = await hub.counts()
    assert (counts["capabilities"], counts["traces"], counts["states"]) == (0, 1, 0)
    [row] = await hub.trace_rows(wid)
    assert row["success"] is False
    assert row["capability_fqdn"] is None
    assert row["error"] == "ToolError: no such file"
    assert row["task_results"][0]["success"] is False
    [again] = await hub.ingest([trace(wid)])  # a success reported later changes nothing
    assert again["status"] == "duplicate"
    assert (await hub.counts())["capabilities"] == 0


async def test_secrets_in_a_trace_are_scrubbed_before_they_are_stored(hub: Hub) -> None:
    handed = await hub.hand_off(READ_NOTE)
    wid = handed["workflowId"]
    tasks = [
        {
            "tool": "filesystem:read_text_file",
            "success": False,
            "error": f"401 from upstream: Authorization: Bearer {SECRET}",
            "argsDigest": "cd" * 8,
        }
    ]
    error = f"ToolError: curl -H 'Authorization: Bearer {SECRET}' https://x.example"
    [result] = await hub.ingest([trace(wid, success=False, error=error, taskResults=tasks)])
    assert result["status"] == "failed"
    [row] = await hub.trace_rows(wid)
    assert SECRET not in str(row)
    assert "Bearer [REDACTED]" in row["error"]
    assert "Bearer [REDACTED]" in row["task_results"][0]["error"]
    assert row["task_results"][0]["argsDigest"] == "cd" * 8


# -- expired ---------------------------------------------------------------------------------


async def test_an_unknown_workflow_is_expired_and_logged(
    hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="pml.execution.trace_ingest"):
        [result] = await hub.ingest([trace("wf_never_handed_out")])
    assert result["status"] == "expired"
    assert "expired" in result["message"].lower()
    assert "wf_never_handed_out" in caplog.text
    assert await hub.counts() == {"capabilities": 0, "versions": 0, "traces": 0, "states": 0}


async def _handed_two_hours_ago(hub: Hub, ttl_s: float) -> str:
    """A hand-off made through a store whose clock is two hours behind (already expired
    when ``ttl_s`` is under two hours)."""
    two_hours_ago = WorkflowStateStore(
        hub.gateway.db, clock=lambda: datetime.now(UTC) - timedelta(hours=2)
    )
    handoff = ClientHandoff(two_hours_ago, ttl_s=ttl_s)
    analysis = cached_analysis(READ_NOTE, 100_000)
    gateway = hub.gateway
    plan = await plan_references(
        analysis.calls, scope=SCOPE, registry=gateway.registry, pool=gateway.pool, client=FS
    )
    params = ExecuteParams(intent=READ_INTENT, code=READ_NOTE)
    handed = await handoff.direct(SCOPE, params, analysis, plan, None)
    assert handed["status"] == "execute_locally"
    return handed["workflowId"]


async def test_a_workflow_past_its_ttl_is_expired_and_creates_nothing(hub: Hub) -> None:
    wid = await _handed_two_hours_ago(hub, ttl_s=60)
    assert await hub.state(wid) is None  # past its expiry: gone for every reader
    [result] = await hub.ingest([trace(wid)])
    assert result["status"] == "expired"
    counts = await hub.counts()
    assert (counts["capabilities"], counts["traces"]) == (0, 0)
    live = await _handed_two_hours_ago(hub, ttl_s=3 * 3600)  # the same store, a longer TTL
    [captured] = await hub.ingest([trace(live)])
    assert captured["status"] == "captured"


# -- rejected --------------------------------------------------------------------------------


@pytest.mark.parametrize("intruder", [OTHER, ZOE], ids=["other-tenant", "other-user"])
async def test_another_callers_workflow_is_rejected_and_left_for_its_owner(
    hub: Hub, intruder: Scope
) -> None:
    handed = await hub.hand_off(READ_NOTE)
    wid = handed["workflowId"]
    [stolen] = await hub.ingest([trace(wid)], scope=intruder)
    assert stolen["status"] == "rejected"
    assert "another caller" in stolen["message"]
    assert await hub.state(wid) is not None
    assert (await hub.counts())["traces"] == 0
    [owned] = await hub.ingest([trace(wid)])
    assert owned["status"] == "captured"
    [replayed] = await hub.ingest([trace(wid)], scope=intruder)  # reported: still not theirs
    assert replayed["status"] == "rejected"
    assert len(await hub.trace_rows(wid)) == 1


async def test_a_workflow_that_is_not_a_client_run_is_rejected(hub: Hub) -> None:
    store = hub.gateway.policy.workflows
    await store.put("wf_waiting", kind="approval", scope=SCOPE, state={"x": 1}, ttl_s=60)
    await store.put("wf_garbled", kind=CLIENT_RUN_KIND, scope=SCOPE, state={"v": 99}, ttl_s=60)
    approval, garbled = await hub.ingest([trace("wf_waiting"), trace("wf_garbled")])
    assert approval["status"] == "rejected"
    assert "client-routed" in approval["message"]
    assert await store.get("wf_waiting", kind="approval", scope=SCOPE) == {"x": 1}
    assert garbled["status"] == "rejected"
    assert (await hub.counts())["capabilities"] == 0


async def test_more_than_a_hundred_traces_are_refused_whole(hub: Hub) -> None:
    handed = await hub.hand_off(READ_NOTE)
    batch = [trace(handed["workflowId"])] + [trace(f"wf_{n}") for n in range(MAX_TRACES)]
    with pytest.raises(InvalidInput, match="Too many traces: 101"):
        await hub.ingest(batch)
    assert await hub.state(handed["workflowId"]) is not None
    results = await hub.ingest(batch[:MAX_TRACES])
    assert [result["status"] for result in results] == ["captured"] + ["expired"] * 99


HOSTILE: list[tuple[str, object]] = [
    ("a-string", "wf_x"),
    ("a-number", 42),
    ("null", None),
    ("a-list", [trace("wf_inside_a_list")]),
    ("empty", {}),
    ("no-workflow-id", {"success": True, "durationMs": 1}),
    ("no-success", {"workflowId": "wf_h1", "durationMs": 1}),
    ("no-duration", {"workflowId": "wf_h2", "success": True}),
    ("id-a-number", trace("wf_h3") | {"workflowId": 123}),
    ("id-empty", trace("")),
    ("id-too-long", trace("w" * 65)),
    ("id-with-nul", trace("wf_\x00nul")),
    ("id-lone-surrogate", trace("wf_\ud800")),
    ("id-with-newline", trace("wf_a\nb")),
    ("trace-id-lone-surrogate", trace("wf_h4", traceId="t\udfff")),
    ("trace-id-a-dict", trace("wf_h5", traceId={"x": 1})),
    ("success-a-string", trace("wf_h6") | {"success": "yes"}),
    ("success-a-number", trace("wf_h7") | {"success": 1}),
    ("duration-a-string", trace("wf_h8", durationMs="12.5")),
    ("duration-nan", trace("wf_h9", durationMs=math.nan)),
    ("duration-inf", trace("wf_h10", durationMs=math.inf)),
    ("duration-negative", trace("wf_h11", durationMs=-1)),
    ("duration-huge", trace("wf_h12", durationMs=1e300)),
    ("duration-a-bool", trace("wf_h13", durationMs=True)),
    ("tasks-not-a-list", trace("wf_h14", taskResults="filesystem:read_text_file")),
    ("tasks-not-objects", trace("wf_h15", taskResults=[1, "x", None])),
    ("task-tool-a-number", trace("wf_h16", taskResults=[{"tool": 5}])),
    ("task-no-tool", trace("wf_h17", taskResults=[{"durationMs": 1}])),
    ("task-duration-nan", trace("wf_h18", taskResults=[{"tool": "t", "durationMs": math.nan}])),
    ("task-duration-a-string", trace("wf_h19", taskResults=[{"tool": "t", "durationMs": "1"}])),
    ("task-success-a-string", trace("wf_h20", taskResults=[{"tool": "t", "success": "no"}])),
    ("ten-thousand-tasks", trace("wf_h21", taskResults=[{"tool": "t"}] * 10_000)),
    ("huge-error", trace("wf_h22", success=False, error="e" * 100_000)),
    ("huge-task-error", trace("wf_h23", taskResults=[{"tool": "t", "error": "e" * 100_000}])),
    ("error-a-dict", trace("wf_h24", error={"message": "x"})),
    ("error-lone-surrogate", trace("wf_h29", success=False, error="boom \ud800")),
    ("task-tool-lone-surrogate", trace("wf_h30", taskResults=[{"tool": "fs:\udc00"}])),
    ("offline-a-string", trace("wf_h25", offline="return 1")),
    ("offline-no-code", trace("wf_h26", offline={"intent": "x"})),
    ("offline-no-intent", trace("wf_h27", offline={"code": READ_NOTE})),
    ("offline-code-a-number", trace("wf_h28", offline={"code": 5, "intent": "x"})),
]


@pytest.mark.parametrize("raw", [raw for _, raw in HOSTILE], ids=[n for n, _ in HOSTILE])
async def test_a_hostile_trace_is_rejected_alone_and_the_batch_is_served(
    hub: Hub, raw: object
) -> None:
    good = await hub.hand_off(READ_NOTE)
    failed = await hub.hand_off(READ_NOTE)
    batch = [trace(good["workflowId"]), raw, trace(failed["workflowId"], success=False)]
    results = await hub.ingest(batch)
    assert [result["status"] for result in results] == ["captured", "rejected", "failed"]
    assert results[1]["message"].startswith("Invalid trace"), results[1]
    assert results[0]["workflowId"] == good["workflowId"]
    assert results[2]["workflowId"] == failed["workflowId"]
    counts = await hub.counts()
    assert (counts["capabilities"], counts["traces"], counts["states"]) == (1, 2, 0)


async def test_every_hostile_trace_in_one_batch_is_rejected_and_the_valid_ones_served(
    hub: Hub,
) -> None:
    good = await hub.hand_off(READ_NOTE)
    batch: list[object] = [raw for _, raw in HOSTILE]
    batch.insert(len(batch) // 2, trace(good["workflowId"]))
    results = await hub.ingest(batch)
    assert len(results) == len(batch)
    statuses = [result["status"] for result in results]
    assert statuses.count("captured") == 1
    assert statuses[len(HOSTILE) // 2] == "captured"
    assert statuses.count("rejected") == len(HOSTILE)
    # the reply is sent as UTF-8 JSON: nothing in it may be a lone surrogate or a NUL
    text = json.dumps(results, ensure_ascii=False)
    assert text.encode("utf-8")
    assert "\x00" not in text


async def test_odd_but_valid_traces_are_stored_safely(hub: Hub) -> None:
    handed = await hub.hand_off(READ_NOTE)
    wid = handed["workflowId"]
    odd = trace(
        wid,
        success=False,
        error="échec ✓ 日本語 🙂 \x00 nul",
        taskResults=[{"tool": "fs\x00:x", "argsDigest": "é\x00", "extra": {"deep": [1]}}],
        extra={"unexpected": ["fields", {"are": "ignored"}]},
        durationMs=0,
        timestamp="2025-01-01T00:00:00Z",
        parentId="p-1",
    )
    [result] = await hub.ingest([odd])
    assert result["status"] == "failed"
    [row] = await hub.trace_rows(wid)
    assert row["error"] == "échec ✓ 日本語 🙂 \ufffd nul"
    assert row["task_results"][0]["tool"] == "fs\ufffd:x"
    assert "extra" not in row["task_results"][0]
    assert row["duration_ms"] == 0


async def test_a_nul_in_an_intent_is_refused_before_any_hand_off(hub: Hub) -> None:
    is_error, data = await hub.execute({"code": READ_NOTE, "intent": "read \x00 the note"})
    assert is_error
    assert data["error"]["code"] == "INVALID_INPUT"
    assert "intent" in data["error"]["message"]
    assert (await hub.counts())["states"] == 0


# -- names, versions, capabilities called by name ---------------------------------------------


async def test_a_named_hand_off_is_captured_under_that_name(hub: Hub) -> None:
    result = await _captured(hub, name="fs:read_note")
    assert result["capabilityName"] == "fs:read_note"
    assert result["created"] is True
    record = await hub.record("fs:read_note")
    assert record.named is True
    assert record.fqdn == result["capabilityFqdn"]
    assert record.tool_name == "mcp__fs__read_note"


async def test_an_update_hand_off_becomes_the_next_version(hub: Hub) -> None:
    first = await _captured(hub, name="fs:read_note")
    newer = READ_NOTE.replace("return note", 'return {"note": note}')
    result = await _captured(hub, newer, name="fs:read_note", update=True)
    assert result["capabilityFqdn"] == first["capabilityFqdn"]
    assert result["created"] is False
    resolved = await hub.gateway.registry.resolve(SCOPE, "fs:read_note")
    assert resolved.version.version == 2
    assert resolved.version.code is not None
    assert '{"note": note}' in resolved.version.code
    counts = await hub.counts()
    assert (counts["capabilities"], counts["versions"]) == (1, 2)


async def test_a_capability_run_by_name_on_a_client_counts_a_use_and_creates_nothing(
    hub: Hub,
) -> None:
    named = await _captured(hub, name="fs:read_note")
    fqdn = named["capabilityFqdn"]
    before = await hub.counts()
    record = await hub.record(fqdn)
    uses, successes = record.usage_count, record.success_count
    arguments = {"intent": "read it", "capability": "fs:read_note", "args": {}}
    _, ran = await hub.execute(arguments)
    _, broke = await hub.execute(arguments)
    ok, failed = await hub.ingest(
        [trace(ran["workflowId"]), trace(broke["workflowId"], success=False, error="boom")]
    )
    assert ok == {
        "traceId": None,
        "workflowId": ran["workflowId"],
        "status": "captured",
        "created": False,
        "capabilityFqdn": fqdn,
    }
    assert failed["status"] == "failed"
    record = await hub.record(fqdn)
    assert (record.usage_count, record.success_count) == (uses + 2, successes + 1)
    after = await hub.counts()
    assert (after["capabilities"], after["versions"]) == (
        before["capabilities"],
        before["versions"],
    )
    assert after["traces"] == before["traces"] + 2
    assert [row["capability_fqdn"] for row in await hub.trace_rows(ran["workflowId"])] == [fqdn]


async def test_a_name_taken_between_hand_off_and_trace_is_rejected_but_recorded(
    hub: Hub,
) -> None:
    handed = await hub.hand_off(READ_NOTE, name="fs:read_note")
    await _captured(hub, READ_NOTE.replace("a.txt", "other.txt"), name="fs:read_note")
    [result] = await hub.ingest([trace(handed["workflowId"])])
    assert result["status"] == "rejected"
    assert "fs:read_note" in result["message"]
    [row] = await hub.trace_rows(handed["workflowId"])
    assert row["capability_fqdn"] is None
    [again] = await hub.ingest([trace(handed["workflowId"])])
    assert again["status"] == "duplicate"


# -- offline runs ----------------------------------------------------------------------------


async def test_an_offline_run_is_captured_once(hub: Hub) -> None:
    sent = offline_trace("wf_c_0001")
    [result] = await hub.ingest([sent])
    assert result["status"] == "captured", result
    assert result["created"] is True
    record = await hub.record(result["capabilityFqdn"])
    assert record.routing == "local"
    assert record.tools_used == ["filesystem:read_text_file"]
    assert record.intent == READ_INTENT
    [again] = await hub.ingest([sent])
    assert again["status"] == "duplicate"
    counts = await hub.counts()
    assert (counts["capabilities"], counts["traces"]) == (1, 1)
    # the same code handed off later is the same capability
    assert (await _captured(hub))["capabilityFqdn"] == result["capabilityFqdn"]


async def test_requests_racing_with_one_offline_run_learn_it_once(hub: Hub) -> None:
    sent = offline_trace("wf_c_race")
    results: list[dict[str, Any]] = []

    async def send() -> None:
        results.extend(await hub.ingest([sent]))

    with anyio.fail_after(WAIT_S):
        async with anyio.create_task_group() as group:
            for _ in range(4):
                group.start_soon(send)
    assert_one_captured_the_others_told_to_come_back(results)
    assert len(await hub.trace_rows("wf_c_race")) == 1
    counts = await hub.counts()
    assert (counts["capabilities"], counts["states"]) == (1, 0)
    [again] = await hub.ingest([sent])
    assert again["status"] == "duplicate"


async def test_an_offline_run_keeps_its_name_and_a_failed_one_creates_nothing(hub: Hub) -> None:
    named, failed = await hub.ingest(
        [
            offline_trace("wf_c_named", name="fs:offline_note"),
            offline_trace("wf_c_failed", READ_NOTE + "\n# other") | {"success": False},
        ]
    )
    assert named["status"] == "captured"
    assert named["capabilityName"] == "fs:offline_note"
    assert failed["status"] == "failed"
    assert (await hub.counts())["capabilities"] == 1


@pytest.mark.parametrize(
    ("code", "client", "words"),
    [
        (ECHO, FS, "none of the client's servers"),
        ("return (", FS, "Syntax error"),
        ("return 1\x00", FS, "null bytes"),
        ("x = 1\n" * 40_000 + READ_NOTE, FS, "Code size exceeds maximum"),
        (WRITE_NOTE, FS, "forbids file_write"),
        (READ_NOTE, None, "pml connect"),
        (READ_NOTE, ClientCaller(version="t", servers=frozenset({"git"})), "pml connect"),
        ("return await mcp.nope.go()", FS, "Unknown tools"),
    ],
    ids=[
        "no-client-server",
        "syntax-error",
        "nul-in-code",
        "too-large",
        "policy-forbids",
        "no-client",
        "client-without-the-server",
        "unknown-tool",
    ],
)
async def test_an_offline_run_the_gateway_would_not_hand_off_is_rejected(
    hub: Hub, code: str, client: ClientCaller | None, words: str
) -> None:
    [result] = await hub.ingest([offline_trace("wf_c_bad", code)], client=client)
    assert result["status"] == "rejected"
    assert words in result["message"]
    assert hub.sent() == []
    counts = await hub.counts()
    assert (counts["capabilities"], counts["traces"]) == (0, 0)


@pytest.mark.parametrize(
    "offline",
    [
        {"intent": "   "},
        {"intent": "i" * 10_001},
        {"intent": "read \x00 the note"},
        {"intent": "read \ud800 the note"},
        {"name": "not a valid name!"},
        {"name": "fs:\x00"},
        {"routing": "mars"},
    ],
    ids=[
        "blank-intent",
        "long-intent",
        "nul-intent",
        "surrogate-intent",
        "bad-name",
        "nul-name",
        "bad-routing",
    ],
)
async def test_an_offline_run_with_bad_fields_is_rejected_alone(
    hub: Hub, offline: dict[str, Any]
) -> None:
    bad = trace("wf_c_bad", offline={"code": READ_NOTE, "intent": READ_INTENT, **offline})
    good = offline_trace("wf_c_good", READ_NOTE + "\n# good")
    rejected, captured = await hub.ingest([bad, good])
    assert rejected["status"] == "rejected", rejected
    assert captured["status"] == "captured", captured
    assert (await hub.counts())["capabilities"] == 1


async def test_an_offline_trace_for_a_live_hand_off_is_captured_from_the_hand_off(
    hub: Hub,
) -> None:
    handed = await hub.hand_off(READ_NOTE)
    other_code = READ_NOTE.replace("a.txt", "b.txt")
    [result] = await hub.ingest([offline_trace(handed["workflowId"], other_code)])
    assert result["status"] == "captured"
    record = await hub.record(result["capabilityFqdn"])
    assert record.code_hash == cached_analysis(READ_NOTE, 100_000).code_hash


async def test_code_replaced_by_a_new_version_is_learned_again_not_counted_for_the_old(
    hub: Hub,
) -> None:
    first = await _captured(hub)
    newer = READ_NOTE.replace("return note", 'return {"note": note}')
    updated = await _captured(hub, newer, name=first["capabilityFqdn"], update=True)
    assert updated["capabilityFqdn"] == first["capabilityFqdn"]
    again = await _captured(hub)  # the first code is no capability's code any more
    assert again["capabilityFqdn"] != first["capabilityFqdn"]
    assert again["created"] is True
    record = await hub.record(first["capabilityFqdn"])
    assert record.code is not None
    assert '{"note": note}' in record.code


async def test_a_registry_change_makes_the_ingest_forget_what_it_remembered(hub: Hub) -> None:
    # The gateway is to subscribe the ingest to registry changes; subscribed here explicitly.
    hub.gateway.registry.on_change(hub.gateway.traces.capability_changed)
    first = await _captured(hub)
    update = {
        "intent": "answer one",
        "code": "return 1",
        "name": first["capabilityFqdn"],
        "update": True,
    }
    is_error, updated = await hub.execute(update, client=None)  # runs here: new code
    assert not is_error, updated
    again = await _captured(hub)
    assert again["created"] is True
    assert again["capabilityFqdn"] != first["capabilityFqdn"]


@pytest.mark.parametrize("kind", [UNNAMED_CAPTURE, INTENTS_CHANGED])
async def test_new_code_or_new_intents_elsewhere_keep_what_the_ingest_remembered(
    hub: Hub, kind: str
) -> None:
    hub.gateway.registry.on_change(hub.gateway.traces.capability_changed)
    first = await _captured(hub)
    fqdn = first["capabilityFqdn"]
    await hub.gateway.registry.announce(SCOPE, fqdn, kind)
    handed = await hub.hand_off(READ_NOTE, intent="read the note once more")
    with statements_sent(hub.gateway.db.engine.sync_engine) as statements:
        [again] = await hub.ingest([trace(handed["workflowId"])])
    assert (again["status"], again["capabilityFqdn"], again["created"]) == ("captured", fqdn, False)
    # the code's capability is still known: no lookup of its owner
    assert not [s for s in statements if "code_hash IN" in s], statements


async def test_a_known_codes_new_intent_from_a_client_is_remembered(hub: Hub) -> None:
    first = await hub.hand_off(READ_NOTE, intent="show me the note")
    [created] = await hub.ingest([trace(first["workflowId"])])
    # the code is known when the next batch arrives: its traces take the batch's shortcut
    later = [await hub.hand_off(READ_NOTE, intent=text) for text in ("what does it say", "cat it")]
    results = await hub.ingest([trace(handed["workflowId"]) for handed in later])
    assert {result["capabilityFqdn"] for result in results} == {created["capabilityFqdn"]}
    await hub.gateway.executor.flush()
    async with hub.gateway.db.read() as conn:
        found = await SqlIntentRepository(conn).of([created["capabilityFqdn"]])
    texts = {intent.text for intent in found[created["capabilityFqdn"]]}
    assert texts == {"show me the note", "what does it say", "cat it"}


async def test_a_clients_failed_run_of_a_capabilitys_code_counts_against_it(hub: Hub) -> None:
    created = await _captured(hub)
    handed = await hub.hand_off(READ_NOTE)
    failing = [{"tool": "filesystem:read_text_file", "success": False, "error": "gone"}]
    [result] = await hub.ingest(
        [trace(handed["workflowId"], success=False, error="ToolError: gone", taskResults=failing)]
    )
    assert result["status"] == "failed"
    await hub.gateway.executor.flush()
    record = await hub.record(created["capabilityFqdn"])
    assert (record.usage_count, record.success_count) == (2, 1)
    assert (record.recent_runs, record.recent_outcomes) == (2, 0b10)  # newest run failed
