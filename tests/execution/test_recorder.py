"""The usage recorder: batched, nothing lost on close, failures kept for the next flush."""

from __future__ import annotations

import uuid

import anyio
import pytest

from pml.errors import StorageError
from pml.execution.recorder import UsageRecorder
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry
from pml.storage.database import Database
from pml.storage.trace_repo import SqlTraceRepository, TraceRow
from pml.storage.types import utc_now
from pml.storage.usage_repo import SqlToolUsageRepository

pytestmark = pytest.mark.anyio


def trace(fqdn: str) -> TraceRow:
    return TraceRow(
        id=str(uuid.uuid4()),
        org="acme",
        project="webapp",
        user_id="erwan",
        intent="x",
        capability_fqdn=fqdn,
        success=True,
        error=None,
        duration_ms=1.0,
        task_results=[{"tool": "a:echo", "argsDigest": "0" * 16, "durationMs": 1, "success": True}],
        created_at=utc_now(),
    )


async def _fqdn(registry: CapabilityRegistry, scope: Scope) -> str:
    return (
        await registry.capture(scope, CapabilityDraft(code="return 1"), latency_ms=1)
    ).record.fqdn


async def test_counts_are_written_in_one_batch_and_add_up(
    db: Database, registry: CapabilityRegistry, scope: Scope
) -> None:
    fqdn = await _fqdn(registry, scope)
    async with UsageRecorder(db, delay_s=60) as recorder:
        for success in (True, True, False):
            recorder.count(fqdn, success=success, latency_ms=10)
        recorder.trace(trace(fqdn))
        assert recorder.pending == 4
        before = (await registry.resolve(scope, fqdn)).record
        await recorder.flush()
        after = (await registry.resolve(scope, fqdn)).record
        assert recorder.pending == 0
    assert (before.usage_count, before.success_count) == (1, 1)  # nothing written before
    assert (after.usage_count, after.success_count, after.total_latency_ms) == (4, 3, 31)
    async with db.read() as conn:
        assert len(await SqlTraceRepository(conn).for_capability(fqdn)) == 1


async def test_closing_writes_what_is_queued(
    db: Database, registry: CapabilityRegistry, scope: Scope
) -> None:
    fqdn = await _fqdn(registry, scope)
    async with UsageRecorder(db, delay_s=60) as recorder:
        recorder.count(fqdn, success=True, latency_ms=1)
        recorder.trace(trace(fqdn))
    record = (await registry.resolve(scope, fqdn)).record
    assert record.usage_count == 2
    async with db.read() as conn:
        assert await SqlTraceRepository(conn).count() == 1


async def test_the_background_task_flushes_by_itself(
    db: Database, registry: CapabilityRegistry, scope: Scope
) -> None:
    fqdn = await _fqdn(registry, scope)
    async with UsageRecorder(db, delay_s=0.01) as recorder:
        recorder.count(fqdn, success=True, latency_ms=1)
        with anyio.fail_after(5):
            while recorder.pending:  # noqa: ASYNC110 - polling a counter, bounded above
                await anyio.sleep(0.01)
        assert (await registry.resolve(scope, fqdn)).record.usage_count == 2


class _FailingOnce:
    """A database whose first transaction fails (a real one behind it)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.failures = 1

    def transaction(self):  # type: ignore[no-untyped-def]
        if self.failures:
            self.failures -= 1
            raise StorageError("Database error: disk I/O error")
        return self.db.transaction()


async def test_a_failed_write_is_kept_for_the_next_flush(
    db: Database, registry: CapabilityRegistry, scope: Scope
) -> None:
    fqdn = await _fqdn(registry, scope)
    flaky = _FailingOnce(db)
    recorder = UsageRecorder(flaky, delay_s=60)  # type: ignore[arg-type]
    recorder.count(fqdn, success=True, latency_ms=1)
    recorder.trace(trace(fqdn))
    await recorder.flush()
    assert recorder.pending == 2
    await recorder.flush()
    assert recorder.pending == 0
    assert (await registry.resolve(scope, fqdn)).record.usage_count == 2


async def test_tool_calls_are_written_with_the_batch_and_on_close(
    db: Database, scope: Scope
) -> None:
    async with UsageRecorder(db, delay_s=60) as recorder:
        recorder.tool_call(scope, "filesystem", "read_file", latency_ms=1.5, success=True)
        recorder.tool_call(scope, "filesystem", "read_file", latency_ms=2.5, success=False)
        recorder.tool_call(scope, "x" * 500, "ü" * 1000, latency_ms=-3, success=True)
        assert recorder.pending == 3
        async with db.read() as conn:
            assert await SqlToolUsageRepository(conn).count() == 0  # queued, not written
    async with db.read() as conn:
        usage = SqlToolUsageRepository(conn)
        rows = await usage.summary(scope.org, scope.project)
        assert await usage.count(org=scope.org, user_id=scope.user) == 3
    by_server = {row.server_id: row for row in rows}
    read = by_server["filesystem"]
    assert (read.tool_name, read.calls, read.successes, read.avg_latency_ms) == (
        "read_file",
        2,
        1,
        2.0,
    )
    assert read.last_called_at is not None
    clipped = by_server["x" * 128]  # over-long names are clipped to the columns, not refused
    assert (len(clipped.tool_name), clipped.avg_latency_ms) == (400, 0.0)


async def test_a_failed_write_keeps_the_tool_calls_too(db: Database, scope: Scope) -> None:
    recorder = UsageRecorder(_FailingOnce(db), delay_s=60)  # type: ignore[arg-type]
    recorder.tool_call(scope, "time", "get_current_time", latency_ms=1, success=True)
    await recorder.flush()
    assert recorder.pending == 1
    await recorder.flush()
    assert recorder.pending == 0
    async with db.read() as conn:
        assert await SqlToolUsageRepository(conn).count(server_id="time") == 1
