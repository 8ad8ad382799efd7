"""The audit log of the policy pipeline: scrubbed events to a JSON-lines file and a table.

    log = AuditLog(db, Path("~/.local/share/pml/audit.jsonl").expanduser(),
                   coalesce_window_s=60.0)
    async with log.running():                        # a writer flushes every 0.2 s and at exit
        log.emit("POLICY_DENIED", scope=scope, details={"tool": "fs:write_file"},
                 decided_by="policy:file_task", request_id="r-1")

``emit`` is what the pipeline calls (the ``Auditor`` protocol): it never blocks and never
raises; it queues the event (malformed input is logged and dropped) and hands it, scrubbed,
to the listeners (``--debug-routing`` prints them). The writer scrubs each event
(``pml.policy.scrub``, off the tool call's path), appends one JSON line per event to the
file (``0o600``) and inserts the batch into ``audit_events`` in one transaction. Either
sink is optional; a failed write is logged once and retried on the next flush.

Bounded, never silent: when the queue is full, the oldest event of the org with the most
waiting is dropped (``pml.policy.audit_queue``: one org's flood loses its own events first);
when a sink's backlog is full, its oldest events are. One warning is logged, and an
``AUDIT_DROPPED`` event per scope says how many.

Coalescing: a ``POLICY_DENIED``, ``PERMISSION_DENIED`` or ``AUTH_FAILED`` (a failed API key,
per source address) identical to one written less than
``coalesce_window_s`` ago (same scope, actor, decided_by and details) is not written again;
when its window closes (or the log stops) one more event is written with
``details.repeated`` = the number swallowed.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import threading
import time
from collections import Counter, deque
from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from operator import attrgetter
from pathlib import Path
from typing import Any, Final, cast

import anyio

from pml.policy.audit_file import AuditFile
from pml.policy.audit_queue import FairQueue
from pml.policy.scrub import scrub, scrub_text
from pml.registry.scope import Scope
from pml.storage.audit_repo import AuditEntry, AuditRepository
from pml.storage.database import Database

logger = logging.getLogger(__name__)

AUDIT_DROPPED: Final = "AUDIT_DROPPED"
COALESCED_EVENTS: Final = frozenset({"POLICY_DENIED", "PERMISSION_DENIED", "AUTH_FAILED"})
EVENT_NAME: Final = re.compile(r"[A-Z][A-Z0-9_]{0,63}")
MAX_PENDING: Final = 10_000
MAX_WINDOWS: Final = 1_000
FLUSH_INTERVAL_S: Final = 0.2
CLOSE_TIMEOUT_S: Final = 10.0
DB_BATCH: Final = 500

Listener = Callable[[dict[str, Any]], None]
_WindowKey = tuple[str, str, str, str | None, str | None, str]


@dataclass(slots=True)
class _Window:
    """An open coalescing window: when it opened, the last swallowed event, how many."""

    opened: float
    last: AuditEntry
    repeated: int = 0


class AuditLog:
    """Scrubs, coalesces and queues audit events; writes them to a file and the database."""

    def __init__(
        self,
        db: Database | None,
        file: Path | None,
        *,
        coalesce_window_s: float = 60.0,
        clock: Callable[[], float] = time.time,
        max_pending: int = MAX_PENDING,
        flush_interval_s: float = FLUSH_INTERVAL_S,
        close_timeout_s: float = CLOSE_TIMEOUT_S,
    ) -> None:
        self.coalesce_window_s = coalesce_window_s
        self.max_pending = max(1, max_pending)
        self.flush_interval_s = flush_interval_s
        self.close_timeout_s = close_timeout_s
        self.dropped = 0  # events lost for good (queue or backlog full), all scopes
        self._repo = AuditRepository(db) if db is not None else None
        self._clock = clock
        self._lock = threading.Lock()  # emit may be called from worker threads
        self._flushing = anyio.Lock()
        self._pending = FairQueue[AuditEntry](self.max_pending, org_of=attrgetter("org"))
        self._windows: dict[_WindowKey, _Window] = {}
        # events lost per sink, by (org, project, reason), until an AUDIT_DROPPED says so
        self._lost: dict[str, Counter[tuple[str, str, str]]] = {
            sink: Counter() for sink, used in (("file", file), ("database", db)) if used is not None
        }
        self._recent_drops = 0
        self._warned_full = False
        self._listeners: tuple[Listener, ...] = ()
        self._file = AuditFile(file) if file is not None else None
        self._db_backlog: deque[AuditEntry] = deque()
        self._failing: set[str] = set()

    @property
    def pending(self) -> int:
        """Events accepted but not yet written to every sink."""
        with self._lock:
            queued = len(self._pending)
        waiting = len(self._file) if self._file is not None else 0
        return queued + max(waiting, len(self._db_backlog))

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` with each scrubbed event as it is emitted; returns a remover."""
        with self._lock:
            self._listeners = (*self._listeners, listener)

        def remove() -> None:
            with self._lock:
                self._listeners = tuple(item for item in self._listeners if item is not listener)

        return remove

    def emit(
        self,
        event: str,
        *,
        scope: Scope,
        details: Mapping[str, Any],
        decided_by: str | None = None,
        actor: str | None = None,
        request_id: str | None = None,
    ) -> None:
        """Record one event (scrubbed, queued); never blocks, never raises."""
        try:
            entry = self._entry(event, scope, details, decided_by, actor, request_id)
            if entry is None:
                return
            self._notify(entry)
            with self._lock:
                if self._coalesced(entry):
                    return
                self._enqueue(entry)
        except Exception:  # the pipeline must never fail because of its audit trail
            logger.exception("audit: could not record an event; it was dropped")

    async def flush(self) -> None:
        """Write what is queued now (and close expired coalescing windows)."""
        await self._flush(final=False)

    @asynccontextmanager
    async def running(self) -> AsyncGenerator[AuditLog]:
        """Run the background writer; at exit, close every window and write everything.

        An exception of the block is raised as it is (not wrapped in an exception group by
        the writer's task group), after the final flush."""
        raised: BaseException | None = None
        async with anyio.create_task_group() as group:
            group.start_soon(self._write_periodically)
            try:
                yield self
            except BaseException as error:  # noqa: BLE001 - re-raised below, unwrapped
                raised = error
            finally:
                group.cancel_scope.cancel()
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(self.close_timeout_s):
                await self._flush(final=True)
            if self.pending:
                logger.error("audit: %d events were not written before exit", self.pending)
        if raised is not None:
            raise raised

    # -- emit side (under self._lock where noted) --------------------------------------

    def _entry(
        self,
        event: object,
        scope: object,
        details: object,
        decided_by: object,
        actor: object,
        request_id: object,
    ) -> AuditEntry | None:
        if not isinstance(event, str) or EVENT_NAME.fullmatch(event) is None:
            logger.warning("audit: dropped an event with an invalid name: %.80r", event)
            return None
        if not isinstance(scope, Scope):
            logger.warning("audit: dropped a %s event without a valid scope", event)
            return None
        # Scrubbed by the writer (``_scrubbed``), off the tool call's path; a shallow copy
        # here, so the caller may reuse its mapping.
        if details is None:
            cleaned: dict[str, Any] = {}
        elif isinstance(details, Mapping):
            cleaned = dict(cast(Mapping[str, Any], details))
        else:
            cleaned = {"value": details}
        return AuditEntry(
            ts=datetime.fromtimestamp(self._clock(), UTC),
            event=event,
            org=scope.org,
            project=scope.project,
            details=cleaned,
            actor=_text(actor) if actor is not None else scope.user,
            request_id=_text(request_id),
            decided_by=_text(decided_by),
        )

    def _notify(self, entry: AuditEntry) -> None:
        for listener in self._listeners:
            try:
                listener(_scrubbed(entry).to_dict())
            except Exception:  # a listener's bug must not reach the pipeline
                logger.exception("audit: a listener failed on a %s event", entry.event)

    def _coalesced(self, entry: AuditEntry) -> bool:
        """Whether ``entry`` repeats an open window's denial (counted, not queued). Locked."""
        if entry.event not in COALESCED_EVENTS or self.coalesce_window_s <= 0:
            return False
        key = _window_key(entry)
        now = self._clock()
        window = self._windows.get(key)
        if window is not None and now - window.opened < self.coalesce_window_s:
            window.last = entry
            window.repeated += 1
            return True
        if window is not None:
            self._close(key)
        self._windows[key] = _Window(opened=now, last=entry)
        if len(self._windows) > MAX_WINDOWS:
            self._close(next(iter(self._windows)))
        return False

    def _close(self, key: _WindowKey) -> None:
        """End a window; if it swallowed repeats, queue one event saying how many. Locked."""
        window = self._windows.pop(key)
        if window.repeated:
            details = {**window.last.details, "repeated": window.repeated}
            self._enqueue(replace(window.last, details=details))

    def _enqueue(self, entry: AuditEntry) -> None:
        """Queue an event; when full, one of the org with most waiting is dropped and counted
        (``pml.policy.audit_queue``). Locked."""
        dropped = self._pending.push(entry)
        if dropped is not None:
            self._drop([(dropped.org, dropped.project)], "queue_full", *self._lost)

    def _drop(self, scopes: list[tuple[str, str]], reason: str, *sinks: str) -> None:
        """Count lost events for the ``AUDIT_DROPPED`` events of ``sinks``. Locked."""
        for org, project in scopes:
            for sink in sinks:
                self._lost[sink][(org, project, reason)] += 1
        self.dropped += len(scopes)
        self._recent_drops += len(scopes)
        if scopes and not self._warned_full:
            self._warned_full = True
            logger.warning(
                "audit: %s; dropping the oldest events (an %s event will say how many)",
                reason.replace("_", " "),
                AUDIT_DROPPED,
            )

    # -- writer side (under self._flushing) --------------------------------------------

    async def _write_periodically(self) -> None:
        while True:
            await anyio.sleep(self.flush_interval_s)
            # Stopping cancels the sleep, never a write in progress: a database call cut
            # short can leave a connection that outlives the event loop (and hangs its end).
            with anyio.CancelScope(shield=True), anyio.move_on_after(self.close_timeout_s):
                try:
                    await self._flush(final=False)
                except Exception:  # the writer's top level: a bug must not stop auditing
                    logger.exception("audit: a flush failed; retrying on the next one")

    async def _flush(self, *, final: bool) -> None:
        async with self._flushing:
            with self._lock:
                now = self._clock()
                for key in [
                    key
                    for key, window in self._windows.items()
                    if final or now - window.opened >= self.coalesce_window_s
                ]:
                    self._close(key)
                batch = self._pending.drain()
            batch = [_scrubbed(entry) for entry in batch]
            with self._lock:
                if not self._recent_drops:  # an overflow episode ends with a quiet flush
                    self._warned_full = False
                self._recent_drops = 0
            keep = max(self.max_pending, len(batch))  # a backlog gives way to newer events
            if self._file is not None:
                await self._write_file(batch, keep, now)
            if self._repo is not None:
                await self._write_database(batch, keep, now)

    def _markers(self, sink: str, now: float) -> list[AuditEntry]:
        """One ``AUDIT_DROPPED`` event per scope and reason lost to ``sink``; resets them."""
        with self._lock:
            lost = sorted(self._lost[sink].items())
            self._lost[sink].clear()
        return [
            AuditEntry(
                ts=datetime.fromtimestamp(now, UTC),
                event=AUDIT_DROPPED,
                org=org,
                project=project,
                details={"dropped": count, "reason": reason},
                actor="pml",
                decided_by="audit",
            )
            for (org, project, reason), count in lost
        ]

    async def _write_file(self, batch: list[AuditEntry], keep: int, now: float) -> None:
        assert self._file is not None
        self._file.add(batch)
        with self._lock:
            self._drop(self._file.trim(keep), "file_unavailable", "file")
        error = await self._file.write()
        if error is None and self._lost["file"]:
            # after the events that survived: markers are never trimmed, so never lost
            self._file.add(self._markers("file", now), pinned=True)
            error = await self._file.write()
        self._report("file", error)

    async def _write_database(self, batch: list[AuditEntry], keep: int, now: float) -> None:
        assert self._repo is not None
        self._db_backlog.extend(batch)
        excess = max(0, len(self._db_backlog) - keep)
        dropped = [self._db_backlog.popleft() for _ in range(excess)]
        with self._lock:
            self._drop(
                [(row.org, row.project) for row in dropped], "database_unavailable", "database"
            )
        while self._db_backlog or self._lost["database"]:
            markers = [] if self._db_backlog else self._markers("database", now)
            chunk = markers or list(itertools.islice(self._db_backlog, DB_BATCH))
            try:
                await self._repo.insert_many(chunk)
            except Exception as error:  # database down or refusing: keep the rows, retry later
                logger.debug("audit: database write failed", exc_info=True)
                with self._lock:
                    for marker in markers:
                        key = (marker.org, marker.project, marker.details["reason"])
                        self._lost["database"][key] += marker.details["dropped"]
                self._report("database", error)
                return
            for _ in range(0 if markers else len(chunk)):
                self._db_backlog.popleft()
        self._report("database", None)

    def _report(self, sink: str, error: BaseException | None) -> None:
        """Log a sink's first failure and its recovery, not every retry in between."""
        if error is None:
            if sink in self._failing:
                self._failing.discard(sink)
                logger.warning("audit: writing to the %s again", sink)
        elif sink not in self._failing:
            self._failing.add(sink)
            logger.error("audit: could not write to the %s (will retry)", sink, exc_info=error)


def _text(value: object) -> str | None:
    """A text field as given (scrubbed by the writer); anything else as JSON text."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(scrub(value), ensure_ascii=False)


def _scrubbed(entry: AuditEntry) -> AuditEntry:
    """``entry`` with its details and text fields scrubbed of secrets, as written."""
    return replace(
        entry,
        details=scrub(entry.details),
        actor=_clean(entry.actor),
        request_id=_clean(entry.request_id),
        decided_by=_clean(entry.decided_by),
    )


def _clean(text: str | None) -> str | None:
    return scrub_text(text) if text is not None else None


def _window_key(entry: AuditEntry) -> _WindowKey:
    details = json.dumps(entry.details, sort_keys=True, ensure_ascii=False, default=repr)
    return (entry.event, entry.org, entry.project, entry.actor, entry.decided_by, details)
