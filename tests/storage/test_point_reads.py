"""PostgreSQL point reads straight through the driver (``storage/point_reads.py``), on a real
database: the same rows and values as SQLAlchemy's path, which statements take it, hostile
values, every connection of its own in use, broken connections, and closing."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest
import sqlalchemy as sa

from pml.errors import StorageError
from pml.gateway.keys import ApiKeys, hash_key
from pml.gateway.watch import WATERMARK_STATEMENT
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry
from pml.storage.capability_queries import RESOLVE_STATEMENT
from pml.storage.capability_repo import BY_CODE_HASH_STATEMENT
from pml.storage.database import Database
from pml.storage.keys_repo import BY_HASH_STATEMENT
from pml.storage.point_reads import MAX_CONNECTIONS, MAX_STATEMENTS, PostgresPointReads
from pml.storage.tables import capability_records

pytestmark = pytest.mark.anyio

SCOPE = Scope("acme", "webapp", "ada")
HOSTILE = ["", "' OR 1=1 --", "x" * 10_000, "héllo wörld ✓ 🎉", "a\nb\tc", "$1", "%s", "\\"]


@pytest.fixture
async def db(postgres_url: str) -> AsyncGenerator[Database]:
    database = await Database.open(postgres_url)
    yield database
    await database.close()


async def _through_sqlalchemy(db: Database, statement: Any, params: dict[str, Any]) -> Any:
    async with db.read() as conn:
        return (await conn.execute(statement, params)).first()


async def _key(db: Database) -> tuple[str, str]:
    key, record = await ApiKeys(db).create("acme", "webapp", "ada")
    return key, record.id


async def test_the_hot_statements_take_the_driver_and_give_what_sqlalchemy_gives(
    db: Database,
) -> None:
    reads = PostgresPointReads(db.engine)
    key, key_id = await _key(db)
    created = await CapabilityRegistry(db).capture(
        SCOPE, CapabilityDraft(code="return 1", intent="one"), latency_ms=1
    )
    owner = {"org": "acme", "project": "webapp", "code_hash": created.record.code_hash}
    records = capability_records.c
    labelled = sa.select(records.fqdn.label("name"), records.usage_count).where(
        records.code_hash == sa.bindparam("code_hash", type_=sa.String())
    )
    cases = [
        (BY_HASH_STATEMENT, {"key_hash": hash_key(key)}),
        (BY_CODE_HASH_STATEMENT, owner),
        (labelled, {"code_hash": created.record.code_hash}),
    ]
    try:
        for statement, params in cases:
            assert reads.accepts(statement)
            done, row = await reads.read(statement, params)
            expected = await _through_sqlalchemy(db, statement, params)
            assert done
            assert row is not None
            assert expected is not None
            assert tuple(row) == tuple(expected)
            assert [type(value) for value in row] == [type(value) for value in expected]
            assert dict(row._mapping) == dict(expected._mapping)  # pyright: ignore[reportPrivateUsage]
        done, row = await reads.read(BY_HASH_STATEMENT, {"key_hash": hash_key(key)})
        assert row is not None
        assert row.id == key_id
        assert row.org == "acme"
        assert row.created_at.tzinfo is not None
        assert row.created_at <= datetime.now(UTC)
        assert await reads.read(BY_HASH_STATEMENT, {"key_hash": "0" * 64}) == (True, None)
    finally:
        await reads.close()


async def test_statements_needing_more_of_sqlalchemy_keep_its_path(db: Database) -> None:
    reads = PostgresPointReads(db.engine)
    records = capability_records.c
    assert not reads.accepts(RESOLVE_STATEMENT)  # JSON columns
    assert not reads.accepts(sa.select(records.fqdn).where(records.fqdn.in_(["a", "b"])))
    assert not reads.accepts(sa.select(records.tools_used))
    assert not reads.accepts(sa.update(capability_records).values(named=True))
    assert not reads.accepts(WATERMARK_STATEMENT)  # count(*): SQLAlchemy names it count_1
    assert not reads.accepts(sa.select(records.fqdn, records.fqdn))
    constant = sa.select(records.fqdn).where(
        records.record_type == "capability", records.org == sa.bindparam("org", type_=sa.String())
    )
    assert reads.accepts(constant)
    await reads.close()


async def test_statements_built_with_their_values_never_crowd_out_the_constant_ones(
    db: Database,
) -> None:
    reads = PostgresPointReads(db.engine)
    records = capability_records.c
    for n in range(MAX_STATEMENTS + 5):  # as a caller building its query each time would
        assert not reads.accepts(sa.select(records.fqdn).where(records.fqdn == f"f{n}"))
    assert reads.accepts(BY_HASH_STATEMENT)
    assert reads.accepts(BY_CODE_HASH_STATEMENT)
    await reads.close()


@pytest.mark.parametrize("value", HOSTILE)
async def test_hostile_values_are_values(db: Database, value: str) -> None:
    key, _ = await _key(db)
    row = await db.first(BY_HASH_STATEMENT, {"key_hash": value})
    assert row is None
    assert (await db.first(BY_HASH_STATEMENT, {"key_hash": hash_key(key)})) is not None


async def test_a_value_the_server_refuses_is_a_storage_error_and_reads_go_on(db: Database) -> None:
    key, _ = await _key(db)
    with pytest.raises(StorageError, match="Database error"):
        await db.first(BY_HASH_STATEMENT, {"key_hash": "nul\x00byte"})
    with pytest.raises(StorageError):
        await db.first(BY_HASH_STATEMENT, {"key_hash": 42})
    assert (await db.first(BY_HASH_STATEMENT, {"key_hash": hash_key(key)})) is not None


async def test_many_reads_at_once_use_at_most_its_connections_and_all_get_their_row(
    db: Database,
) -> None:
    key, key_id = await _key(db)
    reads = PostgresPointReads(db.engine)
    assert reads.accepts(BY_HASH_STATEMENT)
    found: list[Any] = []

    async def one() -> None:
        found.append(await reads.read(BY_HASH_STATEMENT, {"key_hash": hash_key(key)}))

    async with anyio.create_task_group() as group:
        for _ in range(MAX_CONNECTIONS * 5):
            group.start_soon(one)
    assert reads.connections <= MAX_CONNECTIONS
    served = [row for done, row in found if done]
    assert served
    assert all(row is not None and row.id == key_id for row in served)
    # those that found every connection lent were handed back for SQLAlchemy to read
    assert all(row is None for done, row in found if not done)
    await reads.close()
    assert reads.connections == 0


async def test_broken_connections_hand_the_read_over_and_the_next_ones_reconnect(
    db: Database,
) -> None:
    key, key_id = await _key(db)
    assert (await db.first(BY_HASH_STATEMENT, {"key_hash": hash_key(key)})) is not None
    async with db.read() as conn:  # every other backend of this database, ours included
        await conn.execute(
            sa.text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        )
    for _ in range(3):
        try:
            row = await db.first(BY_HASH_STATEMENT, {"key_hash": hash_key(key)})
        except StorageError:  # SQLAlchemy's own pooled connection died too: said once
            continue
        assert row is not None
        assert row.id == key_id


async def test_after_close_reads_go_through_sqlalchemy(db: Database) -> None:
    key, key_id = await _key(db)
    reads = PostgresPointReads(db.engine)
    assert reads.accepts(BY_HASH_STATEMENT)
    assert (await reads.read(BY_HASH_STATEMENT, {"key_hash": hash_key(key)}))[0]
    await reads.close()
    assert reads.connections == 0
    assert await reads.read(BY_HASH_STATEMENT, {"key_hash": hash_key(key)}) == (False, None)
    row = await db.first(BY_HASH_STATEMENT, {"key_hash": hash_key(key)})
    assert row is not None
    assert row.id == key_id
