"""Who gets the next sandbox worker: per-tenant shares, bounded queues, hierarchical order.

    shares = FairShares(pool_size=4, share=2, queue_limit=32)
    wait = await shares.acquire(("acme", "webapp", "erwan"), timeout_s=30.0)  # or BUSY
    try:
        ...                                   # unless wait is Wait.TIMED_OUT: run
    finally:
        shares.release(("acme", "webapp", "erwan"), ran_s=0.2)

The bookkeeping behind ``pml.sandbox.fair.FairEngine``: at most ``pool_size`` slots are
held at once. The pool is split level by level between those active now (running, waiting,
or either within ``ACTIVE_WINDOW_S``, ``pml.sandbox.activity``): an org holds at most
its part of the pool (the pool over the active orgs, rounded up), a project at most its
part of its org's, a user at most its part of its project's and never more than ``share``.
Alone, an org may use the whole pool; while another org is active, it leaves that org's
part free, so one org's many users cannot take every worker from another org. A tenant
that cannot start waits in its own queue (at most ``queue_limit`` runs; one more is
``BUSY``). A freed slot goes to the waiting tenant chosen level by level — the org holding
the fewest slots, then its project, then its user (ties: the least recently served) — and
to that user's oldest waiter; when a part grows because a neighbour went quiet, waiters
that may now start are started then. Counting is synchronous (one event loop, nothing
awaited while the counts change): waiters are futures resolved by ``release``, a waiter
leaving (cancelled, timed out) is taken out of its queue in the same step, and a path with
nothing held or waiting is dropped, so memory follows what is running and queued (and, in
``RecentTenants``, who was active within the window), not who ever ran.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import math
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final, NamedTuple

import anyio

from pml.errors import Busy, InternalError
from pml.sandbox.activity import ACTIVE_WINDOW_S, RecentTenants
from pml.sandbox.base import TenantKey

# A BUSY answer's retry delay, from the queue and recent run times, within these bounds.
RETRY_MIN_S: Final = 0.1
RETRY_MAX_S: Final = 60.0
# Run time assumed before any run has ended, and the weight of each new run in the average.
FIRST_RUN_ESTIMATE_S: Final = 1.0
RUN_TIME_SMOOTHING: Final = 0.2


class Wait(enum.Enum):
    """How a slot was acquired: at once, after queueing, or not (the time ran out)."""

    AT_ONCE = "at_once"
    QUEUED = "queued"
    TIMED_OUT = "timed_out"


class _State(enum.Enum):
    QUEUED = "queued"
    GRANTED = "granted"
    GONE = "gone"


@dataclass(eq=False, slots=True)
class _Waiter:
    path: TenantKey
    granted: asyncio.Future[None]
    state: _State = _State.QUEUED


@dataclass(slots=True)
class _Load:
    """Slots held and runs waiting under one path prefix (org, org/project, or tenant)."""

    running: int = 0
    waiting: int = 0
    served: int = 0  # when it last got a slot: ties go to the least recently served


class Parts(NamedTuple):
    """The most slots a tenant's org, project and user may hold now."""

    org: int
    project: int
    user: int


# org → project → user → that tenant's waiters, oldest first
_Tree = dict[str, dict[str, dict[str, deque[_Waiter]]]]


class FairShares:
    """Slots of a pool of ``pool_size`` shared between tenants; see the module."""

    def __init__(
        self,
        *,
        pool_size: int,
        share: int,
        queue_limit: int,
        active_window_s: float = ACTIVE_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if pool_size < 1 or share < 1 or queue_limit < 0:
            raise ValueError("a pool needs a slot, a share of at least one, a queue of >= 0")
        self.pool_size = pool_size
        self.share = min(share, pool_size)
        self.queue_limit = queue_limit
        self.running = 0
        self._loads: dict[TenantKey, _Load] = {}
        self._waiting: _Tree = {}
        self._sequence = itertools.count(1)
        self._run_s = FIRST_RUN_ESTIMATE_S  # recent run time, smoothed
        self._closed = False
        self.recent = RecentTenants(window_s=active_window_s, in_use=self._in_use, clock=clock)
        self._timer: asyncio.TimerHandle | None = None

    # -- what tests and metrics read --------------------------------------------------------

    @property
    def waiting(self) -> int:
        """Runs waiting for a slot now."""
        return sum(load.waiting for path, load in self._loads.items() if len(path) == 1)

    @property
    def tracked(self) -> int:
        """Path prefixes with something held or waiting (memory follows this)."""
        return len(self._loads)

    def held_by(self, prefix: TenantKey) -> int:
        """Slots held under ``prefix`` (an org, org/project, or a whole tenant)."""
        load = self._loads.get(prefix)
        return 0 if load is None else load.running

    def queued_for(self, tenant: TenantKey) -> int:
        """Runs of ``tenant`` waiting now."""
        load = self._loads.get(tenant)
        return 0 if load is None else load.waiting

    def parts(self, tenant: TenantKey) -> Parts:
        """The most slots ``tenant``'s org, project and user may hold now (see module)."""
        org, project, _ = tenant
        org_part = _split(self.pool_size, self.recent.active_under(()))
        project_part = _split(org_part, self.recent.active_under((org,)))
        user_part = _split(project_part, self.recent.active_under((org, project)))
        return Parts(org_part, project_part, min(user_part, self.share))

    # -- acquiring and releasing ------------------------------------------------------------

    async def acquire(self, tenant: TenantKey, timeout_s: float) -> Wait:
        """A slot for ``tenant`` (a 3-part path), waiting at most ``timeout_s``.

        Raises ``Busy`` (with ``retryAfterS``) when the tenant cannot start now and its
        queue is full. On ``Wait.TIMED_OUT`` no slot is held; otherwise the caller holds
        one and must ``release`` it."""
        if self._closed:
            raise InternalError("The sandbox engine is closed")
        self.recent.touch(tenant)
        if self._may_start(tenant) and not self.queued_for(tenant):
            self._start(tenant)
            return Wait.AT_ONCE
        if self.queued_for(tenant) >= self.queue_limit:
            raise self._busy(tenant)
        waiter = _Waiter(tenant, asyncio.get_running_loop().create_future())
        self._enqueue(waiter)
        if self.running < self.pool_size:  # held back by its parts: until one grows
            self._recheck_later()
        try:
            with anyio.move_on_after(max(timeout_s, 0.0)):
                await waiter.granted
        except BaseException:  # cancelled, or the engine closed: hold nothing
            self._leave(waiter)
            raise
        if waiter.state is _State.GRANTED:  # granted, even if the time ran out just then
            return Wait.QUEUED
        self._leave(waiter)
        return Wait.TIMED_OUT

    def release(self, tenant: TenantKey, *, ran_s: float) -> None:
        """Give back ``tenant``'s slot after a run of ``ran_s`` seconds; the next waiter
        chosen (see the module) gets it."""
        self._run_s += RUN_TIME_SMOOTHING * (max(ran_s, 0.0) - self._run_s)
        self.recent.touch(tenant)  # active until the window after its last run ended
        self._give_back(tenant)

    def _give_back(self, tenant: TenantKey) -> None:
        self.running -= 1
        for prefix in _prefixes(tenant):
            load = self._loads[prefix]
            load.running -= 1
            self._forget_if_idle(prefix, load)
        self._dispatch()

    def close(self) -> None:
        """Refuse new runs and wake every waiter with ``InternalError``."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for projects in list(self._waiting.values()):
            for users in list(projects.values()):
                for queue in list(users.values()):
                    for waiter in list(queue):
                        self._drop(waiter)
                        if not waiter.granted.done():
                            waiter.granted.set_exception(
                                InternalError("The sandbox engine is closed")
                            )

    def retry_after_s(self, tenant: TenantKey) -> float:
        """When ``tenant`` may find room: its queue served ``share`` at a time, each run
        taking the recent average (bounded by ``RETRY_MIN_S``..``RETRY_MAX_S``)."""
        rounds = (self.queued_for(tenant) + 1) / self.parts(tenant).user
        return round(min(max(rounds * self._run_s, RETRY_MIN_S), RETRY_MAX_S), 3)

    # -- the bookkeeping --------------------------------------------------------------------

    def _may_start(self, tenant: TenantKey) -> bool:
        return self.running < self.pool_size and self._within_parts(tenant)

    def _within_parts(self, tenant: TenantKey) -> bool:
        org, project, _ = tenant
        parts = self.parts(tenant)
        return (
            self.held_by(tenant) < parts.user
            and self.held_by((org, project)) < parts.project
            and self.held_by((org,)) < parts.org
        )

    def _in_use(self, prefix: TenantKey) -> bool:
        return prefix in self._loads

    def _busy(self, tenant: TenantKey) -> Busy:
        why = self._why_not(tenant)
        queued = (
            f"{self.queued_for(tenant)} of its runs already wait (the most that may)"
            if self.queue_limit
            else "its runs may not wait (queue_per_tenant = 0)"
        )
        return Busy(
            f"Too many sandbox runs at once for this tenant: {why}, and {queued}",
            retry_after_s=self.retry_after_s(tenant),
            tenantWorkers=self.share,
            queuePerTenant=self.queue_limit,
        )

    def _why_not(self, tenant: TenantKey) -> str:
        """Why ``tenant`` cannot start now, at the widest level that stops it."""
        org, project, _ = tenant
        parts = self.parts(tenant)
        if (held := self.held_by((org,))) >= parts.org:
            orgs = self.recent.active_under(())
            return (
                f"its org holds {held} of the {parts.org} sandbox workers it may use while "
                f"{orgs} orgs are active"
            )
        if (held := self.held_by((org, project))) >= parts.project:
            projects = self.recent.active_under((org,))
            return (
                f"its project holds {held} of the {parts.project} sandbox workers it may use "
                f"while {projects} projects of its org are active"
            )
        if (held := self.held_by(tenant)) >= parts.user:
            return f"it holds {held} of the {parts.user} sandbox workers one tenant may use"
        return f"all {self.pool_size} sandbox workers are busy"

    def _start(self, tenant: TenantKey) -> None:
        served = next(self._sequence)
        self.running += 1
        for prefix in _prefixes(tenant):
            load = self._loads.setdefault(prefix, _Load())
            load.running += 1
            load.served = served

    def _enqueue(self, waiter: _Waiter) -> None:
        org, project, user = waiter.path
        users = self._waiting.setdefault(org, {}).setdefault(project, {})
        users.setdefault(user, deque()).append(waiter)
        for prefix in _prefixes(waiter.path):
            self._loads.setdefault(prefix, _Load()).waiting += 1

    def _leave(self, waiter: _Waiter) -> None:
        """The waiter's task is done with it: out of the queue, or its slot given back."""
        if waiter.state is _State.QUEUED:
            self._drop(waiter)
        elif waiter.state is _State.GRANTED:
            waiter.state = _State.GONE
            self._give_back(waiter.path)

    def _drop(self, waiter: _Waiter) -> None:
        """Take a queued waiter out of its queue and the counts."""
        waiter.state = _State.GONE
        org, project, user = waiter.path
        projects = self._waiting[org]
        users = projects[project]
        queue = users[user]
        queue.remove(waiter)
        if not queue:
            del users[user]
            if not users:
                del projects[project]
                if not projects:
                    del self._waiting[org]
        for prefix in _prefixes(waiter.path):
            load = self._loads[prefix]
            load.waiting -= 1
            self._forget_if_idle(prefix, load)

    def _forget_if_idle(self, prefix: TenantKey, load: _Load) -> None:
        if load.running == 0 and load.waiting == 0:
            del self._loads[prefix]

    def _dispatch(self) -> None:
        """Hand free slots to the waiters chosen (see the module)."""
        while self.running < self.pool_size and not self._closed:
            waiter = self._next_waiter()
            if waiter is None:
                self._recheck_later()
                return
            self._drop(waiter)
            if waiter.granted.done():  # cancelled, its task not yet resumed: skip it
                continue
            waiter.state = _State.GRANTED
            self._start(waiter.path)
            waiter.granted.set_result(None)

    def _next_waiter(self) -> _Waiter | None:
        for org in self._least_busy(self._waiting, ()):
            projects = self._waiting[org]
            for project in self._least_busy(projects, (org,)):
                users = projects[project]
                for user in self._least_busy(users, (org, project)):
                    if self._within_parts((org, project, user)):
                        return users[user][0]
        return None

    def _recheck_later(self) -> None:
        """Waiters are held back by their parts while slots are free: look again when an
        active neighbour may have gone quiet (its part then returns to the others)."""
        if not self._waiting or self._timer is not None or self._closed:
            return
        delay_s = self.recent.next_change_in_s()
        if delay_s is None:
            return
        self._timer = asyncio.get_running_loop().call_later(delay_s + 0.01, self._recheck)

    def _recheck(self) -> None:
        self._timer = None
        self._dispatch()

    def _least_busy(self, children: Mapping[str, object], parent: TenantKey) -> Iterator[str]:
        """``children``'s names, the fewest slots held (then least recently served) first."""

        def rank(name: str) -> tuple[int, int]:
            load = self._loads.get((*parent, name))
            return (0, 0) if load is None else (load.running, load.served)

        if not children:
            return
        best = min(children, key=rank)
        yield best
        # Usually the best one has a waiter that may start: the full order only when not.
        yield from (name for name in sorted(children, key=rank) if name != best)


def _split(slots: int, between: int) -> int:
    """One of ``between`` parts of ``slots``, rounded up (at least one slot)."""
    return max(1, math.ceil(slots / max(between, 1)))


def _prefixes(tenant: TenantKey) -> tuple[TenantKey, ...]:
    return tuple(tenant[: depth + 1] for depth in range(len(tenant)))
