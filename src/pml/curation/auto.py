"""Automatic suggest runs: after N new unnamed capabilities of a project, suggest names.

    auto = AutoRuns(db, start_run, after=10, min_interval_s=60)  # start_run runs ``suggest``
    registry.on_change(auto.capability_changed)     # hears UNNAMED_CAPTURE changes
    async with auto.running():                      # hosts the background runs
        ...
    await auto.settled()                            # (tests) until no check or run is left

A capture only schedules a check: the listener returns at once, so a capture never waits
for (or fails because of) curation. The check counts, in the database, the unnamed
capabilities of the project created since its last ``suggest``/``auto`` run (so the count
survives restarts and includes captures made by other processes), and starts a run when
there are at least ``after``. One check or run per project at a time in this process;
captures that arrive meanwhile make it look again when it is done, at most once every
``recheck_s`` (a stream of captures is counted twice a second, not once per capture: each
check is a database read). A project's automatic runs are at least ``min_interval_s``
apart in this process: a run that comes due sooner waits, and the captures made meanwhile
count towards it. (A run reads every name of its project: without the interval a project
capturing a stream of new code paid one such read per ``after`` captures, most of a busy
gateway's curation cost and growing with the project.) Outside ``running()`` (a CLI
command) changes are ignored.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Final

import anyio
from anyio.abc import TaskGroup

from pml.errors import PmlError
from pml.registry.changes import UNNAMED_CAPTURE, CapabilityChange
from pml.registry.scope import Scope
from pml.storage.curation_repo import SqlCurationRepository
from pml.storage.database import Database

logger = logging.getLogger(__name__)

# The user automatic runs act as: it sees the project's capabilities except private ones.
AUTO_USER: Final = "pml-curation"
COUNTED_MODES: Final = ("suggest", "auto")
RECHECK_S: Final = 0.5
KEPT_PROJECTS: Final = 10_000  # when-last-run entries kept (older ones are forgotten first)

StartRun = Callable[[Scope], Awaitable[object]]


class AutoRuns:
    """Schedules automatic suggest runs per org/project (see module)."""

    def __init__(
        self,
        db: Database,
        start_run: StartRun,
        *,
        after: int,
        recheck_s: float = RECHECK_S,
        min_interval_s: float = 0.0,
    ) -> None:
        self._db = db
        self._start_run = start_run
        self.after = after
        self.recheck_s = recheck_s
        self.min_interval_s = min_interval_s
        self._last_run: dict[tuple[str, str], float] = {}
        self.checks = 0
        self._tasks: TaskGroup | None = None
        self._busy: set[tuple[str, str]] = set()
        self._again: set[tuple[str, str]] = set()
        self._waiters: list[anyio.Event] = []
        self.runs_started = 0

    async def capability_changed(self, change: CapabilityChange) -> None:
        """A registry change listener: schedule a check after a new unnamed capability."""
        if change.kind != UNNAMED_CAPTURE or self.after <= 0 or self._tasks is None:
            return
        key = (change.org, change.project)
        if key in self._busy:
            self._again.add(key)
            return
        self._busy.add(key)
        self._tasks.start_soon(self._work, key)

    @asynccontextmanager
    async def running(self) -> AsyncGenerator[None]:
        """Run scheduled checks and runs in the background while the block runs."""
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            try:
                yield
            finally:
                self._tasks = None
                tasks.cancel_scope.cancel()

    async def settled(self) -> None:
        """Return when no check or run is scheduled or in progress."""
        while self._busy:
            event = anyio.Event()
            self._waiters.append(event)
            await event.wait()

    async def due(self, org: str, project: str) -> bool:
        """Whether ``after`` unnamed capabilities were created since the last run."""
        self.checks += 1
        async with self._db.read() as conn:
            repo = SqlCurationRepository(conn)
            since = await repo.last_run_at(org, project, COUNTED_MODES)
            count = await repo.count_unnamed_since(org, project, since)
        return count >= self.after

    async def _spaced(self, key: tuple[str, str]) -> None:
        """Wait until ``min_interval_s`` has passed since the project's last automatic run."""
        last = self._last_run.pop(key, None)
        if last is not None:
            await anyio.sleep(max(last + self.min_interval_s - anyio.current_time(), 0.0))
        if len(self._last_run) >= KEPT_PROJECTS:
            del self._last_run[next(iter(self._last_run))]
        self._last_run[key] = anyio.current_time()

    async def _work(self, key: tuple[str, str]) -> None:
        org, project = key
        try:
            while True:
                self._again.discard(key)
                checked_at = anyio.current_time()
                if await self.due(org, project):
                    await self._spaced(key)
                    self._again.discard(key)  # what was captured while it waited is counted
                    self.runs_started += 1
                    await self._start_run(Scope(org, project, AUTO_USER))
                # captures heard until then wait for one more check, not one each
                await anyio.sleep(max(self.recheck_s - (anyio.current_time() - checked_at), 0.0))
                if key not in self._again:
                    return
        except PmlError as error:
            logger.warning("automatic curation of %s.%s failed: %s", org, project, error)
        except Exception:  # top-level handler of a background task: never reaches a capture
            logger.exception("automatic curation of %s.%s failed", org, project)
        finally:
            self._busy.discard(key)
            self._again.discard(key)
            if not self._busy:
                waiters, self._waiters = self._waiters, []
                for event in waiters:
                    event.set()
