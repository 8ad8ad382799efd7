"""Stored view vectors (``text:<hash>``) that no item shows any more are deleted at a full
sync, on a real database: churned intents, edited descriptions, vanished tools, archived and
purged capabilities; never a live one, never a recent one, never on an incremental sync."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import Any

import mcp_types
import numpy as np
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from discovery.counting import Counting
from pml.discovery.base import KindFilter
from pml.discovery.items import capability_item, text_hash, tool_item
from pml.discovery.pruning import PRUNE_GRACE, VIEW_PREFIX, prune_stored_views, view_key
from pml.discovery.service import DiscoveryService
from pml.errors import StorageError
from pml.registry.changes import CapabilityChange
from pml.registry.lifecycle import CapabilityLifecycle
from pml.registry.models import CapabilityDraft, RoutingRules
from pml.registry.scope import Scope
from pml.registry.service import CapabilityRegistry
from pml.storage.database import Database
from pml.storage.discovery_repo import SAVE_BATCH, SqlDiscoveryRepository
from pml.storage.intent_repo import remember_now
from pml.storage.tables import discovery_vectors
from pml.storage.types import utc_now
from pml.upstream.base import UpstreamTool

pytestmark = pytest.mark.anyio

ME = Scope("acme", "webapp", "erwan")
LATER = PRUNE_GRACE + timedelta(minutes=1)


class Clock:
    """The service's clock, moved by the test (rows are stamped with it)."""

    def __init__(self) -> None:
        self.now = utc_now()

    def __call__(self) -> datetime:
        return self.now

    def advance(self, by: timedelta = LATER) -> None:
        self.now += by


class Tools:
    """The upstream pool's tools, changed by the test."""

    def __init__(self, **descriptions: str) -> None:
        self.descriptions = dict(descriptions)  # "server:tool" -> description

    def set(self, address: str, description: str | None) -> None:
        if description is None:
            del self.descriptions[address]
        else:
            self.descriptions[address] = description

    async def list_tools(self) -> list[UpstreamTool]:
        schema: dict[str, Any] = {"type": "object"}
        return [
            UpstreamTool(
                address.split(":", 1)[0],
                mcp_types.Tool(
                    name=address.split(":", 1)[1], description=text, input_schema=schema
                ),
            )
            for address, text in self.descriptions.items()
        ]


def service_for(
    db: Database, tools: Tools, clock: Clock, embedder: Counting | None = None
) -> DiscoveryService:
    return DiscoveryService(db, tools, embedder or Counting(), routing=RoutingRules(), clock=clock)


async def learn(registry: CapabilityRegistry, intent: str, code: str, name: str) -> str:
    draft = CapabilityDraft(code=code, intent=intent, name=name)
    return (await registry.capture(ME, draft, latency_ms=3.0)).record.fqdn


async def remember(db: Database, fqdn: str, *texts: str) -> None:
    for text in texts:
        async with db.transaction() as conn:
            await remember_now(conn, fqdn, text, "erwan", utc_now(), source="reuse")


async def text_rows(db: Database) -> dict[str, str]:
    """Every stored ``text:`` row: key -> model."""
    v = discovery_vectors.c
    async with db.read() as conn:
        result = await conn.execute(sa.select(v.item_key, v.model))
        return {key: model for key, model in result if key.startswith(VIEW_PREFIX)}


async def current_views(db: Database, tools: Tools) -> set[str]:
    """The ``text:`` keys the current tools and (unarchived) capabilities need."""
    items = [tool_item(tool) for tool in await tools.list_tools()]
    async with db.read() as conn:
        rows = await SqlDiscoveryRepository(conn).capabilities_since(None)
    items.extend(capability_item(row) for row in rows if not row.archived)
    return {view_key(text_hash(view)) for item in items for view in item.views}


def key_of(text: str) -> str:
    return view_key(text_hash(text))


async def plant(db: Database, model: str, keys: Sequence[str], when: datetime) -> None:
    """Rows as another process (or an older version) would have stored them."""
    rows = [(key, "0" * 64, np.zeros(4, "<f4").tobytes()) for key in keys]
    async with db.transaction() as conn:
        await SqlDiscoveryRepository(conn).save_vectors(model, rows, when)


async def found(service: DiscoveryService, intent: str, kind: KindFilter = "capability") -> str:
    """The best result's FQDN (a capability) or ``server:tool`` address (a tool)."""
    results = await service.discover(ME, intent, kind=kind, limit=3)
    assert results, f"nothing found for {intent!r}"
    return str(results[0].get("fqdn") or results[0]["name"])


async def kept_intents(db: Database, fqdn: str) -> tuple[str, ...]:
    async with db.read() as conn:
        (row,) = await SqlDiscoveryRepository(conn).capabilities([fqdn])
    return row.intents


READ = "Read a file as text. Returns the whole content of the file, line by line."
READ_NEW = "Fetch the bytes of a document. Streams large documents in pieces to the caller."
WRITE = "Write text to a file. Creates the file when it is missing and replaces it otherwise."


async def test_churned_views_leave_storage_at_a_full_sync_and_live_ones_stay(
    db: Database, registry: CapabilityRegistry
) -> None:
    tools = Tools(**{"files:read_file": READ, "files:write_file": WRITE, "clock:now": "Time."})
    clock = Clock()
    invoices = await learn(registry, "export the invoices of last month", "return 1", "b:inv")
    backup = await learn(registry, "compress the nightly backup", "return 2", "ops:backup")
    rotate = await learn(registry, "rotate the database credentials", "return 3", "ops:rot")
    earlier = ["tally bison sightings near lake 98", "tally moose sightings near lake 99"]
    await remember(db, invoices, *earlier)
    await remember(db, backup, "gzip yesterday's database dump archive")
    await remember(db, rotate, "renew expiring postgres passwords quarterly")
    service = service_for(db, tools, clock)
    await service.refresh()
    before = await text_rows(db)
    assert set(before) == await current_views(db, tools)

    # churn: a description edited, a tool gone, intents past the bound, archived, purged
    tools.set("files:read_file", READ_NEW)
    tools.set("files:write_file", None)
    fresh = [f"tally {animal} sightings near lake {n}" for n, animal in enumerate(
        ["zebra", "okapi", "tapir", "quokka", "axolotl", "pangolin", "narwhal", "ibex",
         "gecko", "lemur"])]  # fmt: skip
    await remember(db, invoices, *fresh)
    trimmed = set(earlier + fresh) - set(await kept_intents(db, invoices))
    # 13 remembered (the capture's own included), 8 kept: the oldest of the most alike go
    assert trimmed & set(earlier)
    life = CapabilityLifecycle(registry)
    await life.archive(ME, "ops:backup")
    await life.archive(ME, "ops:rot")
    await life.purge(ME, rotate)
    clock.advance()
    await service.refresh(force=True)

    after = await text_rows(db)
    live = await current_views(db, tools)
    assert set(after) == live
    gone = set(before) - set(after)
    for stale in (
        key_of(f"read file (files): {READ.split('. ')[0]}."),
        key_of(f"write file (files): {WRITE.split('. ')[0]}."),
        key_of("gzip yesterday's database dump archive"),
        key_of("renew expiring postgres passwords quarterly"),
        *(key_of(text) for text in trimmed & set(earlier)),
    ):
        assert stale in gone
    assert not {key_of(text) for text in trimmed} & set(after)
    assert key_of("now (clock): Time.") in after  # a tool that did not change
    assert key_of(f"read file (files): {READ_NEW.split('. ')[0]}.") in after

    # what is left finds the live items, and a restart embeds nothing but the query
    assert await found(service, fresh[-1]) == invoices  # the newest intent always stays
    restarted = Counting()
    again = service_for(db, tools, clock, restarted)
    assert await found(again, fresh[-1]) == invoices
    assert await found(again, "fetch the bytes of a document", "tool") == "files:read_file"
    assert restarted.texts == [fresh[-1], "fetch the bytes of a document"]


async def test_incremental_syncs_and_recent_rows_keep_their_vectors(
    db: Database, registry: CapabilityRegistry
) -> None:
    tools = Tools(**{"files:read_file": READ})
    clock = Clock()
    invoices = await learn(registry, "export the invoices of last month", "return 1", "b:inv")
    await remember(db, invoices, "download billing spreadsheet for accounting")
    service = service_for(db, tools, clock)
    await service.refresh()
    await remember(db, invoices, *(f"count {n} red kites over the ridge {n}" for n in range(9)))
    tools.set("files:read_file", READ_NEW)
    clock.advance()
    change = CapabilityChange(ME.org, ME.project, invoices, "intents_changed", "test")
    await service.capability_changed(change)
    await service.refresh()  # what a capture causes: an incremental sync
    churned = await text_rows(db)
    stale = set(churned) - await current_views(db, tools)
    assert key_of(f"read file (files): {READ.split('. ')[0]}.") in stale

    # another replica stored a view this one has not read yet: recent, it stays
    theirs = key_of("a text another replica just embedded")
    await plant(db, service.model_id, [theirs], clock.now)
    await service.refresh(force=True)  # the stale rows were stored before the grace: gone
    after = await text_rows(db)
    assert not stale & set(after)
    assert theirs in after
    assert set(after) == await current_views(db, tools) | {theirs}

    clock.advance()
    await service.refresh(force=True)
    assert theirs not in await text_rows(db)


async def test_rows_of_recent_churn_wait_for_the_grace_period(
    db: Database, registry: CapabilityRegistry
) -> None:
    tools = Tools(**{"files:read_file": READ, "files:write_file": WRITE})
    clock = Clock()
    service = service_for(db, tools, clock)
    await service.refresh()
    tools.set("files:write_file", None)
    clock.advance(PRUNE_GRACE / 2)
    await service.refresh(force=True)
    write_view = key_of(f"write file (files): {WRITE.split('. ')[0]}.")
    assert write_view in await text_rows(db)  # stored less than PRUNE_GRACE ago
    clock.advance(PRUNE_GRACE / 2 + timedelta(seconds=1))
    await service.refresh(force=True)
    assert write_view not in await text_rows(db)
    assert set(await text_rows(db)) == await current_views(db, tools)


async def test_only_unused_text_rows_go_whatever_their_model(
    db: Database, registry: CapabilityRegistry
) -> None:
    tools = Tools(**{"files:read_file": READ})
    clock = Clock()
    old = clock.now - timedelta(days=30)
    unused = [key_of("an intent of a capability purged long ago"), "text:%_\\ not a hash"]
    await plant(db, "minilm-l6-v2/onnx-int8/1", unused, old)
    await plant(db, "hashing/older/0", [key_of("a tool description of last year")], old)
    # not view rows: other prefixes, another case (LIKE is case-sensitive on both backends)
    others = ["TEXT:abc", "textual:abc", "text_abc", "tool:gone:tool", "capability:x.y.z"]
    await plant(db, "hashing/older/0", others, old)
    service = service_for(db, tools, clock)
    await service.refresh()
    rows = await text_rows(db)
    assert set(rows) == await current_views(db, tools)
    assert all(model == service.model_id for model in rows.values())
    v = discovery_vectors.c
    async with db.read() as conn:
        kept = set(await conn.scalars(sa.select(v.item_key).where(v.item_key.in_(others))))
    assert kept == set(others)


HUGE = " ".join(f"Sentence number {n} says what the giant tool does." for n in range(5000))
UNICODE = "Résumé naïve café — 東京の天気を調べる。 Ça marche 🚀 avec l'émoji. שלום עולם."
SURROGATE = "Lone \udcff surrogate and NUL \x00 inside. Second sentence is long enough."


async def test_hostile_texts_are_stored_and_pruned_like_any_other(
    db: Database, registry: CapabilityRegistry
) -> None:
    tools = Tools(**{
        "odd:empty": "", "odd:huge": HUGE, "odd:unicode": UNICODE, "odd:surrogate": SURROGATE,
        "files:read_file": READ,
    })  # fmt: skip
    clock = Clock()
    fqdn = await learn(registry, "export the invoices of last month", "return 1", "b:inv")
    cjk = "東京の天気を調べて 🌧️ すぐに"
    await remember(db, fqdn, cjk, "x" * 5000, "   ", "é" * 600)
    service = service_for(db, tools, clock)
    await service.refresh()
    rows = await text_rows(db)
    assert set(rows) == await current_views(db, tools)
    assert key_of("empty (odd)") in rows  # no description: its name with its server
    assert await found(service, cjk) == fqdn
    assert await found(service, "東京の天気を調べる", "tool") == "odd:unicode"

    for address in ("odd:empty", "odd:huge", "odd:unicode", "odd:surrogate"):
        tools.set(address, None)
    hostile = set(rows) - await current_views(db, tools)
    assert len(hostile) >= 8  # the huge description's sentences, the others' views
    clock.advance()
    await service.refresh(force=True)
    after = await text_rows(db)
    assert set(after) == await current_views(db, tools)
    assert not hostile & set(after)
    assert await found(service, cjk) == fqdn


async def test_many_keys_are_kept_and_deleted_in_batches(db: Database) -> None:
    now = utc_now()
    old = now - timedelta(days=1)
    live = {f"{n:064x}" for n in range(40_000)}  # past any bound-parameter limit
    stale = [view_key(f"{n:064x}") for n in range(40_000, 40_000 + SAVE_BATCH * 2 + 7)]
    kept = [view_key(f"{n:064x}") for n in range(2_000)]
    await plant(db, "hashing/x/1", kept + stale, old)
    resaved = stale[0]
    await plant(db, "hashing/x/1", [resaved], now)  # saved again after the sync began
    assert await prune_stored_views(lambda *, write: db.read() if not write else db.transaction(),
                                    live, now + PRUNE_GRACE) == len(stale) - 1  # fmt: skip
    assert set(await text_rows(db)) == set(kept) | {resaved}
    async with db.read() as conn:
        assert sorted(await SqlDiscoveryRepository(conn).keys(VIEW_PREFIX)) == sorted(
            [*kept, resaved]
        )
        with pytest.raises(ValueError, match="wildcards"):
            await SqlDiscoveryRepository(conn).keys("te%t")


async def test_a_failed_delete_is_logged_and_the_rows_wait(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    now = utc_now()
    keys = [key_of("nobody shows this text")]
    await plant(db, "hashing/x/1", keys, now - timedelta(days=1))

    def step(*, write: bool) -> AbstractAsyncContextManager[AsyncConnection]:
        if write:
            raise StorageError("Database error: disk I/O error")
        return db.read()

    assert await prune_stored_views(step, set(), now) == 0
    assert set(await text_rows(db)) == set(keys)
    assert "not deleted" in caplog.text
    assert await prune_stored_views(lambda *, write: db.transaction(), set(), now) == 1
    assert await text_rows(db) == {}
