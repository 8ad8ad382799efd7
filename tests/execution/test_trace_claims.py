"""A trace ingest that dies holding claims loses no trace (SPEC §9.4), on SQLite and
PostgreSQL: a workflow another request holds is ``pending`` (sent again later, not final);
a claim past its lease is taken over; a request that ends after losing its claim writes
nothing twice; a claim is released or dropped only by the request that holds it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from execution.clientrouting import OTHER, READ_INTENT, READ_NOTE, SCOPE, Hub, open_hub, trace
from pml.execution.handoff import CLIENT_RUN_KIND
from pml.execution.trace_claims import CLAIM_LEASE_S, CLAIMED_KIND, TraceClaims
from pml.storage.tables import workflow_state
from pml.storage.trace_repo import TraceRow
from pml.storage.types import utc_now

pytestmark = pytest.mark.anyio

DIED = timedelta(seconds=CLAIM_LEASE_S + 1)  # a claim this old was left by a dead request


@pytest.fixture
async def hub(database_url: str) -> AsyncGenerator[Hub]:
    async with open_hub(database_url, routing={"local": ["filesystem"]}) as opened:
        yield opened


async def stored(hub: Hub, workflow_id: str) -> dict[str, Any] | None:
    query = sa.select(workflow_state).where(workflow_state.c.workflow_id == workflow_id)
    async with hub.gateway.db.read() as conn:
        row = (await conn.execute(query)).mappings().first()
    return None if row is None else dict(row)


async def test_a_workflow_another_request_holds_is_pending_and_changes_nothing(
    hub: Hub,
) -> None:
    wid = (await hub.hand_off(READ_NOTE))["workflowId"]
    token = utc_now()
    assert list(await TraceClaims(hub.gateway.db).claim(SCOPE, [wid], token)) == [wid]
    before = await hub.counts()
    [result] = await hub.ingest([trace(wid, traceId="t-1")])
    assert result == {
        "traceId": "t-1",
        "workflowId": wid,
        "status": "pending",
        "message": "Another request is capturing this workflow; send the trace again later",
        "retryAfterS": 5,
    }
    assert await hub.counts() == before
    held = await stored(hub, wid)
    assert held is not None
    assert (held["kind"], held["claimed_at"]) == (CLAIMED_KIND, token)


async def test_a_pending_trace_comes_back_no_later_than_the_lease_ends(hub: Hub) -> None:
    wid = (await hub.hand_off(READ_NOTE))["workflowId"]
    almost = utc_now() - timedelta(seconds=CLAIM_LEASE_S - 2)
    await TraceClaims(hub.gateway.db).claim(SCOPE, [wid], almost)
    [result] = await hub.ingest([trace(wid)])
    assert result["status"] == "pending"
    assert result["retryAfterS"] in (1, 2)


async def test_a_claim_left_by_a_request_that_died_is_taken_over_and_captured(hub: Hub) -> None:
    wid = (await hub.hand_off(READ_NOTE))["workflowId"]
    await TraceClaims(hub.gateway.db).claim(SCOPE, [wid], utc_now() - DIED)
    [result] = await hub.ingest([trace(wid)])
    assert result["status"] == "captured", result
    assert result["created"] is True
    assert len(await hub.trace_rows(wid)) == 1
    assert await stored(hub, wid) is None
    [again] = await hub.ingest([trace(wid)])
    assert again["status"] == "duplicate"


async def test_a_failed_run_whose_claim_was_left_behind_is_recorded_once(hub: Hub) -> None:
    wid = (await hub.hand_off(READ_NOTE))["workflowId"]
    await TraceClaims(hub.gateway.db).claim(SCOPE, [wid], utc_now() - DIED)
    [result] = await hub.ingest([trace(wid, success=False, error="boom")])
    assert result["status"] == "failed"
    assert [row["success"] for row in await hub.trace_rows(wid)] == [False]
    assert (await hub.counts())["capabilities"] == 0


async def test_an_offline_run_whose_mark_was_left_behind_is_learned(hub: Hub) -> None:
    sent = trace("wf_c_dead", offline={"code": READ_NOTE, "intent": READ_INTENT})
    claims = TraceClaims(hub.gateway.db)
    assert list(await claims.claim_new(SCOPE, ["wf_c_dead"], utc_now(), ttl_s=3600)) == [
        "wf_c_dead"
    ]
    [held] = await hub.ingest([sent])
    assert held["status"] == "pending"
    async with hub.gateway.db.transaction() as conn:  # time passes: that request died
        await conn.execute(
            sa.update(workflow_state)
            .where(workflow_state.c.workflow_id == "wf_c_dead")
            .values(claimed_at=utc_now() - DIED)
        )
    [result] = await hub.ingest([sent])
    assert result["status"] == "captured", result
    counts = await hub.counts()
    assert (counts["capabilities"], counts["traces"], counts["states"]) == (1, 1, 0)


async def test_a_request_that_lost_its_claim_writes_nothing_when_it_ends(hub: Hub) -> None:
    wid = (await hub.hand_off(READ_NOTE))["workflowId"]
    claims = TraceClaims(hub.gateway.db)
    slow = utc_now() - DIED
    await claims.claim(SCOPE, [wid], slow)
    [taken] = await hub.ingest([trace(wid)])  # takes it over and ends it
    assert taken["status"] == "captured"
    late = TraceRow(
        id=str(uuid.uuid4()),
        org=SCOPE.org,
        project=SCOPE.project,
        user_id=SCOPE.user,
        intent=READ_INTENT,
        capability_fqdn=taken["capabilityFqdn"],
        success=True,
        error=None,
        duration_ms=1.0,
        task_results=[],
        created_at=utc_now(),
        workflow_id=wid,
    )
    assert await claims.finish(SCOPE, [late], [wid], slow) == set()
    [row] = await hub.trace_rows(wid)
    assert row["id"] != late.id


async def test_only_the_request_holding_a_claim_releases_it(hub: Hub) -> None:
    wid = (await hub.hand_off(READ_NOTE))["workflowId"]
    claims = TraceClaims(hub.gateway.db)
    holder, other = utc_now(), utc_now() - DIED
    await claims.claim(SCOPE, [wid], holder)
    await claims.release(SCOPE, [wid], other)
    await claims.drop(SCOPE, [wid], other)
    held = await stored(hub, wid)
    assert held is not None
    assert held["kind"] == CLAIMED_KIND
    await claims.release(SCOPE, [wid], holder)
    released = await stored(hub, wid)
    assert released is not None
    assert (released["kind"], released["claimed_at"]) == (CLIENT_RUN_KIND, None)
    [result] = await hub.ingest([trace(wid)])
    assert result["status"] == "captured"


async def test_a_claim_cannot_be_taken_over_by_another_caller(hub: Hub) -> None:
    wid = (await hub.hand_off(READ_NOTE))["workflowId"]
    claims = TraceClaims(hub.gateway.db)
    await claims.claim(SCOPE, [wid], utc_now() - DIED)
    assert await claims.claim(OTHER, [wid], utc_now()) == {}
    [result] = await hub.ingest([trace(wid)], scope=OTHER)
    assert result["status"] == "rejected"
    held = await stored(hub, wid)
    assert held is not None
    assert held["kind"] == CLAIMED_KIND
