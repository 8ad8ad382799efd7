"""``capability_counts`` holds each project's active capabilities, whatever changes them: the
registry's captures, archives, restores and purges, and statements written by hand."""

from __future__ import annotations

import random

import anyio
import pytest
import sqlalchemy as sa

from pml.registry.lifecycle import CapabilityLifecycle
from pml.registry.models import RenameChanges
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry
from pml.storage.capability_counts import capability_counts
from pml.storage.capability_writes import count_capabilities
from pml.storage.database import Database
from pml.storage.tables import capability_records as records

pytestmark = pytest.mark.anyio

MAIN = Scope(org="acme", project="main", user="ada")
SIDE = Scope(org="acme", project="side", user="ada")


def _draft(n: int) -> CapabilityDraft:
    return CapabilityDraft(code=f"return {n}", tools_used=["filesystem:read"])


async def _kept(db: Database) -> dict[tuple[str, str], int]:
    async with db.read() as conn:
        rows = (await conn.execute(sa.select(capability_counts))).all()
    return {(row.org, row.project): row.active for row in rows if row.active}


async def _counted(db: Database) -> dict[tuple[str, str], int]:
    r = records.c
    query = (
        sa.select(r.org, r.project, sa.func.count())
        .where(r.archived_at.is_(None), r.record_type == "capability")
        .group_by(r.org, r.project)
    )
    async with db.read() as conn:
        return {(row[0], row[1]): int(row[2]) for row in (await conn.execute(query)).all()}


async def test_captures_archives_restores_and_purges_keep_the_count(db: Database) -> None:
    registry = CapabilityRegistry(db)
    lifecycle = CapabilityLifecycle(registry)
    base = await _counted(db)  # what the migrations seeded (MCP server records do not count)
    assert await _kept(db) == base
    made = [(await registry.capture(MAIN, _draft(n), latency_ms=1)).record for n in range(6)]
    await registry.capture(SIDE, _draft(0), latency_ms=1)
    await registry.capture(MAIN, _draft(0), latency_ms=1)  # known code: no new capability
    await registry.register_mcp_server(MAIN, "filesystem", code_url="npx fs")
    await registry.rename(MAIN, made[1].fqdn, RenameChanges(new_name="fs:renamed"))
    assert (await _kept(db))[("acme", "main")] == 6
    await lifecycle.archive(MAIN, made[0].fqdn)
    await lifecycle.archive(MAIN, made[2].fqdn)
    assert (await _kept(db))[("acme", "main")] == 4
    await lifecycle.restore(MAIN, made[2].fqdn)
    await lifecycle.purge(MAIN, made[0].fqdn)
    assert await _kept(db) == await _counted(db)
    assert (await _kept(db))[("acme", "main")] == 5
    async with db.read() as conn:
        assert await count_capabilities(conn, "acme", "main") == 5
        assert await count_capabilities(conn, "acme", "nowhere") == 0


async def test_statements_written_by_hand_keep_the_count(db: Database) -> None:
    registry = CapabilityRegistry(db)
    made = [(await registry.capture(MAIN, _draft(n), latency_ms=1)).record for n in range(4)]
    r = records.c
    async with db.transaction() as conn:  # moved to another project, then archived
        await conn.execute(records.update().where(r.fqdn == made[0].fqdn).values(project="side"))
        await conn.execute(
            records.update()
            .where(r.fqdn == made[1].fqdn)
            .values(archived_at=registry.now(), archived_by="ada")
        )
        await conn.execute(  # a change of the columns that count, to the same values
            records.update().where(r.fqdn == made[2].fqdn).values(org="acme", project="main")
        )
    assert await _kept(db) == await _counted(db)
    assert (await _kept(db))[("acme", "side")] == 1
    assert (await _kept(db))[("acme", "main")] == 2


async def test_a_random_mix_of_changes_always_agrees_with_a_count(db: Database) -> None:
    registry = CapabilityRegistry(db)
    lifecycle = CapabilityLifecycle(registry)
    chance = random.Random(16)
    active: dict[str, Scope] = {}
    archived: dict[str, Scope] = {}
    for step in range(40):
        move = chance.choice(["capture", "capture", "archive", "restore", "purge"])
        if move == "capture":
            scope = chance.choice([MAIN, SIDE])
            record = (await registry.capture(scope, _draft(step), latency_ms=1)).record
            active[record.fqdn] = scope
        elif move == "archive" and active:
            fqdn = chance.choice(sorted(active))
            await lifecycle.archive(active[fqdn], fqdn, force=True)
            archived[fqdn] = active.pop(fqdn)
        elif move == "restore" and archived:
            fqdn = chance.choice(sorted(archived))
            await lifecycle.restore(archived[fqdn], fqdn)
            active[fqdn] = archived.pop(fqdn)
        elif move == "purge" and archived:
            fqdn = chance.choice(sorted(archived))
            await lifecycle.purge(archived.pop(fqdn), fqdn)
        assert await _kept(db) == await _counted(db), f"after step {step} ({move})"


async def test_captures_at_the_same_moment_are_each_counted_once(db: Database) -> None:
    registry = CapabilityRegistry(db)

    async def capture(n: int) -> None:
        scope = MAIN if n % 3 else SIDE  # two projects, one of them new to the table
        await registry.capture(scope, _draft(n % 24), latency_ms=1)  # some code twice

    async with anyio.create_task_group() as tasks:
        for n in range(36):
            tasks.start_soon(capture, n)
    assert await _kept(db) == await _counted(db)
    assert (await _kept(db))[("acme", "side")] == 8  # 12 runs of 8 distinct snippets
