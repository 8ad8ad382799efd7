"""Shared MCP sessions in the database: recorded, found while open, touched, closed, purged."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from pml.registry.scope import Scope
from pml.storage.database import Database
from pml.storage.session_repo import KEPT_AFTER_END, McpSessionStore, SessionRecord, mcp_sessions
from pml.storage.types import utc_now

pytestmark = pytest.mark.anyio

SCOPE = Scope("acme", "web", "alice")
CLIENT = {"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}}


def _record(hashed: str = "a" * 64, owner: str = "b" * 64) -> SessionRecord:
    return SessionRecord(hashed, owner, SCOPE, "2025-11-25", CLIENT)


async def _age(db: Database, hashed: str, *, seconds: float) -> None:
    """Pretend the session was last used ``seconds`` ago."""
    async with db.transaction() as conn:
        await conn.execute(
            sa.update(mcp_sessions)
            .where(mcp_sessions.c.session_hash == hashed)
            .values(last_seen_at=utc_now() - timedelta(seconds=seconds))
        )


async def test_a_recorded_session_is_found_with_its_handshake_and_owner(db: Database) -> None:
    store = McpSessionStore(db)
    await store.record(_record())

    found = await store.find("a" * 64, idle_s=60)

    assert found == _record()
    assert await store.find("c" * 64, idle_s=60) is None


async def test_a_session_unused_for_the_idle_time_is_not_found_until_touched(
    db: Database,
) -> None:
    store = McpSessionStore(db)
    await store.record(_record())
    await _age(db, "a" * 64, seconds=120)

    idle = await store.find("a" * 64, idle_s=60)
    never_idle = await store.find("a" * 64, idle_s=None)
    await store.touch(["a" * 64, "d" * 64])
    touched = await store.find("a" * 64, idle_s=60)

    assert idle is None
    assert never_idle == _record()
    assert touched == _record()


async def test_a_closed_session_is_not_found_and_stays_closed_when_touched(db: Database) -> None:
    store = McpSessionStore(db)
    await store.record(_record())
    await store.close("a" * 64)
    await store.touch(["a" * 64])

    assert await store.find("a" * 64, idle_s=None) is None


async def test_recording_a_session_again_updates_its_handshake(db: Database) -> None:
    store = McpSessionStore(db)
    await store.record(_record(owner="b" * 64))
    again = SessionRecord("a" * 64, "e" * 64, SCOPE, "2025-06-18", {"capabilities": {}})
    await store.record(again)

    assert await store.find("a" * 64, idle_s=60) == again


async def test_touching_many_sessions_at_once_works_in_batches(db: Database) -> None:
    store = McpSessionStore(db)
    hashes = [f"{index:064x}" for index in range(1200)]
    for hashed in hashes[:3]:
        await store.record(_record(hashed))
        await _age(db, hashed, seconds=120)

    await store.touch(hashes)

    assert [await store.find(hashed, idle_s=60) for hashed in hashes[:3]] == [
        _record(hashed) for hashed in hashes[:3]
    ]


async def test_purging_deletes_only_sessions_ended_more_than_a_day_ago(db: Database) -> None:
    store = McpSessionStore(db)
    for hashed in ("1" * 64, "2" * 64, "3" * 64):
        await store.record(_record(hashed))
    await _age(db, "1" * 64, seconds=60 + KEPT_AFTER_END.total_seconds() + 5)  # long idle
    await _age(db, "2" * 64, seconds=120)  # idle, recently

    purged = await store.purge(idle_s=60)

    assert purged == 1
    assert await store.find("1" * 64, idle_s=None) is None
    assert await store.find("2" * 64, idle_s=None) == _record("2" * 64)
    assert await store.find("3" * 64, idle_s=60) == _record("3" * 64)
