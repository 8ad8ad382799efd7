"""The lane of ``pml_discover``'s query embeddings: a few at a time, tenants served in turn.

    lane = query_lane()                          # this process's (one per event loop)
    text = query_text(intent)                    # what the model can read of the intent
    vectors = await lane.run(("acme", "webapp", "erwan"), partial(embedder.embed, [text]))

A shared PML answers many tenants in one process, and a query's embedding is CPU work on a
worker thread (~23 ms for 256 tokens on one core). Left unbounded, 32 callers of one tenant
ran 32 embeddings at once: another tenant's query waited behind all of them (p95 2.1 s) and
every thread held its own model buffers (1.6 GB). Here at most ``SLOTS`` query embeddings
run at once, the waiting tenants served in turn by org (``pml.fair_lane``), each with a
queue of at most ``QUEUE_PER_TENANT`` (one more is refused at once: ``BUSY`` with
``retryAfterS``). A running embedding that is cancelled keeps its slot until its thread is
done, so the bound holds.

The index's own embeddings (the catalog, new capabilities, remembered intents) do not come
here: they run one batch at a time on the background thread (``pml.discovery.background``),
so a long fill never holds up a query and a query flood never holds up the index.
"""

from __future__ import annotations

import asyncio
import functools
import re
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Final, TypeVar

import anyio
import anyio.to_thread

from pml.discovery.minilm import MAX_TOKENS
from pml.errors import Busy
from pml.fair_lane import FairLane, Tenant
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
FIRST_EMBED_ESTIMATE_S: Final = 0.025

_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_T = TypeVar("_T")


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


class EmbedLane(FairLane):
    """At most ``slots`` query embeddings at once, on worker threads, tenants in turn."""

    def __init__(self, *, slots: int = SLOTS, queue_limit: int = QUEUE_PER_TENANT) -> None:
        super().__init__(
            slots=slots, queue_limit=queue_limit, first_estimate_s=FIRST_EMBED_ESTIMATE_S
        )

    async def run(self, tenant: Tenant, work: Callable[[], _T]) -> _T:
        """``work()`` on a worker thread once ``tenant`` has a slot; its result or exception.
        ``Busy`` when it would wait and ``tenant``'s queue is full."""
        async with self.turn(tenant):
            # Not abandoned on cancellation: the slot is held until the thread is done.
            return await anyio.to_thread.run_sync(work)

    def busy(self, tenant: Tenant) -> Busy:
        return Busy(
            f"Too many discovery queries at once for this tenant: {self.queue_limit} already "
            f"wait for the {self.slots} embedding slot{'s' if self.slots > 1 else ''} "
            "the tenants share",
            retry_after_s=self.retry_after_s(tenant),
            queuePerTenant=self.queue_limit,
        )


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
