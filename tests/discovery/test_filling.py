"""Embedding what the index lacks without redoing another replica's work: ``fill`` alone,
then two discovery services of one database starting together (a SQLite file and
PostgreSQL), which used to embed every text twice between them."""

from __future__ import annotations

import random
import time
from collections.abc import AsyncGenerator, Sequence
from contextlib import asynccontextmanager

import anyio
import mcp_types
import numpy as np
import pytest
from numpy.typing import NDArray

from discovery.counting import Counting
from discovery.quality import StaticTools
from discovery.test_discovery_service import ME
from pml.discovery.filling import Filler, Wanted, decoded
from pml.discovery.index import Vector
from pml.discovery.service import DiscoveryService
from pml.errors import StorageError
from pml.registry.models import RoutingRules
from pml.storage.database import Database
from pml.upstream.base import UpstreamTool

pytestmark = pytest.mark.anyio

DIM = 4


def _vector(value: float) -> bytes:
    return np.full(DIM, value, "<f4").tobytes()


class Recorder:
    """The three callbacks of ``fill``, recording what each was given."""

    def __init__(self, stored: dict[str, tuple[str, bytes]] | None = None) -> None:
        self.store = dict(stored or {})
        self.embedded: list[list[str]] = []
        self.reads: list[list[str]] = []
        self.saved: list[list[tuple[str, str]]] = []
        self.fail_reads = False

    async def embed(self, texts: list[str]) -> Vector:
        self.embedded.append(texts)
        return np.array([[float(len(text))] * DIM for text in texts], np.float32)

    async def stored(self, keys: list[str]) -> dict[str, tuple[str, bytes]]:
        self.reads.append(keys)
        if self.fail_reads:
            raise StorageError("database is locked")
        return {key: self.store[key] for key in keys if key in self.store}

    async def save(self, keys: list[tuple[str, str]], vectors: Vector) -> None:
        self.saved.append(keys)

    async def run(self, wanted: list[Wanted], batch: int) -> dict[str, Vector]:
        return await placed(Filler(self.embed, self.stored, self.save, DIM, batch), wanted)


async def placed(filler: Filler, wanted: list[Wanted]) -> dict[str, Vector]:
    """What ``filler`` places for ``wanted`` (batches shuffled by seed 7), each once."""
    out: dict[str, Vector] = {}

    def place(item: Wanted, vector: Vector) -> None:
        assert item.key not in out, "each wanted text is placed once"
        out[item.key] = vector

    await filler.fill(wanted, place, rng=random.Random(7))
    return out


def _wanted(count: int) -> list[Wanted]:
    return [Wanted(f"k{index}", f"h{index}", "x" * (index + 1)) for index in range(count)]


async def test_a_single_batch_is_embedded_and_saved_without_reading_the_store() -> None:
    recorder = Recorder()
    out = await recorder.run(_wanted(3), batch=8)
    assert sorted(out) == ["k0", "k1", "k2"]
    assert out["k2"].tolist() == [3.0] * DIM
    assert recorder.reads == []
    assert recorder.embedded == [["x", "xx", "xxx"]]
    assert recorder.saved == [[("k0", "h0"), ("k1", "h1"), ("k2", "h2")]]


async def test_each_batch_uses_what_was_stored_meanwhile_and_embeds_only_the_rest() -> None:
    wanted = _wanted(12)
    # stored meanwhile by another process: even keys with this text; k1, k5, k9 with another
    # text (their hash differs); k3, k7, k11 with another model's dimension
    store = {
        item.key: (item.digest, _vector(0.5))
        if index % 2 == 0
        else ("stale", _vector(0.5))
        if index % 4 == 1
        else (item.digest, np.full(DIM + 1, 0.5, "<f4").tobytes())
        for index, item in enumerate(wanted)
    }
    recorder = Recorder(store)
    out = await recorder.run(wanted, batch=4)

    assert sorted(out) == sorted(item.key for item in wanted)
    assert len(recorder.reads) == 3
    assert all(len(keys) == 4 for keys in recorder.reads)
    embedded = [text for texts in recorder.embedded for text in texts]
    assert len(embedded) == len(set(embedded)) == 6  # each odd key once
    for index, item in enumerate(wanted):
        used_stored = index % 2 == 0
        assert (item.text in embedded) is not used_stored, item.key
        assert out[item.key].tolist() == ([0.5] * DIM if used_stored else [index + 1.0] * DIM)
    saved = {key for keys in recorder.saved for key, _ in keys}
    assert saved == {item.key for index, item in enumerate(wanted) if index % 2}


async def test_batches_are_cut_from_sorted_keys_and_taken_in_a_random_order() -> None:
    wanted = list(reversed(_wanted(20)))
    recorder = Recorder()
    out = await recorder.run(wanted, batch=5)
    assert len(out) == 20
    assert len(recorder.embedded) == len(recorder.saved) == 4
    batches = sorted(sorted(keys) for keys in recorder.reads)
    keys = sorted(item.key for item in wanted)
    assert batches == [keys[start : start + 5] for start in range(0, 20, 5)]
    assert recorder.reads[0] != keys[:5]  # seed 7: not the sorted order


async def test_a_batch_claimed_elsewhere_is_left_for_the_end_and_read_back() -> None:
    wanted = _wanted(9)
    recorder = Recorder()
    claims: list[tuple[list[str], bool]] = []

    @asynccontextmanager
    async def claim(keys: list[str], wait: bool) -> AsyncGenerator[bool]:
        claims.append((keys, wait))
        held_elsewhere = "k3" in keys and not wait
        yield not held_elsewhere
        if held_elsewhere:  # the holder stores the batch while this process does the others
            recorder.store.update({key: (f"h{key[1:]}", _vector(0.5)) for key in keys})

    filler = Filler(recorder.embed, recorder.stored, recorder.save, DIM, 3, claim=claim)
    out = await placed(filler, wanted)
    assert sorted(out) == sorted(item.key for item in wanted)
    assert [wait for _, wait in claims] == [False, False, False, True]
    assert claims[-1][0] == ["k3", "k4", "k5"]
    assert {text for texts in recorder.embedded for text in texts} == {
        item.text for item in wanted if item.key not in {"k3", "k4", "k5"}
    }
    assert out["k4"].tolist() == [0.5] * DIM


async def test_a_failed_read_embeds_the_batch_as_if_nothing_was_stored() -> None:
    wanted = _wanted(6)
    recorder = Recorder({item.key: (item.digest, _vector(0.5)) for item in wanted})
    recorder.fail_reads = True
    out = await recorder.run(wanted, batch=3)
    assert len(recorder.reads) == 2
    assert sum(len(texts) for texts in recorder.embedded) == 6
    assert all(vector[0] >= 1.0 for vector in out.values())


def test_decoded_takes_only_the_same_text_and_dimension() -> None:
    saved = ("h1", _vector(1.5))
    assert decoded(saved, "h1", DIM) is not None
    assert decoded(saved, "h2", DIM) is None
    assert decoded(saved, "h1", DIM + 1) is None
    assert decoded(None, "h1", DIM) is None
    assert decoded(("h1", b"\x00\x01\x02"), "h1", DIM) is None  # torn bytes: not a vector


class SlowCounting(Counting):
    """The counting hashing embedder, taking a little time per batch as a model does."""

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        time.sleep(0.004)
        return super().embed(texts)


def _many_tools(count: int) -> StaticTools:
    tools = [
        UpstreamTool(
            f"srv{index % 7}",
            mcp_types.Tool(
                name=f"tool_{index}",
                description=f"Do task number {index} on widgets. It handles case {index * 3}.",
                input_schema={"type": "object", "properties": {"x": {"type": "string"}}},
            ),
        )
        for index in range(count)
    ]
    return StaticTools(tools)


async def test_two_replicas_starting_together_share_the_embedding(database_url: str) -> None:
    source = _many_tools(300)
    first_db, second_db = await Database.open(database_url), await Database.open(database_url)
    try:
        embedders = [SlowCounting(), SlowCounting()]
        services = [
            DiscoveryService(db, source, embedder, routing=RoutingRules(), refresh_interval_s=0)
            for db, embedder in zip((first_db, second_db), embedders, strict=True)
        ]
        async with anyio.create_task_group() as tasks:
            for service in services:
                tasks.start_soon(service.refresh)
        distinct = set(embedders[0].texts) | set(embedders[1].texts)
        total = len(embedders[0].texts) + len(embedders[1].texts)
        assert len(distinct) > 600  # 300 tools: their texts and their sentences' views
        # each would embed every text alone (2 x distinct); shared, about once between them
        if database_url.startswith("postgresql"):  # each batch claimed by one of them
            assert total == len(distinct), (total, len(distinct))
        else:  # SQLite's claims are per process: here only the orders and the read-back
            # apply (1.17-1.43 x over ten runs; two processes: tests/storage/test_embed_claims)
            assert total < 1.75 * len(distinct), (total, len(distinct))
        assert min(len(embedder.texts) for embedder in embedders) > 0.2 * len(distinct)
        query = "do task number 42 on widgets"
        answers = [await service.discover(ME, query, kind="tool", limit=3) for service in services]
        names = [[result["name"] for result in answer] for answer in answers]
        assert names[0] == names[1]
        assert names[0][0] == "srv0:tool_42"
        # a third replica, later, finds everything stored and embeds nothing
        third = SlowCounting()
        late = DiscoveryService(first_db, source, third, routing=RoutingRules())
        await late.refresh()
        assert third.texts == []
    finally:
        await first_db.close()
        await second_db.close()


async def test_a_failed_embedding_ends_its_claim_and_the_fill() -> None:
    held: list[str] = []

    @asynccontextmanager
    async def claim(keys: list[str], wait: bool) -> AsyncGenerator[bool]:
        held.append("taken")
        try:
            yield True
        finally:
            held.append("ended")

    async def broken(texts: list[str]) -> Vector:
        raise RuntimeError("the model is gone")

    recorder = Recorder()
    filler = Filler(broken, recorder.stored, recorder.save, DIM, 2, claim=claim)
    with pytest.raises(RuntimeError, match="the model is gone"):
        await placed(filler, _wanted(5))
    assert held == ["taken", "ended"]
    assert recorder.saved == []
