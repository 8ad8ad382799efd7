"""The triggers the schema relies on are all there at head, on both backends, whatever path
the database took to get there.

They keep capability history append-only and undeletable while referenced, version tags
immutable, and each project's count of active capabilities exact. On SQLite a migration that
rebuilds a table (alembic's ``batch_alter_table`` with a change SQLite cannot make in place)
drops that table's triggers without a word: this inventory is what notices.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy.exc import IntegrityError

from pml.errors import StorageError
from pml.registry.lifecycle import CapabilityLifecycle
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry
from pml.storage.capability_counts import capability_counts
from pml.storage.database import (
    Database,
    _alembic_config,  # pyright: ignore[reportPrivateUsage]
    head_revision,
)

pytestmark = pytest.mark.anyio

SCOPE = Scope(org="acme", project="main", user="ada")

# (table, trigger) pairs at head. PostgreSQL counts capabilities with one trigger for three
# events; SQLite needs one per event.
COMMON = {
    ("capability_versions", "capability_versions_append_only"),
    ("capability_versions", "capability_versions_kept"),
    ("capability_version_tags", "capability_version_tags_kept"),
    ("capability_version_tags", "capability_version_tags_immutable"),
}
EXPECTED = {
    "postgresql": COMMON | {("capability_records", "capability_records_counted")},
    "sqlite": COMMON
    | {
        ("capability_records", f"capability_records_counted_{event}")
        for event in ("inserted", "deleted", "left", "entered")
    },
}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def blank_url(request: pytest.FixtureRequest) -> str:
    fixture = "sqlite_url" if request.param == "sqlite" else "blank_postgres_url"
    return request.getfixturevalue(fixture)


def _draft(n: int) -> CapabilityDraft:
    return CapabilityDraft(code=f"return {n}", tools_used=["filesystem:read"])


async def _triggers(db: Database) -> set[tuple[str, str]]:
    if db.dialect == "sqlite":
        query = "SELECT tbl_name, name FROM sqlite_master WHERE type = 'trigger'"
    else:
        query = (
            "SELECT c.relname, t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE NOT t.tgisinternal AND n.nspname = current_schema()"
        )
    async with db.read() as conn:
        return {(str(table), str(name)) for table, name in await conn.execute(sa.text(query))}


async def _migrate(db: Database, direction: str, revision: str) -> None:
    move = command.downgrade if direction == "down" else command.upgrade
    async with db.transaction() as conn:
        await conn.run_sync(lambda sync: move(_alembic_config(sync), revision))


async def test_a_new_database_has_every_trigger(blank_url: str) -> None:
    db = await Database.open(blank_url)
    try:
        assert await _triggers(db) == EXPECTED[db.dialect]
    finally:
        await db.close()


@pytest.mark.parametrize("back_to", ["0010", "0011", "0015"])
async def test_every_trigger_survives_migrating_back_and_forth(
    blank_url: str, back_to: str
) -> None:
    # Each step down and up again runs the migrations that rebuild capability_records on
    # SQLite (0011's batch alteration) before or after the ones that add its triggers.
    db = await Database.open(blank_url)
    try:
        await _migrate(db, "down", back_to)
        assert ("capability_records", "capability_records_counted") not in await _triggers(db)
        await _migrate(db, "up", "head")
        assert await db.current_revision() == head_revision()
        assert await _triggers(db) == EXPECTED[db.dialect]
    finally:
        await db.close()


async def test_the_triggers_still_act_after_migrating_back_and_forth(blank_url: str) -> None:
    db = await Database.open(blank_url)
    try:
        await _migrate(db, "down", "0010")
        await _migrate(db, "up", "head")
        registry = CapabilityRegistry(db)
        made = [(await registry.capture(SCOPE, _draft(n), latency_ms=1)).record for n in range(3)]
        await CapabilityLifecycle(registry).archive(SCOPE, made[0].fqdn)
        async with db.read() as conn:
            active = (
                await conn.execute(
                    sa.select(capability_counts.c.active).where(
                        capability_counts.c.org == SCOPE.org,
                        capability_counts.c.project == SCOPE.project,
                    )
                )
            ).scalar_one()
        assert active == 2
        with pytest.raises((IntegrityError, StorageError), match="capability history"):
            async with db.transaction() as conn:
                await conn.execute(sa.text("DELETE FROM capability_versions"))
    finally:
        await db.close()
