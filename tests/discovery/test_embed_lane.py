"""The query embedding lane: a bounded number at once, tenants in turn, bounded queues
(``BUSY``), cancellation, and intents of any size; alone and inside ``DiscoveryService``.

The work the lane runs is real: the MiniLM model, or plain functions that block their worker
thread until the test opens a gate (``threading.Event``), so who holds a slot and who waits
is decided by the test, not by timing. Nothing is mocked.
"""

from __future__ import annotations

import functools
import random
import threading
from collections.abc import Callable, Sequence

import anyio
import anyio.lowlevel
import numpy as np
import pytest
from numpy.typing import NDArray

from discovery.test_discovery_service import REFERENCE, _model
from pml.discovery.embed_lane import (
    QUERY_MAX_CHARS,
    EmbedLane,
    Tenant,
    query_lane,
    query_text,
    tenant_of,
)
from pml.discovery.service import DiscoveryService
from pml.errors import Busy
from pml.fair_lane import RETRY_MAX_S, RETRY_MIN_S
from pml.registry.models import RoutingRules
from pml.registry.scope import Scope
from pml.storage.database import Database

pytestmark = pytest.mark.anyio

FLOOD: Tenant = ("flood-org", "web", "mallory")
VICTIM: Tenant = ("quiet-org", "web", "bob")
A: Tenant = ("a", "p", "u")
B: Tenant = ("b", "p", "u")
C: Tenant = ("c", "p", "u")
WAIT_S = 10.0
_PROSE = (
    "please read the log file and count every error line then list the files in that "
    "directory write a short summary of the commits on the main branch of the repository "
    "what time is it in Tokyo convert the meeting to Paris time and store a note about it "
    "fetch the page at https://example.com/docs/v2/index.html parse its json and keep "
    "the names of /var/log/app/server-2024-06-01.log with their sizes"
)
WORDS = _PROSE.split()


def english(chars: int, *, seed: int) -> str:
    """Sentences of ordinary words, paths and a URL: ``chars`` characters of them."""
    rnd = random.Random(seed)
    out: list[str] = []
    size = 0
    while size < chars:
        sentence = " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(6, 18))) + "."
        out.append(sentence.capitalize())
        size += len(sentence) + 1
    return " ".join(out)[:chars]


class Gate:
    """Work that holds its worker thread (and so its slot) until ``open()``."""

    def __init__(self) -> None:
        self._open = threading.Event()
        self.entered = 0
        self._lock = threading.Lock()

    def work(self, result: str = "gated") -> Callable[[], str]:
        def held() -> str:
            with self._lock:
                self.entered += 1
            if not self._open.wait(WAIT_S):
                raise TimeoutError("the test never opened the gate")
            return result

        return held

    def open(self) -> None:
        self._open.set()


async def until(check: Callable[[], bool]) -> None:
    """Let other tasks run until ``check()`` holds (the lane's counts change on this loop)."""
    with anyio.fail_after(WAIT_S):
        while not check():
            await anyio.lowlevel.checkpoint()


def recorder(order: list[str], name: str) -> Callable[[], str]:
    def record() -> str:
        order.append(name)
        return name

    return record


# -- the lane alone ------------------------------------------------------------------------


async def test_waiting_tenants_take_turns_and_a_newcomer_goes_first() -> None:
    lane = EmbedLane(slots=1, queue_limit=8)
    gate, order = Gate(), list[str]()
    async with anyio.create_task_group() as group:
        group.start_soon(lane.run, C, gate.work())
        await until(lambda: lane.running == 1)
        for tenant, name, count in ((A, "a", 3), (B, "b", 3), (C, "c", 1)):
            for i in range(count):
                group.start_soon(lane.run, tenant, recorder(order, f"{name}{i}"))
                await until(lambda t=tenant, n=i + 1: lane.queued_for(t) == n)
        gate.open()
    # A and B had not been served: they come before C (served the gated run), then in turn.
    assert order == ["a0", "b0", "c0", "a1", "b1", "a2", "b2"]
    assert (lane.running, lane.waiting, lane.tracked) == (0, 0, 0)


async def test_one_org_s_many_keys_take_one_turn_between_them() -> None:
    lane = EmbedLane(slots=1, queue_limit=8)
    gate, order = Gate(), list[str]()
    flood = [("flood-org", "web", f"key-{index}") for index in range(4)]
    async with anyio.create_task_group() as group:
        group.start_soon(lane.run, flood[0], gate.work())
        await until(lambda: lane.running == 1)
        for index, tenant in enumerate(flood):
            for i in range(2):
                group.start_soon(lane.run, tenant, recorder(order, f"f{index}.{i}"))
                await until(lambda t=tenant, n=i + 1: lane.queued_for(t) == n)
        for i in range(3):
            group.start_soon(lane.run, VICTIM, recorder(order, f"v{i}"))
            await until(lambda n=i + 1: lane.queued_for(VICTIM) == n)
        gate.open()
    # The flood's org and the victim's take turns, whatever the number of the flood's keys;
    # within the flood's org, its keys take turns.
    assert order[:6] == ["v0", "f1.0", "v1", "f2.0", "v2", "f3.0"]
    assert sorted(order[6:]) == ["f0.0", "f0.1", "f1.1", "f2.1", "f3.1"]
    assert (lane.running, lane.waiting, lane.tracked) == (0, 0, 0)


@pytest.mark.parametrize("slots", [1, 2])
async def test_the_victim_of_a_flood_waits_only_for_what_runs_and_a_full_queue_is_busy(
    slots: int,
) -> None:
    lane = EmbedLane(slots=slots, queue_limit=16)
    running, queued = Gate(), Gate()  # the flood's embeddings running, and those queued
    answered: list[str] = []
    async with anyio.create_task_group() as group:
        for _ in range(slots):
            group.start_soon(lane.run, FLOOD, running.work())
        await until(lambda: lane.held_by(FLOOD) == slots)
        for _ in range(16):
            group.start_soon(lane.run, FLOOD, queued.work())
        await until(lambda: lane.queued_for(FLOOD) == 16)
        with pytest.raises(Busy) as busy:
            await lane.run(FLOOD, queued.work())
        refused = busy.value.to_dict()
        assert refused["code"] == "BUSY"
        assert RETRY_MIN_S <= refused["retryAfterS"] <= RETRY_MAX_S
        assert refused["queuePerTenant"] == 16

        async def victim() -> None:
            answered.append(await lane.run(VICTIM, lambda: "victim"))

        group.start_soon(victim)
        await until(lambda: lane.queued_for(VICTIM) == 1)
        running.open()  # the queued flood stays held: the victim must not need it
        await until(lambda: answered == ["victim"])
        # at most the slots freed beside the victim's and after it went to the flood
        assert queued.entered <= slots
        assert lane.queued_for(FLOOD) >= 16 - slots
        queued.open()
    assert (lane.running, lane.waiting, lane.tracked) == (0, 0, 0)


async def test_no_more_than_the_slots_embed_at_once_with_the_real_model() -> None:
    model = _model()
    lane = EmbedLane(slots=2, queue_limit=32)
    both = threading.Barrier(2, timeout=WAIT_S)  # the first two pass only side by side
    lock = threading.Lock()
    now, peak, calls = 0, 0, 0

    def counted(texts: Sequence[str]) -> NDArray[np.float32]:
        nonlocal now, peak, calls
        with lock:
            now, calls = now + 1, calls + 1
            peak, first_two = max(peak, now), calls <= 2
        try:
            if first_two:
                both.wait()
            return model.embed(texts)
        finally:
            with lock:
                now -= 1

    intents = {
        (f"org{t}", "p", "u"): [english(2000, seed=10 * t + i) for i in range(4)] for t in range(4)
    }
    got: dict[str, NDArray[np.float32]] = {}

    async def ask(tenant: Tenant, text: str) -> None:
        got[text] = (await lane.run(tenant, functools.partial(counted, [text])))[0]

    async with anyio.create_task_group() as group:
        for tenant, texts in intents.items():
            for text in texts:
                group.start_soon(ask, tenant, text)
    assert (peak, calls) == (2, 16)
    every = [text for texts in intents.values() for text in texts]
    np.testing.assert_allclose(np.stack([got[t] for t in every]), model.embed(every), atol=1e-5)


async def test_a_cancelled_waiter_leaves_no_trace_and_never_runs() -> None:
    lane = EmbedLane(slots=1, queue_limit=4)
    gate, order = Gate(), list[str]()
    async with anyio.create_task_group() as group:
        group.start_soon(lane.run, A, gate.work())
        await until(lambda: lane.running == 1)
        with anyio.CancelScope() as scope:
            inner = anyio.create_task_group()
            async with inner:
                for i in range(4):
                    inner.start_soon(lane.run, B, recorder(order, f"b{i}"))
                await until(lambda: lane.queued_for(B) == 4)
                scope.cancel()
        assert (lane.queued_for(B), lane.waiting, lane.held_by(B)) == (0, 0, 0)
        group.start_soon(lane.run, C, recorder(order, "c"))
        await until(lambda: lane.queued_for(C) == 1)
        gate.open()
    assert order == ["c"]
    assert (lane.running, lane.waiting, lane.tracked) == (0, 0, 0)


async def test_a_waiter_cancelled_just_as_it_got_its_slot_passes_the_slot_on() -> None:
    lane = EmbedLane(slots=1, queue_limit=4)
    gate, order = Gate(), list[str]()
    cancelled = anyio.CancelScope()

    async def b_waits() -> None:
        with cancelled:
            await lane.run(B, recorder(order, "b"))

    async def a_runs_then_cancels_b() -> None:
        await lane.run(A, gate.work())
        # A's slot went to B just now; B has not resumed yet when it is cancelled
        assert lane.held_by(B) == 1
        cancelled.cancel()

    async with anyio.create_task_group() as group:
        group.start_soon(a_runs_then_cancels_b)
        await until(lambda: lane.running == 1)
        group.start_soon(b_waits)
        await until(lambda: lane.queued_for(B) == 1)
        group.start_soon(lane.run, C, recorder(order, "c"))
        await until(lambda: lane.queued_for(C) == 1)
        gate.open()
    assert order == ["c"]
    assert (lane.running, lane.waiting, lane.tracked) == (0, 0, 0)


async def test_a_cancelled_embedding_holds_its_slot_until_its_thread_is_done() -> None:
    lane = EmbedLane(slots=1, queue_limit=4)
    gate, order = Gate(), list[str]()
    cancelled = anyio.CancelScope()

    async def a_runs() -> None:
        with cancelled:
            await lane.run(A, gate.work())

    async with anyio.create_task_group() as group:
        group.start_soon(a_runs)
        await until(lambda: gate.entered == 1)
        group.start_soon(lane.run, C, recorder(order, "c"))
        await until(lambda: lane.queued_for(C) == 1)
        cancelled.cancel()
        for _ in range(10):
            await anyio.lowlevel.checkpoint()
        assert (lane.held_by(A), lane.queued_for(C), order) == (1, 1, [])  # its thread runs
        gate.open()
    assert order == ["c"]
    assert (lane.running, lane.waiting, lane.tracked) == (0, 0, 0)


async def test_a_lane_without_a_queue_refuses_whoever_would_wait() -> None:
    lane = EmbedLane(slots=1, queue_limit=0)
    gate = Gate()
    async with anyio.create_task_group() as group:
        group.start_soon(lane.run, A, gate.work())
        await until(lambda: lane.running == 1)
        for tenant in (A, B):
            with pytest.raises(Busy):
                await lane.run(tenant, gate.work())
        gate.open()
    assert await lane.run(B, lambda: "free again") == "free again"


async def test_an_error_in_the_work_is_raised_and_frees_the_slot() -> None:
    lane = EmbedLane(slots=1, queue_limit=1)

    def broken() -> str:
        raise ValueError("the model failed")

    with pytest.raises(ValueError, match="the model failed"):
        await lane.run(A, broken)
    assert (lane.running, lane.tracked) == (0, 0)


async def test_the_process_lane_is_one_per_event_loop() -> None:
    assert query_lane() is query_lane()
    assert tenant_of(Scope("acme", "web", "erwan")) == ("acme", "web", "erwan")


# -- what the model is given ----------------------------------------------------------------


def test_a_query_is_cut_to_what_the_model_reads_and_made_encodable() -> None:
    assert len(query_text("read a file " * 1_000_000)) == QUERY_MAX_CHARS
    assert query_text("read\x00a file") == "read\x00a file"
    assert query_text("\ud800 read 📄 a file \udfff") == "\ufffd read 📄 a file \ufffd"
    assert query_text("日本語のファイルを読む") == "日本語のファイルを読む"


def test_the_cut_loses_nothing_the_model_reads_of_long_text() -> None:
    model = _model()
    for seed in range(3):
        long = english(10_000, seed=seed)
        np.testing.assert_allclose(model.embed([query_text(long)]), model.embed([long]), atol=1e-6)


# -- inside the discovery service ---------------------------------------------------------


@pytest.fixture
async def service(db: Database) -> DiscoveryService:
    found = DiscoveryService(
        db, REFERENCE, _model(), routing=RoutingRules(), refresh_interval_s=60,
        lane=EmbedLane(slots=1, queue_limit=0),
    )  # fmt: skip
    await found.refresh()
    return found


ME = Scope("acme", "webapp", "erwan")


async def test_huge_and_hostile_intents_give_bounded_results_and_change_nothing(
    service: DiscoveryService,
) -> None:
    indexed = len(service)
    huge = english(10_000, seed=7) + "x" * 10_000_000
    first = await service.discover(ME, huge, limit=3)
    assert first == await service.discover(ME, huge[:10_000], limit=3)
    assert [r["name"] for r in first]  # a real answer
    for intent in ("\ud800 read a file \udc00", "read\x00the file", "é" * 50_000, "🙂" * 30_000):
        results = await service.discover(ME, intent, limit=3)
        assert all(0 <= r["score"] <= 1 for r in results)
    assert len(service) == indexed
    queries = service._query_vectors.cached  # pyright: ignore[reportPrivateUsage]
    assert all(len(key) <= QUERY_MAX_CHARS for key in queries)
    assert "\ud800" not in "".join(queries)


async def test_the_service_embeds_in_the_lane_and_a_cached_intent_needs_no_slot(
    service: DiscoveryService,
) -> None:
    lane = service._query_vectors.lane  # pyright: ignore[reportPrivateUsage]
    assert lane is not None
    await service.discover(ME, "read a file")
    gate = Gate()
    async with anyio.create_task_group() as group:
        group.start_soon(lane.run, tenant_of(ME), gate.work())
        await until(lambda: lane.running == 1)
        with pytest.raises(Busy):  # a new intent needs a slot, and this lane has no queue
            await service.discover(ME, "list the commits of the repository")
        assert await service.discover(ME, "read a file")  # cached: answered at once
        gate.open()
    assert await service.discover(ME, "list the commits of the repository")
