"""``[limits] pending_workflows_per_user``: a user's waiting approvals and hand-offs are
counted before another is stored (SQLite and PostgreSQL), and over the quota a run that
would pause gets ``LIMIT_EXCEEDED`` naming how to clear them, with nothing stored."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from pml.errors import InvalidInput, LimitExceeded
from pml.execution.approval_desk import APPROVAL_KIND
from pml.execution.handoff import CLIENT_RUN_KIND
from pml.execution.trace_claims import CLAIMED_KIND
from pml.registry.scope import Scope
from pml.storage.database import Database
from pml.storage.tables import workflow_state
from pml.storage.workflow_repo import WAITING_KINDS, WorkflowStateStore
from policy.conftest import SCOPE, OpenPolicyGateway

pytestmark = pytest.mark.anyio

ERWAN = Scope("acme", "webapp", "erwan")
INDEX = "ix_workflow_state_org_project_user_id_kind_expires_at"
SAVE = """
note = await mcp.filesystem.read_text_file(path="/w/note.txt")
await mcp.filesystem.write_file(path="/w/copy.txt", content=note)
return "saved"
"""


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2030, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


async def stored(db: Database) -> int:
    async with db.read() as conn:
        count = await conn.execute(sa.select(sa.func.count()).select_from(workflow_state))
        return int(count.scalar_one())


def test_the_waiting_kinds_are_the_approvals_and_the_hand_offs() -> None:
    assert set(WAITING_KINDS) == {APPROVAL_KIND, CLIENT_RUN_KIND}
    assert CLAIMED_KIND not in WAITING_KINDS  # a claimed hand-off is being finished


async def test_one_more_than_the_quota_is_refused_and_nothing_is_stored(db: Database) -> None:
    store = WorkflowStateStore(db, pending_per_user=3)
    await store.put("wf_1", kind=APPROVAL_KIND, scope=ERWAN, state={}, ttl_s=60)
    await store.put("wf_2", kind=CLIENT_RUN_KIND, scope=ERWAN, state={}, ttl_s=60)
    await store.put("wf_3", kind=APPROVAL_KIND, scope=ERWAN, state={}, ttl_s=60)
    with pytest.raises(LimitExceeded) as refused:
        await store.put("wf_4", kind=CLIENT_RUN_KIND, scope=ERWAN, state={}, ttl_s=60)
    error = refused.value.to_dict()
    assert error["code"] == "LIMIT_EXCEEDED"
    assert error["limit"] == "pending_workflows_per_user"
    assert (error["max"], error["pending"]) == (3, 3)
    assert "pml approvals list" in error["message"]
    assert "nothing was stored" in error["message"]
    assert await stored(db) == 3
    assert await store.get("wf_4", kind=CLIENT_RUN_KIND, scope=ERWAN) is None
    assert await store.pending(ERWAN) == 3


async def test_each_user_has_its_own_quota(db: Database) -> None:
    store = WorkflowStateStore(db, pending_per_user=1)
    await store.put("wf_1", kind=APPROVAL_KIND, scope=ERWAN, state={}, ttl_s=60)
    for other in (
        Scope("acme", "webapp", "ana"),
        Scope("acme", "other", "erwan"),
        Scope("globex", "webapp", "erwan"),
    ):
        await store.put(
            f"wf_{other.key}_{other.user}", kind=APPROVAL_KIND, scope=other, state={}, ttl_s=60
        )
    with pytest.raises(LimitExceeded):
        await store.put("wf_2", kind=APPROVAL_KIND, scope=ERWAN, state={}, ttl_s=60)


async def test_expired_finished_and_other_states_do_not_count(db: Database) -> None:
    clock = Clock()
    store = WorkflowStateStore(db, clock=clock, pending_per_user=2)
    await store.put("wf_old", kind=APPROVAL_KIND, scope=ERWAN, state={}, ttl_s=10)
    await store.put("wf_done", kind=APPROVAL_KIND, scope=ERWAN, state={}, ttl_s=600)
    await store.put("wf_claimed", kind=CLAIMED_KIND, scope=ERWAN, state={}, ttl_s=600)
    await store.put("wf_other", kind="learning", scope=ERWAN, state={}, ttl_s=600)
    assert await store.pending(ERWAN) == 2
    clock.now += timedelta(seconds=11)  # wf_old expired: no longer waiting
    assert await store.take("wf_done", kind=APPROVAL_KIND, scope=ERWAN) == {}  # finished
    await store.put("wf_a", kind=APPROVAL_KIND, scope=ERWAN, state={}, ttl_s=600)
    await store.put("wf_b", kind=CLIENT_RUN_KIND, scope=ERWAN, state={}, ttl_s=600)
    with pytest.raises(LimitExceeded):
        await store.put("wf_c", kind=APPROVAL_KIND, scope=ERWAN, state={}, ttl_s=600)
    # states that are not waiting workflows are never refused
    await store.put("wf_more", kind="learning", scope=ERWAN, state={}, ttl_s=600)


async def test_replacing_a_state_under_its_own_id_is_not_one_more(db: Database) -> None:
    store = WorkflowStateStore(db, pending_per_user=1)
    await store.put("wf_1", kind=APPROVAL_KIND, scope=ERWAN, state={"n": 1}, ttl_s=60)
    await store.put("wf_1", kind=APPROVAL_KIND, scope=ERWAN, state={"n": 2}, ttl_s=60)
    assert await store.get("wf_1", kind=APPROVAL_KIND, scope=ERWAN) == {"n": 2}


async def test_a_quota_of_zero_is_off(db: Database) -> None:
    store = WorkflowStateStore(db)
    assert store.pending_per_user == 0
    for n in range(30):
        await store.put(f"wf_{n}", kind=APPROVAL_KIND, scope=ERWAN, state={}, ttl_s=60)
    assert await store.pending(ERWAN) == 30


async def test_hostile_ids_are_still_input_errors_not_quota_errors(db: Database) -> None:
    store = WorkflowStateStore(db, pending_per_user=1)
    await store.put("wf_1", kind=APPROVAL_KIND, scope=ERWAN, state={}, ttl_s=60)
    for workflow_id in ("", "x" * 65):
        with pytest.raises(InvalidInput):
            await store.put(workflow_id, kind=APPROVAL_KIND, scope=ERWAN, state={}, ttl_s=60)
    assert await stored(db) == 1


async def test_the_count_reads_the_index(db: Database) -> None:
    store = WorkflowStateStore(db, pending_per_user=1)
    statement = store._count_waiting(ERWAN, None)  # pyright: ignore[reportPrivateUsage]
    compiled = statement.compile(db.engine, compile_kwargs={"literal_binds": True})
    async with db.transaction() as conn:
        if db.engine.dialect.name == "sqlite":
            plan = (await conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}")).all()
        else:  # an empty table is read whole unless scans are ruled out: can the index serve?
            await conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
            plan = (await conn.exec_driver_sql(f"EXPLAIN {compiled}")).all()
    assert any(INDEX in str(row) for row in plan), plan


async def test_a_run_that_would_pause_over_the_quota_gets_limit_exceeded(
    open_policy_gateway: OpenPolicyGateway,
) -> None:
    async with open_policy_gateway(limits={"pending_workflows_per_user": 2}) as pg:
        paused = [
            await pg.execute(intent="copy the note to a new file", code=SAVE) for _ in range(2)
        ]
        is_error, refused = await pg.execute(intent="copy the note to a new file", code=SAVE)
        desk = pg.gateway.policy.approvals.desk
        waiting = await desk.pending(SCOPE.org, SCOPE.project, user=SCOPE.user)
        first = paused[0][1]["workflowId"]
        withdrawn, _ = await pg.execute(
            intent="never mind", continue_workflow={"workflow_id": first, "approved": False}
        )
        _, again = await pg.execute(intent="copy the note to a new file", code=SAVE)
    assert [answer["status"] for _, answer in paused] == ["approval_required"] * 2
    assert is_error is True
    error = refused["error"]
    assert error["code"] == "LIMIT_EXCEEDED"
    assert error["limit"] == "pending_workflows_per_user"
    assert "pml approvals list" in error["message"]
    assert len(waiting) == 2  # nothing stored for the refused run
    assert "write_file" not in pg.sent("filesystem")
    assert withdrawn is True  # withdrawing one makes room
    assert again["status"] == "approval_required"
