"""Usage counts and run traces, written in batches off the hot path.

    async with UsageRecorder(db) as recorder:
        recorder.count(fqdn, success=True, latency_ms=3.2)     # returns at once
        recorder.count_code(scope, code_hash, success=False, latency_ms=40.0)
        recorder.trace(TraceRow(...))
        recorder.tool_call(scope, "filesystem", "read_file", latency_ms=1.1, success=True)
        await recorder.flush()                                 # tests, status: write now

A run that reuses a capability must not wait for the database: its usage increment and
trace are queued, like the ``tool_usage`` row of every tool call, and a background task
writes everything queued in one transaction a moment later (``FLUSH_DELAY_S``). Closing
the recorder writes what is left, so a clean shutdown loses nothing. A failed write is
retried at the next flush; past ``MAX_PENDING`` queued items the oldest are dropped, with a
warning, rather than growing without bound.

Each run also enters the recent-runs signal of its capability (``pml.registry.reliability``),
in the order the runs ended, unless it is not ``judged``: a run stopped by the caller's side
(refused arguments, a denial) counts in the totals only. ``count_code`` counts a snippet
run in direct mode that failed: it is a run of the capability whose current code it is, if
one exists (found by the write itself, so the failing run costs no read).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import TracebackType
from typing import Final, Self

import anyio
import anyio.abc
from sqlalchemy.exc import SQLAlchemyError

from pml.errors import PmlError
from pml.registry.intents import MeaningCheck
from pml.registry.reliability import WINDOW, clean_latency
from pml.registry.scope import Scope
from pml.storage.capability_usage import RunCounts, add_code_usage, add_usage
from pml.storage.database import Database
from pml.storage.intent_repo import IntentSighting, SqlIntentRepository
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
    # the judged runs' outcomes in order (the newest last), as many as the signal keeps
    outcomes: list[bool] = field(default_factory=list[bool])
    judged: int = 0  # judged runs (all of them, not only the last WINDOW)
    judged_latency_ms: float = 0.0

    def add(self, *, success: bool, latency_ms: float, judged: bool) -> None:
        latency_ms = clean_latency(latency_ms)
        self.runs += 1
        self.successes += int(success)
        self.latency_ms += latency_ms
        self.last_used_at = utc_now()
        if judged:
            self.judged += 1
            self.judged_latency_ms += latency_ms
            self.outcomes.append(success)
            del self.outcomes[:-WINDOW]

    def merge_older(self, older: _Usage) -> None:
        """Take back the runs of a batch that could not be written (they came first)."""
        self.runs += older.runs
        self.successes += older.successes
        self.latency_ms += older.latency_ms
        self.last_used_at = self.last_used_at or older.last_used_at
        self.judged += older.judged
        self.judged_latency_ms += older.judged_latency_ms
        self.outcomes[:0] = older.outcomes
        del self.outcomes[:-WINDOW]

    def counts(self) -> RunCounts:
        """What one usage update writes of these runs."""
        return RunCounts(
            runs=self.runs,
            successes=self.successes,
            latency_ms=self.latency_ms,
            at=self.last_used_at or utc_now(),
            outcomes=self.outcomes,
            recent_latency_ms=self.judged_latency_ms / self.judged if self.judged else None,
        )


CodeKey = tuple[str, str, str]  # org, project, code hash


IntentsChanged = Callable[[set[str]], Awaitable[None]]


class UsageRecorder:
    """Queues usage increments and traces; writes them in batches (see module)."""

    def __init__(self, db: Database, *, delay_s: float = FLUSH_DELAY_S) -> None:
        self._db = db
        self._delay_s = delay_s
        self._usage: dict[str, _Usage] = {}
        self._code_usage: dict[CodeKey, _Usage] = {}
        self._traces: list[TraceRow] = []
        self._calls: list[ToolUsageRow] = []
        self._intents: dict[tuple[str, str], IntentSighting] = {}
        self._intents_changed: IntentsChanged | None = None
        # How intents are compared by meaning (``pml.wiring.remember_intents``); None: exactly
        self.intent_meaning: MeaningCheck | None = None
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

    def count(self, fqdn: str, *, success: bool, latency_ms: float, judged: bool = True) -> None:
        """Queue one run of ``fqdn`` (``judged``: it enters the recent-runs signal)."""
        self._usage.setdefault(fqdn, _Usage()).add(
            success=success, latency_ms=latency_ms, judged=judged
        )
        self._queued()

    def count_code(self, scope: Scope, code_hash: str, *, success: bool, latency_ms: float) -> None:
        """Queue one run of the code with ``code_hash`` in ``scope``'s project: it counts for
        the capability whose current code it is, if any (see module)."""
        key = (scope.org, scope.project, code_hash)
        usage = self._code_usage.pop(key, None) or _Usage()
        self._code_usage[key] = usage  # the most recent last: the oldest go first
        usage.add(success=success, latency_ms=latency_ms, judged=True)
        if len(self._code_usage) > MAX_PENDING:
            del self._code_usage[next(iter(self._code_usage))]
            logger.warning("dropped the runs of a code: the database is not keeping up")
        self._queued()

    def intent(self, sighting: IntentSighting) -> None:
        """Queue one intent a capability was reached with (the same text twice in a batch
        is written once, as its latest sighting, with the uses of both)."""
        key = (sighting.fqdn, sighting.text_hash)
        previous = self._intents.pop(key, None)
        if previous is not None:
            sighting = replace(sighting, uses=previous.uses + sighting.uses)
        self._intents[key] = sighting
        if len(self._intents) > MAX_PENDING:
            oldest = next(iter(self._intents))
            del self._intents[oldest]
        self._queued()

    def on_intents_changed(self, callback: IntentsChanged) -> None:
        """Call ``callback`` with the FQDNs whose remembered intents changed, after each
        write (discovery re-reads them)."""
        self._intents_changed = callback

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
        queued += sum(u.runs for u in self._code_usage.values())
        return queued + len(self._intents) + self._writing

    async def flush(self) -> None:
        """Write everything queued now (one transaction); on failure keep it for later."""
        async with self._write_lock:
            usage, self._usage = self._usage, {}
            by_code, self._code_usage = self._code_usage, {}
            traces, self._traces = self._traces, []
            calls, self._calls = self._calls, []
            sightings, self._intents = self._intents, {}
            if not usage and not by_code and not traces and not calls and not sightings:
                return
            self._writing = sum(u.runs for u in usage.values()) + len(traces) + len(calls)
            self._writing += len(sightings) + sum(u.runs for u in by_code.values())
            changed: set[str] = set()
            try:
                async with self._db.transaction() as conn:
                    for fqdn, item in usage.items():
                        await add_usage(conn, fqdn, item.counts())
                    for (org, project, code_hash), item in by_code.items():
                        await add_code_usage(conn, org, project, code_hash, item.counts())
                    await SqlTraceRepository(conn).insert_many(traces)
                    await SqlToolUsageRepository(conn).insert_many(calls)
                    if sightings:
                        repo = SqlIntentRepository(conn, self.intent_meaning)
                        changed = await repo.remember(list(sightings.values()))
            except (PmlError, SQLAlchemyError) as error:
                logger.warning("usage and traces not written yet (will retry): %s", error)
                self._requeue(usage, traces, calls)
                for key, item in by_code.items():
                    self._code_usage.setdefault(key, _Usage()).merge_older(item)
                for key, sighting in sightings.items():
                    newer = self._intents.get(key)
                    uses = sighting.uses + (newer.uses if newer is not None else 0)
                    self._intents[key] = replace(newer or sighting, uses=uses)
            finally:
                self._writing = 0
        if changed and self._intents_changed is not None:
            await self._intents_changed(changed)

    def _requeue(
        self, usage: dict[str, _Usage], traces: list[TraceRow], calls: list[ToolUsageRow]
    ) -> None:
        for fqdn, item in usage.items():
            self._usage.setdefault(fqdn, _Usage()).merge_older(item)
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
