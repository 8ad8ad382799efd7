"""Vectors stored by several processes at once: replicas of one database index the same
texts at start, and the second write of a key replaces the first, never a unique-key
violation (which used to escape the discovery index's background task and end a replica)."""

from __future__ import annotations

from datetime import UTC, datetime

import anyio
import numpy as np
import pytest
import sqlalchemy as sa

from pml.storage.database import Database
from pml.storage.discovery_repo import SAVE_BATCH, SqlDiscoveryRepository
from pml.storage.tables import discovery_vectors as vectors

pytestmark = pytest.mark.anyio

WHEN = datetime(2026, 11, 27, tzinfo=UTC)


def _rows(keys: list[str], value: float) -> list[tuple[str, str, bytes]]:
    return [(key, f"{value:064.1f}"[-64:], np.full(4, value, "<f4").tobytes()) for key in keys]


async def _stored(db: Database) -> dict[str, tuple[str, str, bytes]]:
    v = vectors.c
    async with db.read() as conn:
        result = await conn.execute(sa.select(v.item_key, v.model, v.text_hash, v.vector))
        return {key: (model, text_hash, bytes(blob)) for key, model, text_hash, blob in result}


async def test_saving_a_key_again_replaces_it(db: Database) -> None:
    keys = [f"text:{index:064x}" for index in range(SAVE_BATCH + 3)]  # more than one batch
    async with db.transaction() as conn:
        await SqlDiscoveryRepository(conn).save_vectors("m/1", _rows(keys, 1.0), WHEN)
    async with db.transaction() as conn:
        await SqlDiscoveryRepository(conn).save_vectors("m/2", _rows(keys[:2], 2.0), WHEN)
    stored = await _stored(db)
    assert len(stored) == len(keys)
    assert stored[keys[0]] == ("m/2", _rows(keys, 2.0)[0][1], np.full(4, 2.0, "<f4").tobytes())
    assert stored[keys[5]][0] == "m/1"


@pytest.mark.postgres
async def test_two_processes_writing_the_same_keys_at_once_both_succeed(postgres_url: str) -> None:
    keys = [f"text:{index:064x}" for index in range(20)]
    first, second = await Database.open(postgres_url), await Database.open(postgres_url)
    try:
        second_done = anyio.Event()

        async def second_writer() -> None:
            async with second.transaction() as conn:  # waits for the first one's row locks
                await SqlDiscoveryRepository(conn).save_vectors("m/1", _rows(keys, 2.0), WHEN)
            second_done.set()

        async with anyio.create_task_group() as tasks:
            async with first.transaction() as conn:
                await SqlDiscoveryRepository(conn).save_vectors("m/1", _rows(keys, 1.0), WHEN)
                tasks.start_soon(second_writer)
                await anyio.sleep(0.3)
                assert not second_done.is_set()  # blocked behind the uncommitted rows
            with anyio.fail_after(10):
                await second_done.wait()
        stored = await _stored(first)
        assert set(stored) == set(keys)
        assert {blob for _, _, blob in stored.values()} == {np.full(4, 2.0, "<f4").tobytes()}
    finally:
        await first.close()
        await second.close()
