"""The background purge of expired grants and workflow states (a gateway that only hands
code to ``pml connect`` clients runs no post-hooks, so the clean-up cannot wait for one)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa

from pml.config import Settings
from pml.gateway import policy_services
from pml.gateway.policy_services import open_policy
from pml.registry.scope import Scope
from pml.sections import AuditSettings
from pml.storage.database import Database
from pml.storage.tables import workflow_state
from pml.storage.workflow_repo import WorkflowStateStore, utc_now

pytestmark = pytest.mark.anyio

SCOPE = Scope("acme", "web", "ana")


async def test_expired_workflow_states_are_purged_without_any_run(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(policy_services, "PURGE_INTERVAL_S", 0.05)
    settings = Settings(
        database_url="sqlite://", audit=AuditSettings(file=str(tmp_path / "audit.jsonl"))
    )
    old = WorkflowStateStore(db, clock=lambda: utc_now() - timedelta(hours=2))
    await old.put("wf_old", kind="client_run", scope=SCOPE, state={"v": 1}, ttl_s=60)
    live = WorkflowStateStore(db)
    await live.put("wf_live", kind="client_run", scope=SCOPE, state={"v": 1}, ttl_s=3600)
    async with open_policy(settings, db, None):
        deadline = anyio.current_time() + 5
        while await _rows(db) > 1:  # only the background purge deletes anything here
            assert anyio.current_time() < deadline, "the expired state was never purged"
            await anyio.sleep(0.05)
    assert await _rows(db) == 1
    assert await live.get("wf_live", kind="client_run", scope=SCOPE) == {"v": 1}


async def test_a_failing_purge_is_logged_and_tried_again(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []

    async def flaky() -> int:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("database away")
        return 3

    async with policy_services._purging({"workflows": flaky}, 0.02):  # pyright: ignore[reportPrivateUsage]
        deadline = anyio.current_time() + 5
        while len(calls) < 3:
            assert anyio.current_time() < deadline, "the purge was not tried again"
            await anyio.sleep(0.02)
    assert "purge of expired workflows failed" in caplog.text


async def test_an_error_of_the_block_is_raised_unwrapped() -> None:
    async def nothing() -> int:
        return 0

    with pytest.raises(KeyError):
        async with policy_services._purging({"x": nothing}, 10):  # pyright: ignore[reportPrivateUsage]
            raise KeyError("boom")


async def _rows(db: Database) -> int:
    async with db.read() as conn:
        query = sa.select(sa.func.count()).select_from(workflow_state)
        return int((await conn.execute(query)).scalar_one())
