"""Usage counts and run traces, written in batches off the hot path.

    async with UsageRecorder(db) as recorder:
        recorder.count(fqdn, success=True, latency_ms=3.2)     # returns at once
        recorder.trace(TraceRow(...))
        recorder.tool_call(scope, "filesystem", "read_file", latency_ms=1.1, success=True)
        await recorder.flush()                                 # tests, status: write now

A run that reuses a capability must not wait for the database: its usage increment and
trace are queued, like the ``tool_usage`` row of every tool call, and a background task
writes everything queued in one transaction a moment later (``FLUSH_DELAY_S``). Closing
the recorder writes what is left, so a clean shutdown loses nothing. A failed write is
retried at the next flush; past ``MAX_PENDING`` queued items the oldest are dropped, with a
warning, rather than growing without bound.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Final, Self

import anyio
import anyio.abc
from sqlalchemy.exc import SQLAlchemyError

from pml.errors import PmlError
from pml.registry.scope import Scope
from pml.storage.capability_repo import SqlCapabilityRepository
from pml.storage.database import Database
from pml.storage.trace_repo import SqlTraceRepository, TraceRow
from pml.storage.types import utc_now
from pml.storage.usage_repo import SqlToolUsageRepository, ToolUsageRow

logger = logging.getLogger(__name__)

FLUSH_DELAY_S: Final = 0.2
MAX_PENDING: Final = 50_000
WRITE_TIMEOUT_S: Final = 30.0  # a stuck database write gives up (retried later) after this


@dataclass(slots=True)
class _Usage:
    runs: int = 0
    successes: int = 0
    latency_ms: float = 0.0
    last_used_at: datetime | None = None


class UsageRecorder:
    """Queues usage increments and traces; writes them in batches (see module)."""

    def __init__(self, db: Database, *, delay_s: float = FLUSH_DELAY_S) -> None:
        self._db = db
        self._delay_s = delay_s
        self._usage: dict[str, _Usage] = {}
        self._traces: list[TraceRow] = []
        self._calls: list[ToolUsageRow] = []
        self._writing = 0  # rows of the flush in progress (still pending until committed)
        self._wake = anyio.Event()
        self._write_lock = anyio.Lock()
        self._tasks: anyio.abc.TaskGroup | None = None

    async def __aenter__(self) -> Self:
        self._tasks = anyio.create_task_group()
        await self._tasks.__aenter__()
        self._tasks.start_soon(self._loop)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        tasks, self._tasks = self._tasks, None
        assert tasks is not None
        tasks.cancel_scope.cancel()
        await tasks.__aexit__(None, None, None)
        with anyio.CancelScope(shield=True):
            await self.flush()

    def count(self, fqdn: str, *, success: bool, latency_ms: float) -> None:
        """Queue one run of ``fqdn``."""
        usage = self._usage.setdefault(fqdn, _Usage())
        usage.runs += 1
        usage.successes += int(success)
        usage.latency_ms += max(0.0, latency_ms)
        usage.last_used_at = utc_now()
        self._queued()

    def trace(self, row: TraceRow) -> None:
        """Queue one run's trace."""
        self._traces.append(row)
        if len(self._traces) > MAX_PENDING:
            dropped = len(self._traces) - MAX_PENDING
            del self._traces[:dropped]
            logger.warning("dropped %d run traces: the database is not keeping up", dropped)
        self._queued()

    def tool_call(
        self, scope: Scope, server_id: str, tool: str, *, latency_ms: float, success: bool
    ) -> None:
        """Queue the ``tool_usage`` row of one tool call (upstream tool or capability)."""
        self._calls.append(
            ToolUsageRow(
                server_id=server_id[:128],
                tool_name=tool[:400],
                latency_ms=max(0.0, latency_ms),
                success=success,
                org=scope.org,
                project=scope.project,
                user_id=scope.user,
                called_at=utc_now(),
            )
        )
        if len(self._calls) > MAX_PENDING:
            dropped = len(self._calls) - MAX_PENDING
            del self._calls[:dropped]
            logger.warning("dropped %d tool usage rows: the database is not keeping up", dropped)
        self._queued()

    @property
    def pending(self) -> int:
        """How many runs, traces and tool calls wait to be written (or are being written)."""
        queued = sum(u.runs for u in self._usage.values()) + len(self._traces) + len(self._calls)
        return queued + self._writing

    async def flush(self) -> None:
        """Write everything queued now (one transaction); on failure keep it for later."""
        async with self._write_lock:
            usage, self._usage = self._usage, {}
            traces, self._traces = self._traces, []
            calls, self._calls = self._calls, []
            if not usage and not traces and not calls:
                return
            self._writing = sum(u.runs for u in usage.values()) + len(traces) + len(calls)
            try:
                async with self._db.transaction() as conn:
                    repo = SqlCapabilityRepository(conn)
                    for fqdn, item in usage.items():
                        await repo.add_usage(
                            fqdn,
                            runs=item.runs,
                            successes=item.successes,
                            latency_ms=item.latency_ms,
                            at=item.last_used_at or utc_now(),
                        )
                    await SqlTraceRepository(conn).insert_many(traces)
                    await SqlToolUsageRepository(conn).insert_many(calls)
            except (PmlError, SQLAlchemyError) as error:
                logger.warning("usage and traces not written yet (will retry): %s", error)
                self._requeue(usage, traces, calls)
            finally:
                self._writing = 0

    def _requeue(
        self, usage: dict[str, _Usage], traces: list[TraceRow], calls: list[ToolUsageRow]
    ) -> None:
        for fqdn, item in usage.items():
            current = self._usage.setdefault(fqdn, _Usage())
            current.runs += item.runs
            current.successes += item.successes
            current.latency_ms += item.latency_ms
            current.last_used_at = current.last_used_at or item.last_used_at
        self._traces[:0] = traces[-MAX_PENDING:]
        self._calls[:0] = calls[-MAX_PENDING:]

    def _queued(self) -> None:
        self._wake.set()

    async def _loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            await anyio.sleep(self._delay_s)  # gather what else arrives meanwhile
            # Closing cancels the waits, never a write in progress (a database call cut
            # short can leave a connection that outlives the event loop).
            with anyio.CancelScope(shield=True), anyio.move_on_after(WRITE_TIMEOUT_S):
                await self.flush()
