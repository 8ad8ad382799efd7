"""The grant stamp: cached grants are used without a database read only while no process
has changed grants (SQLite), and a revocation made elsewhere counts at the next call."""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, Mapping
from pathlib import Path
from typing import Any

import pytest

from pml.config import Settings
from pml.policy.grant_stamp import ROTATE_BYTES, FileStamp, grant_stamp_for
from pml.policy.grants import TRUST_S, GrantService
from pml.policy.permissions import CallFacts
from pml.registry.scope import Scope
from pml.storage.database import Database

pytestmark = pytest.mark.anyio

SCOPE = Scope("acme", "webapp", "erwan")
CALL = CallFacts.of("filesystem", "write_file", "file_write", {"path": "/w/a.txt"})


class Quiet:
    def emit(self, event: str, *, scope: Scope, details: Mapping[str, Any], **_: Any) -> None:
        pass


class CountingDatabase:
    """Counts the grant point reads a service makes (the rest goes to the real database)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.point_reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)

    async def first(self, statement: Any, params: dict[str, Any]) -> Any:
        self.point_reads += 1
        return await self.db.first(statement, params)


@pytest.fixture
async def database(sqlite_url: str) -> AsyncGenerator[Database]:
    db = await Database.open(sqlite_url)
    yield db
    await db.close()


def service(db: Any, stamp: FileStamp | None, clock: list[float] | None = None) -> GrantService:
    moment = clock if clock is not None else [0.0]
    return GrantService(db, Quiet(), policy_version="v1", stamp=stamp, monotonic=lambda: moment[0])


def test_the_stamp_changes_with_every_bump_and_survives_rotation(tmp_path: Path) -> None:
    stamp = FileStamp(tmp_path / "pml.db.grants")
    assert stamp.token() is None
    seen = set()
    for _ in range(ROTATE_BYTES + 10):
        stamp.bump()
        token = stamp.token()
        assert token not in seen
        seen.add(token)
    assert os.stat(stamp.path).st_size < ROTATE_BYTES
    assert oct(os.stat(stamp.path).st_mode & 0o777) == "0o600"


def test_an_unwritable_stamp_trusts_nothing_and_raises_nothing(tmp_path: Path) -> None:
    stamp = FileStamp(tmp_path / "missing" / "pml.db.grants")
    stamp.bump()
    assert stamp.token() is None


def test_the_stamp_sits_beside_an_sqlite_database_only(tmp_path: Path) -> None:
    sqlite = grant_stamp_for(Settings(database_url=f"sqlite:///{tmp_path / 'x.db'}"))
    assert sqlite is not None
    assert sqlite.path == tmp_path / "x.db.grants"
    assert grant_stamp_for(Settings(database_url="postgresql://u@h/db")) is None
    assert grant_stamp_for(Settings(database_url="sqlite:///:memory:")) is None


async def test_cached_grants_are_trusted_until_another_process_revokes(
    database: Database, tmp_path: Path
) -> None:
    path = tmp_path / "pml.db.grants"
    counting = CountingDatabase(database)
    here = service(counting, FileStamp(path))
    elsewhere = service(database, FileStamp(path))  # another process on the same file
    grant = await elsewhere.issue(
        SCOPE, capability="file_write", ttl_s=600, max_uses=None, decided_by="test"
    )
    assert (await here.find_and_consume(SCOPE, CALL))[0] == grant  # reads the grants
    for _ in range(5):
        assert (await here.find_and_consume(SCOPE, CALL))[0] is not None
    assert counting.point_reads == 0  # trusted from the cache
    await elsewhere.revoke(SCOPE, grant.id, decided_by="test")
    assert (await here.find_and_consume(SCOPE, CALL))[0] is None  # the very next call


async def test_trust_lasts_a_few_seconds_then_the_row_is_read(
    database: Database, tmp_path: Path
) -> None:
    clock = [100.0]
    counting = CountingDatabase(database)
    here = service(counting, FileStamp(tmp_path / "pml.db.grants"), clock)
    await here.issue(SCOPE, capability="file_write", ttl_s=600, max_uses=None, decided_by="t")
    await here.find_and_consume(SCOPE, CALL)
    clock[0] += TRUST_S + 0.1
    assert (await here.find_and_consume(SCOPE, CALL))[0] is not None
    assert counting.point_reads == 1


async def test_without_a_stamp_every_cached_grant_is_confirmed(database: Database) -> None:
    counting = CountingDatabase(database)
    here = service(counting, None)
    grant = await here.issue(
        SCOPE, capability="file_write", ttl_s=600, max_uses=None, decided_by="t"
    )
    await here.find_and_consume(SCOPE, CALL)
    for _ in range(3):
        await here.find_and_consume(SCOPE, CALL)
    assert counting.point_reads == 3
    await service(database, None).revoke(SCOPE, grant.id, decided_by="t")
    assert (await here.find_and_consume(SCOPE, CALL))[0] is None
