"""Work that costs CPU, a few pieces at a time, the waiting tenants served in turn.

    lane = FairLane(slots=1, queue_limit=32)
    async with lane.turn(("acme", "webapp", "erwan")):
        ...                                      # the work, while holding one slot

A shared PML answers many tenants in one process. Some of its work costs real CPU (a query's
embedding, checking a large snippet) and, left unbounded, one tenant's flood of it made
every other tenant wait behind the whole flood. A lane runs at most ``slots`` pieces at once;
the others wait, each tenant (org, project, user) in its own queue of at most
``queue_limit`` (one more is refused at once: ``Busy`` with ``retryAfterS``). A freed slot
goes to the org holding the fewest slots, then the least recently served (an org that was
idle first), within it to the tenant chosen the same way, and to that tenant's oldest
waiter: orgs take turns (one org's many keys take one turn between them), so a newcomer
waits for the work already running, not for a flood's queue. A waiter that is cancelled
leaves its queue in the same step. Counting is synchronous (one event loop; nothing is
awaited while the counts change), and a tenant with nothing running or waiting is
forgotten.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Final

import anyio

from pml.errors import Busy

# A BUSY answer's retry delay (its queue's drain time), within these bounds.
RETRY_MIN_S: Final = 0.05
RETRY_MAX_S: Final = 10.0
FIRST_ESTIMATE_S: Final = 0.025
TIME_SMOOTHING: Final = 0.2

Tenant = tuple[str, str, str]


@dataclass(eq=False, slots=True)
class _Waiter:
    tenant: Tenant
    turn: anyio.Event = field(default_factory=anyio.Event)
    granted: bool = False


@dataclass(slots=True)
class _Org:
    held: int = 0
    waiting: int = 0
    served: int = 0  # when one of its tenants last got a slot


class FairLane:
    """At most ``slots`` pieces of work at once, waiting tenants served in turn (see module).

    Subclasses name their work in ``busy`` (the error a full queue answers)."""

    def __init__(
        self, *, slots: int, queue_limit: int, first_estimate_s: float = FIRST_ESTIMATE_S
    ) -> None:
        if slots < 1 or queue_limit < 0:
            raise ValueError("a lane needs a slot and a queue of >= 0")
        self.slots = slots
        self.queue_limit = queue_limit
        self.running = 0
        self._held: dict[Tenant, int] = {}
        self._queues: dict[Tenant, deque[_Waiter]] = {}  # in order of arrival
        self._served: dict[Tenant, int] = {}  # when each last got a slot
        self._orgs: dict[str, _Org] = {}  # orgs with a tenant running or waiting
        self._turns = 0
        self._work_s = first_estimate_s

    # -- what tests and the benchmark read --------------------------------------------------

    @property
    def waiting(self) -> int:
        """Pieces of work waiting for a slot now."""
        return sum(len(queue) for queue in self._queues.values())

    @property
    def tracked(self) -> int:
        """Tenants with something running or waiting (memory follows this)."""
        return len(self._held.keys() | self._queues.keys() | self._served.keys()) + len(self._orgs)

    def queued_for(self, tenant: Tenant) -> int:
        """Pieces of work of ``tenant`` waiting now."""
        queue = self._queues.get(tenant)
        return 0 if queue is None else len(queue)

    def held_by(self, tenant: Tenant) -> int:
        """Slots ``tenant`` holds now."""
        return self._held.get(tenant, 0)

    # -- running ----------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def turn(self, tenant: Tenant) -> AsyncGenerator[None]:
        """Hold one of the slots for ``tenant``'s work (waiting for its turn first); ``Busy``
        when it would wait and ``tenant``'s queue is full. The time held feeds
        ``retry_after_s``: work that must not be abandoned half-way (a thread, a child
        process's answer) shields itself, so the bound holds on cancellation too."""
        await self._acquire(tenant)
        started = time.perf_counter()
        try:
            yield
        finally:
            spent = time.perf_counter() - started
            self._work_s += TIME_SMOOTHING * (spent - self._work_s)
            self._release(tenant)

    def retry_after_s(self, tenant: Tenant) -> float:
        """When ``tenant``'s queue will have drained: the waiting tenants take turns, so it
        moves one place per round of them; a piece of work takes the recent average (within
        the bounds). Sooner, its callers would only meet a full queue again."""
        rounds = (self.queued_for(tenant) + 1) * max(len(self._queues), 1) / self.slots
        return round(min(max(rounds * self._work_s, RETRY_MIN_S), RETRY_MAX_S), 3)

    async def _acquire(self, tenant: Tenant) -> None:
        if self.running < self.slots:  # a free slot means nobody waits (see _release)
            self._start(tenant)
            return
        queue = self._queues.get(tenant)
        if len(queue or ()) >= self.queue_limit:
            raise self.busy(tenant)
        waiter = _Waiter(tenant)
        self._queues.setdefault(tenant, deque()).append(waiter)
        self._org(tenant).waiting += 1
        try:
            await waiter.turn.wait()
        except BaseException:  # cancelled: out of the queue, or the slot just given passed on
            if waiter.granted:
                self._release(tenant)
            else:
                self._drop(waiter)
            raise

    def busy(self, tenant: Tenant) -> Busy:
        """The error answered when ``tenant``'s queue is full (subclasses name their work)."""
        return Busy(
            f"Too many requests at once for this tenant: {self.queue_limit} already wait "
            f"for the {self.slots} slot{'s' if self.slots > 1 else ''} the tenants share",
            retry_after_s=self.retry_after_s(tenant),
            queuePerTenant=self.queue_limit,
        )

    def _org(self, tenant: Tenant) -> _Org:
        return self._orgs.setdefault(tenant[0], _Org())

    def _start(self, tenant: Tenant) -> None:
        self.running += 1
        self._held[tenant] = self._held.get(tenant, 0) + 1
        self._turns += 1
        self._served[tenant] = self._turns
        org = self._org(tenant)
        org.held += 1
        org.served = self._turns

    def _release(self, tenant: Tenant) -> None:
        self.running -= 1
        self._orgs[tenant[0]].held -= 1
        held = self._held[tenant] - 1
        if held:
            self._held[tenant] = held
        else:
            del self._held[tenant]
            self._forget_if_idle(tenant)
        while self.running < self.slots and self._queues:
            chosen = min(self._queues, key=self._rank)  # ties: the first to arrive
            queue = self._queues[chosen]
            waiter = queue.popleft()
            if not queue:
                del self._queues[chosen]
            self._orgs[chosen[0]].waiting -= 1
            waiter.granted = True
            self._start(chosen)
            waiter.turn.set()

    def _rank(self, tenant: Tenant) -> tuple[int, int, int, int]:
        """Org first (one org's many keys take one turn between them), then its tenant."""
        org = self._orgs[tenant[0]]
        return (org.held, org.served, self._held.get(tenant, 0), self._served.get(tenant, 0))

    def _drop(self, waiter: _Waiter) -> None:
        queue = self._queues[waiter.tenant]
        queue.remove(waiter)
        self._orgs[waiter.tenant[0]].waiting -= 1
        if not queue:
            del self._queues[waiter.tenant]
            self._forget_if_idle(waiter.tenant)

    def _forget_if_idle(self, tenant: Tenant) -> None:
        if tenant not in self._held and tenant not in self._queues:
            self._served.pop(tenant, None)
        org = self._orgs.get(tenant[0])
        if org is not None and org.held == 0 and org.waiting == 0:
            del self._orgs[tenant[0]]
