"""The lane of ``pml_discover``'s query embeddings: a few at a time, tenants served in turn.

    lane = query_lane()                          # this process's (one per event loop)
    text = query_text(intent)                    # what the model can read of the intent
    vectors = await lane.run(("acme", "webapp", "erwan"), partial(embedder.embed, [text]))

A shared PML answers many tenants in one process, and a query's embedding is CPU work on a
worker thread (~23 ms for 256 tokens on one core). Left unbounded, 32 callers of one tenant
ran 32 embeddings at once: another tenant's query waited behind all of them (p95 2.1 s) and
every thread held its own model buffers (1.6 GB). Here at most ``SLOTS`` query embeddings
run at once; the others wait, each tenant (org, project, user) in its own queue of at most
``QUEUE_PER_TENANT`` (one more is refused at once: ``BUSY`` with ``retryAfterS``). A freed
slot goes to the org holding the fewest slots, then the least recently served (an org that
was idle first), within it to the tenant chosen the same way, and to that tenant's oldest
waiter: orgs take turns (one org's many keys take one turn between them), so a newcomer
waits for the embeddings already running, not for a flood's queue. A waiter that
is cancelled leaves its queue in the same step; a running embedding that is cancelled keeps
its slot until its thread is done, so the bound holds. Counting is synchronous (one event
loop; nothing is awaited while the counts change), and a tenant with nothing running or
waiting is forgotten.

The index's own embeddings (the catalog, new capabilities, remembered intents) do not come
here: they run one batch at a time on the background thread (``pml.discovery.background``),
so a long fill never holds up a query and a query flood never holds up the index.
"""

from __future__ import annotations

import asyncio
import functools
import re
import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import anyio
import anyio.to_thread

from pml.discovery.minilm import MAX_TOKENS
from pml.errors import Busy
from pml.registry.scope import Scope

# One at a time: on 2 cores a second slot gave a flood 1.7x the embeddings, its victim no
# shorter wait, and the gateway ~70 MB more (benchmarks/discover_flood.py, docs/discovery.md).
SLOTS: Final = 1
# As [limits] queue_per_tenant's default for sandbox runs: ~1 s of embeddings at most.
QUEUE_PER_TENANT: Final = 32
# The model reads MAX_TOKENS tokens of a text. WordPiece tokens of ordinary text (prose,
# paths, code) average 2-6 characters: 16 per token reaches the model's limit with room to
# spare, and tokenizing the rest of a 10 MB intent (~10 s) was work for nothing.
QUERY_MAX_CHARS: Final = MAX_TOKENS * 16
# The longest intent pml_discover accepts (gateway.schemas.TEXT_MAX); other callers' are cut.
MAX_INTENT_CHARS: Final = 10_000
# A BUSY answer's retry delay (its queue's drain time), within these bounds.
RETRY_MIN_S: Final = 0.05
RETRY_MAX_S: Final = 10.0
FIRST_EMBED_ESTIMATE_S: Final = 0.025
EMBED_TIME_SMOOTHING: Final = 0.2

_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_T = TypeVar("_T")
Tenant = tuple[str, str, str]


def tenant_of(scope: Scope) -> Tenant:
    """The caller a query's embedding is counted for: its (org, project, user)."""
    return (scope.org, scope.project, scope.user)


def query_text(intent: str) -> str:
    """What of ``intent`` the model can read: its first ``QUERY_MAX_CHARS`` characters, lone
    surrogates (which the tokenizer refuses: JSON can carry them) replaced by U+FFFD."""
    text = intent[:QUERY_MAX_CHARS]
    try:
        text.encode()
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


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


class EmbedLane:
    """At most ``slots`` embeddings at once, waiting tenants served in turn (see module)."""

    def __init__(self, *, slots: int = SLOTS, queue_limit: int = QUEUE_PER_TENANT) -> None:
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
        self._embed_s = FIRST_EMBED_ESTIMATE_S

    # -- what tests and the benchmark read --------------------------------------------------

    @property
    def waiting(self) -> int:
        """Embeddings waiting for a slot now."""
        return sum(len(queue) for queue in self._queues.values())

    @property
    def tracked(self) -> int:
        """Tenants with something running or waiting (memory follows this)."""
        return len(self._held.keys() | self._queues.keys() | self._served.keys()) + len(self._orgs)

    def queued_for(self, tenant: Tenant) -> int:
        """Embeddings of ``tenant`` waiting now."""
        queue = self._queues.get(tenant)
        return 0 if queue is None else len(queue)

    def held_by(self, tenant: Tenant) -> int:
        """Slots ``tenant`` holds now."""
        return self._held.get(tenant, 0)

    # -- running ----------------------------------------------------------------------------

    async def run(self, tenant: Tenant, work: Callable[[], _T]) -> _T:
        """``work()`` on a worker thread once ``tenant`` has a slot; its result or exception.
        ``Busy`` when it would wait and ``tenant``'s queue is full."""
        await self._acquire(tenant)
        started = time.perf_counter()
        try:
            # Not abandoned on cancellation: the slot is held until the thread is done.
            return await anyio.to_thread.run_sync(work)
        finally:
            spent = time.perf_counter() - started
            self._embed_s += EMBED_TIME_SMOOTHING * (spent - self._embed_s)
            self._release(tenant)

    def retry_after_s(self, tenant: Tenant) -> float:
        """When ``tenant``'s queue will have drained: the waiting tenants take turns, so it
        moves one place per round of them; an embedding takes the recent average (within
        the bounds). Sooner, its callers would only meet a full queue again."""
        rounds = (self.queued_for(tenant) + 1) * max(len(self._queues), 1) / self.slots
        return round(min(max(rounds * self._embed_s, RETRY_MIN_S), RETRY_MAX_S), 3)

    async def _acquire(self, tenant: Tenant) -> None:
        if self.running < self.slots:  # a free slot means nobody waits (see _release)
            self._start(tenant)
            return
        queue = self._queues.get(tenant)
        if len(queue or ()) >= self.queue_limit:
            raise self._busy(tenant)
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

    def _busy(self, tenant: Tenant) -> Busy:
        return Busy(
            f"Too many discovery queries at once for this tenant: {self.queue_limit} already "
            f"wait for the {self.slots} embedding slot{'s' if self.slots > 1 else ''} "
            "the tenants share",
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


_lanes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, EmbedLane] = (
    weakref.WeakKeyDictionary()
)
_lanes_lock = threading.Lock()


def query_lane() -> EmbedLane:
    """The lane of this process's event loop (a gateway runs one; a lane's waiters belong
    to one loop, so a second loop, e.g. a test's, gets its own)."""
    loop = asyncio.get_running_loop()
    with _lanes_lock:
        lane = _lanes.get(loop)
        if lane is None:
            lane = _lanes[loop] = EmbedLane(slots=SLOTS, queue_limit=QUEUE_PER_TENANT)
        return lane


class QueryVectors:
    """Query vectors: the ``cache_size`` most recent kept, each new one embedded in its
    caller's turn (``lane``; None: the process's, ``query_lane``)."""

    def __init__(
        self, embed: Callable[[list[str]], Any], *, cache_size: int, lane: EmbedLane | None
    ) -> None:
        self._embed = embed
        self._cache_size = cache_size
        self.lane = lane
        self.cached: OrderedDict[str, Any] = OrderedDict()  # the cut text → its vector

    async def vector(self, scope: Scope, intent: str) -> Any:
        """``intent``'s vector (the cut text is the cache's key: the cache stays bounded)."""
        text = query_text(intent)
        cached = self.cached.get(text)
        if cached is not None:
            self.cached.move_to_end(text)
            return cached
        lane = self.lane or query_lane()
        vector = (await lane.run(tenant_of(scope), functools.partial(self._embed, [text])))[0]
        self.cached[text] = vector
        if len(self.cached) > self._cache_size:
            self.cached.popitem(last=False)
        return vector
