"""PostgreSQL's statistics of the capability table follow a burst of creation, so a new
capability's name checks read one index entry, not the whole project."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator
from typing import Any

import asyncpg  # pyright: ignore[reportMissingTypeStubs]
import pytest
import sqlalchemy as sa

from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry
from pml.storage import fresh_stats
from pml.storage.database import Database
from pml.storage.fresh_stats import FIRST_MARK, table_grew

pytestmark = pytest.mark.anyio

SCOPE = Scope(org="acme", project="burst", user="ada")
NAME_CHECK = (
    "EXPLAIN SELECT 1 FROM capability_records WHERE archived_at IS NULL"
    " AND org = 'acme' AND project = 'burst' AND tool_name IN ('fs_a', 'fs_b')"
)


def _draft(n: int) -> CapabilityDraft:
    return CapabilityDraft(code=f"return {n}", tools_used=["filesystem:read"])


async def _plan(db: Database) -> str:
    async with db.engine.connect() as conn:
        return "\n".join(str(row[0]) for row in await conn.execute(sa.text(NAME_CHECK)))


async def _table_size_seen(db: Database) -> float:
    async with db.engine.connect() as conn:
        query = "SELECT reltuples FROM pg_class WHERE relname = 'capability_records'"
        return float((await conn.execute(sa.text(query))).scalar_one())


@pytest.fixture
async def pg_db(postgres_url: str) -> AsyncGenerator[Database]:
    """A PostgreSQL database opened as ``pml serve`` opens it."""
    db = await Database.open(postgres_url)
    yield db
    await db.close()


async def _connect(postgres_url: str, database: str | None = None) -> Any:
    """A plain asyncpg connection to the test's server (its database, or ``database``)."""
    url = sa.make_url(postgres_url)
    return await asyncpg.connect(  # pyright: ignore[reportUnknownMemberType]
        host=url.host, port=url.port or 5432, user=url.username, database=database or url.database
    )


@pytest.mark.postgres
async def test_a_burst_of_new_capabilities_keeps_the_name_check_on_its_index(
    postgres_url: str,
) -> None:
    db = await Database.open(postgres_url)
    try:
        registry = CapabilityRegistry(db)
        for n in range(FIRST_MARK + 50):
            assert (await registry.capture(SCOPE, _draft(n), latency_ms=1)).created
        assert await _table_size_seen(db) >= FIRST_MARK
        plan = await _plan(db)
        assert "org_project_tool_name" in plan, plan
        assert "Filter" not in plan, plan  # the names are looked up, not filtered out
    finally:
        await db.close()


@pytest.mark.postgres
async def test_the_table_is_analysed_at_marks_that_double(postgres_url: str) -> None:
    db = await Database.open(postgres_url)
    try:
        assert not await table_grew(db, FIRST_MARK - 1)
        assert await table_grew(db)  # the first mark
        assert not await table_grew(db, FIRST_MARK - 1)
        assert await table_grew(db)  # twice the first
        assert not await table_grew(db, 2 * FIRST_MARK - 1)
        assert await table_grew(db, 5 * FIRST_MARK)  # far past a mark: the next is beyond
        assert not await table_grew(db, 2 * FIRST_MARK)
    finally:
        await db.close()


async def test_sqlite_is_never_analysed(sqlite_url: str) -> None:
    db = await Database.open(sqlite_url)
    try:
        assert not await table_grew(db, 10 * FIRST_MARK)
    finally:
        await db.close()


@pytest.mark.postgres
async def test_a_database_that_went_away_is_logged_and_changes_nothing(
    pg_db: Database, postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    await table_grew(pg_db, FIRST_MARK - 1)
    admin = await _connect(postgres_url, "postgres")
    try:
        name = sa.make_url(postgres_url).database
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')  # pyright: ignore[reportUnknownMemberType]
    finally:
        await admin.close()  # pyright: ignore[reportUnknownMemberType]
    with caplog.at_level(logging.WARNING, logger=fresh_stats.__name__):
        assert not await table_grew(pg_db)
    assert "capability statistics not refreshed" in caplog.text


@pytest.mark.postgres
async def test_an_analysis_held_elsewhere_is_skipped_not_waited_for(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    db = await Database.open(postgres_url)
    other = await _connect(postgres_url)
    try:
        await table_grew(db, FIRST_MARK - 1)
        transaction = other.transaction()  # pyright: ignore[reportUnknownMemberType]
        await transaction.start()  # pyright: ignore[reportUnknownMemberType]
        # the lock an ANALYZE (autovacuum's, another replica's) holds on the table
        await other.execute("LOCK TABLE capability_records IN SHARE UPDATE EXCLUSIVE MODE")  # pyright: ignore[reportUnknownMemberType]
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger=fresh_stats.__name__):
            assert not await table_grew(db)
        assert time.monotonic() - started < 5
        assert "lock timeout" in caplog.text
        await transaction.rollback()  # pyright: ignore[reportUnknownMemberType]
        registry = CapabilityRegistry(db)  # the next creations go on as before
        assert (await registry.capture(SCOPE, _draft(1), latency_ms=1)).created
    finally:
        await other.close()  # pyright: ignore[reportUnknownMemberType]
        await db.close()
