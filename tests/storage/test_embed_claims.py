"""Claims on batches of texts to embed: one replica at a time holds a batch (PostgreSQL
advisory locks), a waiter gets it when the holder ends, and a claim that cannot be had in
time is this process's all the same (the work is done twice, never stopped)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from pml.storage import embed_claims
from pml.storage.database import Database
from pml.storage.embed_claims import claim_key, embed_claim

pytestmark = pytest.mark.anyio

MODEL = "minilm-l6-v2/onnx-int8/2"
KEYS = ["tool:fs:read", "tool:fs:write", "text:" + "a" * 64]


def test_the_key_is_the_same_for_the_same_batch_and_differs_otherwise() -> None:
    assert claim_key(MODEL, KEYS) == claim_key(MODEL, list(KEYS))
    assert claim_key(MODEL, KEYS) != claim_key(MODEL, KEYS[:2])
    assert claim_key(MODEL, KEYS) != claim_key("hashing/384/1", KEYS)
    assert claim_key(MODEL, ["a\nb"]) != claim_key(MODEL, ["a", "b"])  # no ambiguous joins
    assert -(2**63) <= claim_key(MODEL, ["\ud800 lone surrogate", "é", ""]) < 2**63


CHILD = """
import asyncio, sys
from pml.storage.database import Database
from pml.storage.embed_claims import embed_claim

async def main():
    db = await Database.open(sys.argv[1], migrate=False)
    async with embed_claim(db, sys.argv[2], sys.argv[3:], wait=False) as mine:
        print("held" if mine else "not mine", flush=True)
        sys.stdin.readline()  # held until the test says
    await db.close()

asyncio.run(main())
"""


@pytest.fixture
def holder(sqlite_url: str) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the claim on ``KEYS`` until a line is written to it."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, sqlite_url, MODEL, *KEYS],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "held"
        yield child
    finally:
        child.kill()
        child.wait()


async def test_on_a_sqlite_file_another_process_holds_a_batch_until_it_ends(
    sqlite_url: str, tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    db = await Database.open(sqlite_url)
    try:
        assert (tmp_path / "pml.db-embed-claims").exists()
        async with embed_claim(db, MODEL, KEYS, wait=False) as theirs:
            assert theirs is False
        async with embed_claim(db, MODEL, KEYS[:2], wait=False) as other:
            assert other is True  # another batch

        async def release_soon() -> None:
            await anyio.sleep(0.3)
            assert holder.stdin is not None
            holder.stdin.write("\n")
            holder.stdin.flush()

        started = time.monotonic()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(release_soon)
            async with embed_claim(db, MODEL, KEYS, wait=True) as waited:
                assert waited is True
                assert time.monotonic() - started >= 0.3
        async with embed_claim(db, MODEL, KEYS, wait=False) as again:
            assert again is True
    finally:
        await db.close()


async def test_a_file_claim_waited_for_past_its_limit_counts_as_this_processes(
    sqlite_url: str, holder: subprocess.Popen[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embed_claims, "WAIT_S", 0.5)
    db = await Database.open(sqlite_url)
    try:
        started = time.monotonic()
        async with embed_claim(db, MODEL, KEYS, wait=True) as mine:
            assert mine is True  # embedded here after all: done twice, never stopped
        assert 0.45 < time.monotonic() - started < 3
        assert holder.poll() is None  # the holder still holds it
    finally:
        await db.close()


async def test_claims_of_one_process_never_exclude_each_other_and_memory_has_none(
    sqlite_url: str,
) -> None:
    for url in (sqlite_url, "sqlite:///:memory:"):
        assert await _two_claims_at_once(url, wait=False) == (True, True)


async def test_a_claims_file_that_cannot_be_opened_leaves_the_work_here(
    sqlite_url: str, tmp_path: Path
) -> None:
    (tmp_path / "pml.db-embed-claims").mkdir()  # not a file: opening it fails, even as root
    assert await _two_claims_at_once(sqlite_url, wait=True) == (True, True)


async def _two_claims_at_once(url: str, *, wait: bool) -> tuple[bool, bool]:
    """The same batch claimed twice by this process, the second with ``wait``."""
    db = await Database.open(url)
    try:
        async with (
            embed_claim(db, MODEL, KEYS, wait=False) as first,
            embed_claim(db, MODEL, KEYS, wait=wait) as second,
        ):
            return first, second
    finally:
        await db.close()


@pytest.mark.postgres
async def test_one_replica_holds_a_batch_and_a_waiter_gets_it_when_the_holder_ends(
    postgres_url: str,
) -> None:
    first, second = await Database.open(postgres_url), await Database.open(postgres_url)
    try:
        async with embed_claim(first, MODEL, KEYS, wait=False) as mine:
            assert mine is True
            async with embed_claim(second, MODEL, KEYS, wait=False) as theirs:
                assert theirs is False  # held by the first
            async with embed_claim(second, MODEL, KEYS[:2], wait=False) as other:
                assert other is True  # another batch
        async with embed_claim(second, MODEL, KEYS, wait=False) as again:
            assert again is True  # released when the first's claim ended

        released_at: list[float] = []
        got_at = 0.0

        async def holder(ready: anyio.Event) -> None:
            async with embed_claim(first, MODEL, KEYS, wait=False) as held:
                assert held is True
                ready.set()
                await anyio.sleep(0.3)
                released_at.append(time.monotonic())

        async with anyio.create_task_group() as tasks:
            ready = anyio.Event()
            tasks.start_soon(holder, ready)
            await ready.wait()
            async with embed_claim(second, MODEL, KEYS, wait=True) as waited:
                got_at = time.monotonic()
                assert waited is True
        assert got_at >= released_at[0]
    finally:
        await first.close()
        await second.close()


@pytest.mark.postgres
async def test_a_wait_past_its_limit_counts_as_this_processes(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embed_claims, "WAIT_S", 1)
    first, second = await Database.open(postgres_url), await Database.open(postgres_url)
    try:
        async with embed_claim(first, MODEL, KEYS, wait=False) as held:
            assert held is True
            started = time.monotonic()
            async with embed_claim(second, MODEL, KEYS, wait=True) as mine:
                waited = time.monotonic() - started
                assert mine is True  # embedded here after all: done twice, never stopped
            assert 0.9 < waited < 5
        # the failed wait left nothing behind: the batch can be claimed at once
        async with embed_claim(second, MODEL, KEYS, wait=False) as again:
            assert again is True
    finally:
        await first.close()
        await second.close()


@pytest.mark.postgres
async def test_a_claim_is_released_when_the_body_fails_or_is_cancelled(postgres_url: str) -> None:
    first, second = await Database.open(postgres_url), await Database.open(postgres_url)
    try:
        with pytest.raises(RuntimeError, match="embedding failed"):
            async with embed_claim(first, MODEL, KEYS, wait=False):
                raise RuntimeError("embedding failed")
        with anyio.move_on_after(0.2):
            async with embed_claim(first, MODEL, KEYS, wait=False):
                await anyio.sleep(5)
        async with embed_claim(second, MODEL, KEYS, wait=False) as mine:
            assert mine is True
    finally:
        await first.close()
        await second.close()
