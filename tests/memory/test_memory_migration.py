"""Migration 0013: ``memories`` arrives on a database at 0012, which keeps its data, and
leaves again on downgrade."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from pml.memory.store import MemoryStore
from pml.registry.models import ListQuery
from pml.registry.scope import Scope
from pml.registry.service import CapabilityRegistry
from pml.storage.database import Database
from pml.storage.tables import capability_records
from samples import early_record

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def blank_url(request: pytest.FixtureRequest) -> str:
    fixture = "sqlite_url" if request.param == "sqlite" else "blank_postgres_url"
    return request.getfixturevalue(fixture)


async def _tables(db: Database) -> list[str]:
    async with db.read() as conn:
        return await conn.run_sync(lambda sync: sa.inspect(sync).get_table_names())


async def _indexes(db: Database) -> set[str]:
    async with db.read() as conn:
        found = await conn.run_sync(lambda sync: sa.inspect(sync).get_indexes("memories"))
    return {str(index["name"]) for index in found}


async def test_upgrading_from_0012_adds_memories_and_keeps_capabilities(blank_url: str) -> None:
    scope = Scope("acme", "webapp", "erwan")
    db = await Database.open(blank_url, migrate=False)
    try:
        await db.upgrade("0012")
        assert "memories" not in await _tables(db)
        registry = CapabilityRegistry(db)
        # the record as a 0012 gateway wrote it (today's code writes later columns too)
        async with db.transaction() as conn:
            await conn.execute(capability_records.insert().values(early_record("return 13", "x")))
        await db.upgrade()
        assert await db.current_revision() == "0016"
        assert "ix_memories_org_project_user_id_created_at" in await _indexes(db)
        fact, new = await MemoryStore(db).add(
            scope, "I prefer metric units", sensitivity="low", source="cli"
        )
        assert new
        assert await MemoryStore(db).recent(scope, 5) == [fact]
        assert (await registry.list(scope, ListQuery())).total == 1
    finally:
        await db.close()


async def test_downgrading_0013_drops_memories_and_upgrading_brings_them_back(
    blank_url: str,
) -> None:
    db = await Database.open(blank_url)
    try:
        await MemoryStore(db).add(
            Scope("acme", "webapp", "erwan"), "gone soon", sensitivity="low", source="cli"
        )
        from alembic import command

        from pml.storage.database import _alembic_config  # pyright: ignore[reportPrivateUsage]

        async with db.transaction() as conn:
            await conn.run_sync(lambda sync: command.downgrade(_alembic_config(sync), "0012"))
        assert "memories" not in await _tables(db)
        await db.upgrade()
        assert "memories" in await _tables(db)
    finally:
        await db.close()
