"""``capability_intents`` on a real SQLite file and a real PostgreSQL database: uses, the
meaning check, the bound, concurrent writers, and what discovery reads."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import anyio
import pytest
import sqlalchemy as sa
from sqlalchemy import event

from pml.discovery.embedder import HashingEmbedder
from pml.registry.intents import MAX_KEPT, IntentSighting, sighted
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry
from pml.storage.database import Database
from pml.storage.discovery_repo import SqlDiscoveryRepository
from pml.storage.intent_repo import SqlIntentRepository, capability_intents, remember_now
from pml.wiring import EmbeddedMeaning

pytestmark = pytest.mark.anyio

SCOPE = Scope("acme", "webapp", "ada")
T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)


async def _capability(registry: CapabilityRegistry, code: str = "return 1") -> str:
    result = await registry.capture(SCOPE, CapabilityDraft(code=code), latency_ms=1)
    return result.record.fqdn


def _seen(fqdn: str, text: str, minutes: float = 0, source: str = "reuse") -> IntentSighting:
    sighting = sighted(fqdn, text, source, "ada", T0 + timedelta(minutes=minutes))
    assert sighting is not None
    return sighting


async def _remember(
    db: Database, sightings: Sequence[IntentSighting], meaning: EmbeddedMeaning | None = None
) -> set[str]:
    async with db.transaction() as conn:
        return await SqlIntentRepository(conn, meaning).remember(sightings)


async def _intents(db: Database, fqdn: str) -> list[tuple[str, int, str]]:
    async with db.read() as conn:
        found = (await SqlIntentRepository(conn).of([fqdn], limit=100))[fqdn]
    return [(i.text, i.uses, i.source) for i in found]


async def test_a_new_text_adds_a_row_and_the_same_text_counts_a_use(
    db: Database, registry: CapabilityRegistry
) -> None:
    fqdn = await _capability(registry)
    assert await _remember(db, [_seen(fqdn, "read a.json", source="capture")]) == {fqdn}
    assert await _remember(db, [_seen(fqdn, "Read  A.JSON!", 1)]) == set()  # a use: no change
    assert await _remember(db, [_seen(fqdn, "parse the config", 2)]) == {fqdn}
    assert await _intents(db, fqdn) == [
        ("parse the config", 1, "reuse"),
        ("read a.json", 2, "capture"),
    ]
    async with db.read() as conn:
        (record,) = (await SqlIntentRepository(conn).of([fqdn]))[fqdn][1:]
    assert record.first_seen_at == T0
    assert record.last_seen_at == T0 + timedelta(minutes=1)
    assert record.created_by == "ada"


async def test_one_write_of_thousands_of_intents_keeps_every_one_and_counts_repeats(
    db: Database, registry: CapabilityRegistry
) -> None:
    # 4 500 rows of 8 values: more than one PostgreSQL statement's 32 767 parameters
    fqdns = [await _capability(registry, f"return {n}") for n in range(900)]
    first = [_seen(fqdn, f"intent {k} of {fqdn}") for fqdn in fqdns for k in range(5)]
    assert await _remember(db, first) == set(fqdns)
    again = [_seen(fqdn, f"intent 0 of {fqdn}", 1) for fqdn in fqdns[:10]]
    assert await _remember(db, again) == set()
    async with db.read() as conn:
        total = await conn.scalar(sa.select(sa.func.count()).select_from(capability_intents))
        uses = await conn.scalar(sa.select(sa.func.sum(capability_intents.c.uses)))
    assert (total, uses) == (4500, 4510)
    assert (await _intents(db, fqdns[0]))[0] == (f"intent 0 of {fqdns[0]}", 2, "reuse")


async def test_a_text_meaning_the_same_counts_a_use_of_the_kept_one(
    db: Database, registry: CapabilityRegistry
) -> None:
    fqdn = await _capability(registry)
    meaning = EmbeddedMeaning(HashingEmbedder())
    await _remember(db, [_seen(fqdn, "read the json config file")], meaning)
    # the same words in another order: another text, the same meaning (cosine 1.0)
    changed = await _remember(db, [_seen(fqdn, "the json config file read", 1)], meaning)
    assert changed == set()
    assert await _intents(db, fqdn) == [("read the json config file", 2, "reuse")]
    # something else is another intent
    await _remember(db, [_seen(fqdn, "delete old log files", 2)], meaning)
    assert len(await _intents(db, fqdn)) == 2


async def test_two_new_texts_of_one_meaning_in_one_batch_are_one_row(
    db: Database, registry: CapabilityRegistry
) -> None:
    fqdn = await _capability(registry)
    meaning = EmbeddedMeaning(HashingEmbedder())
    batch = [_seen(fqdn, "send the weekly report"), _seen(fqdn, "the weekly report send", 1)]
    assert await _remember(db, batch, meaning) == {fqdn}
    assert await _intents(db, fqdn) == [("send the weekly report", 2, "reuse")]


async def test_without_a_meaning_check_only_exact_duplicates_merge(
    db: Database, registry: CapabilityRegistry
) -> None:
    fqdn = await _capability(registry)
    await _remember(db, [_seen(fqdn, "read the json config file")])
    await _remember(db, [_seen(fqdn, "the json config file read", 1)])
    assert len(await _intents(db, fqdn)) == 2


async def test_a_failing_meaning_check_still_writes_everything(
    db: Database, registry: CapabilityRegistry
) -> None:
    class Broken:
        async def similarities(self, texts: Sequence[str]) -> list[list[float]]:
            raise RuntimeError("model crashed")

    class Wrong:
        async def similarities(self, texts: Sequence[str]) -> list[list[float]]:
            return [[1.0]]  # not one row per text

    fqdn = await _capability(registry)
    await _remember(db, [_seen(fqdn, "first intent")])
    for offset, check in enumerate((Broken(), Wrong())):
        async with db.transaction() as conn:
            await SqlIntentRepository(conn, check).remember([_seen(fqdn, f"another {offset}", 1)])
    assert len(await _intents(db, fqdn)) == 3


async def test_the_bound_keeps_the_most_recent_and_most_different(
    db: Database, registry: CapabilityRegistry
) -> None:
    fqdn = await _capability(registry)
    topics = ["invoices", "weather", "tickets", "backups", "emails", "metrics", "users", "logs"]
    for minute, topic in enumerate(topics):
        await _remember(db, [_seen(fqdn, f"summarise the {topic}", minute)])
    # a near copy of the oldest arrives: the oldest of that pair goes, the unique ones stay
    await _remember(db, [_seen(fqdn, "summarise the invoices now", 10)])
    texts = [text for text, _, _ in await _intents(db, fqdn)]
    assert len(texts) == MAX_KEPT
    assert texts[0] == "summarise the invoices now"
    assert "summarise the invoices" not in texts
    # many at once: still bounded, and the newest is kept
    batch = [_seen(fqdn, f"count words in chapter {n}", 20 + n) for n in range(30)]
    await _remember(db, batch)
    texts = [text for text, _, _ in await _intents(db, fqdn)]
    assert len(texts) == MAX_KEPT
    assert texts[0] == "count words in chapter 29"


async def test_a_sighting_of_a_capability_that_no_longer_exists_is_skipped(
    db: Database, registry: CapabilityRegistry
) -> None:
    fqdn = await _capability(registry)
    ghost = "acme.webapp.code.exec_deadbeef.dead"
    changed = await _remember(db, [_seen(ghost, "nobody"), _seen(fqdn, "somebody")])
    assert changed == {fqdn}
    async with db.read() as conn:
        rows = (await conn.execute(sa.select(capability_intents.c.fqdn))).scalars().all()
    assert rows == [fqdn]


async def test_hostile_texts_round_trip(db: Database, registry: CapabilityRegistry) -> None:
    fqdn = await _capability(registry)
    hostile = [
        "'; DROP TABLE capability_intents; --",
        'x" OR 1=1 --',
        "日本語のファイルを読む 📄",
        "read\x00the\x00file",
        "weather " * 1250,
    ]
    await _remember(db, [_seen(fqdn, text, n) for n, text in enumerate(hostile)])
    texts = [text for text, _, _ in await _intents(db, fqdn)]
    assert len(texts) == 5
    assert "'; DROP TABLE capability_intents; --" in texts
    assert "read the file" in texts
    assert all(len(text) <= 500 for text in texts)
    async with db.read() as conn:  # the table is still there
        count = (
            await conn.execute(sa.select(sa.func.count()).select_from(capability_intents))
        ).scalar_one()
    assert count == 5


async def test_concurrent_writers_of_the_same_text_lose_no_use(
    db: Database, registry: CapabilityRegistry
) -> None:
    fqdn = await _capability(registry)

    async def write(minute: int) -> None:
        await _remember(db, [_seen(fqdn, "sync the calendar", minute)])

    async with anyio.create_task_group() as group:
        for minute in range(12):
            group.start_soon(write, minute)
    assert await _intents(db, fqdn) == [("sync the calendar", 12, "reuse")]
    async with db.read() as conn:
        (record,) = (await SqlIntentRepository(conn).of([fqdn]))[fqdn]
    assert record.last_seen_at == T0 + timedelta(minutes=11)  # the latest, whatever the order


async def test_a_rename_description_is_remembered_in_its_transaction(
    db: Database, registry: CapabilityRegistry
) -> None:
    fqdn = await _capability(registry)
    async with db.transaction() as conn:
        assert await remember_now(conn, fqdn, "Reads the JSON config", "ada", T0)
        assert not await remember_now(conn, fqdn, "!!!", "ada", T0)
    assert await _intents(db, fqdn) == [("Reads the JSON config", 1, "rename")]


async def test_discovery_reads_intents_newest_first_with_one_query_per_batch(
    db: Database, registry: CapabilityRegistry
) -> None:
    first = await _capability(registry, "return 1")
    second = await _capability(registry, "return 2")
    for minute in range(MAX_KEPT + 3):  # readers see at most MAX_KEPT even past the bound
        await _remember(db, [_seen(first, f"intent number {minute}", minute)])
    statements: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        statements.append(statement)

    event.listen(db.engine.sync_engine, "before_cursor_execute", count)
    try:
        async with db.read() as conn:
            rows = await SqlDiscoveryRepository(conn).capabilities_since(None)
            named = await SqlDiscoveryRepository(conn).capabilities([first, second])
    finally:
        event.remove(db.engine.sync_engine, "before_cursor_execute", count)
    assert len([s for s in statements if "capability_intents" in s]) == 2
    by_fqdn = {row.fqdn: row for row in rows}
    assert by_fqdn[first].intents[0] == f"intent number {MAX_KEPT + 2}"
    assert len(by_fqdn[first].intents) == MAX_KEPT
    assert by_fqdn[second].intents == ()
    assert {row.fqdn: row.intents for row in named} == {r.fqdn: r.intents for r in rows}


async def test_capabilities_since_a_watermark_include_those_with_a_new_intent(
    db: Database, registry: CapabilityRegistry
) -> None:
    quiet = await _capability(registry, "return 1")
    asked = await _capability(registry, "return 2")
    async with db.read() as conn:
        rows = await SqlDiscoveryRepository(conn).capabilities_since(None)
    watermark = max(row.updated_at for row in rows)
    later = watermark + timedelta(seconds=5)
    await _remember(db, [IntentSighting(asked, "plan the sprint", "h1", "reuse", "ada", later)])
    async with db.read() as conn:
        rows = await SqlDiscoveryRepository(conn).capabilities_since(watermark)
    assert [(row.fqdn, row.intents) for row in rows] == [(asked, ("plan the sprint",))]
    assert rows[0].updated_at == later  # the watermark moves past it: read once
    async with db.read() as conn:
        assert await SqlDiscoveryRepository(conn).capabilities_since(later) == []
    # a use of a kept intent is not a change
    await _remember(
        db,
        [
            IntentSighting(
                asked, "plan the sprint", "h1", "reuse", "ada", later + timedelta(seconds=5)
            )
        ],
    )
    async with db.read() as conn:
        assert await SqlDiscoveryRepository(conn).capabilities_since(later) == []
    del quiet
