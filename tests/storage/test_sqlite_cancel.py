"""A query cancelled mid-way on SQLite releases its connection: the process still exits, and
other writers do not wait for the cancelled transaction's lock."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
import sqlalchemy as sa

from pml.storage.database import Database
from pml.storage.sqlite_driver import StopOnceConnection

pytestmark = pytest.mark.anyio

# Three tasks write in a loop; the scope around them is cancelled while they are mid-query
# (anyio cancels again on every loop turn, which is what makes SQLAlchemy force-close a
# connection whose graceful close is still under way). Then the database is closed and
# ``asyncio.run`` must return.
CANCEL_MID_QUERY = """
import asyncio, sys
import anyio, sqlalchemy as sa
from pml.storage.database import Database

async def churn(db):
    while True:
        async with db.transaction() as conn:
            await conn.execute(sa.text("SELECT count(*) FROM capability_records"))
            await conn.execute(sa.text("SELECT 1"))

async def main(path, pause):
    db = await Database.open(f"sqlite:///{path}")
    async with anyio.create_task_group() as tasks:
        for _ in range(3):
            tasks.start_soon(churn, db)
        await anyio.sleep(pause)
        tasks.cancel_scope.cancel()
    with anyio.CancelScope(shield=True):
        await db.close()

asyncio.run(main(sys.argv[1], float(sys.argv[2])))
print("exited")
"""

# Counts to two million: a fraction of a second of work on the connection's thread, longer
# than the test waits before it cancels.
SLOW_QUERY = (
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 2000000)"
    " SELECT count(*) FROM c"
)


def test_a_process_whose_queries_were_cancelled_mid_way_exits(tmp_path: Path) -> None:
    # Before the fix every one of these runs hung for ever at the end of ``asyncio.run``.
    for run, pause in enumerate((0.0, 0.003, 0.011, 0.02, 0.037, 0.05)):
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-c", CANCEL_MID_QUERY, str(tmp_path / f"run{run}.db"), str(pause)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert (done.returncode, done.stdout.strip()) == (0, "exited"), done.stderr[-2000:]
        # A writer waiting on a lock the cancelled transaction kept would take 30 s.
        assert time.monotonic() - started < 20, f"run {run} took too long"


async def test_a_cancelled_transaction_does_not_keep_the_write_lock(tmp_path: Path) -> None:
    db = await Database.open(f"sqlite:///{tmp_path / 'pml.db'}")
    try:
        async with db.transaction() as conn:
            await conn.execute(sa.text("CREATE TABLE numbers (n INTEGER)"))
            await conn.execute(
                sa.text("INSERT INTO numbers VALUES (:n)"), [{"n": n} for n in range(500)]
            )
        holding = anyio.Event()

        async def hold_mid_read() -> None:
            async with db.transaction() as conn:  # BEGIN IMMEDIATE: the write lock
                rows = await conn.stream(sa.text("SELECT n FROM numbers"))
                await rows.fetchmany(1)  # a read left unfinished on the connection
                holding.set()
                await conn.execute(sa.text(SLOW_QUERY))  # cancelled while it runs

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(hold_mid_read)
            await holding.wait()
            await anyio.sleep(0.05)
            tasks.cancel_scope.cancel()

        started = time.monotonic()
        async with db.transaction() as conn:
            await conn.execute(sa.text("INSERT INTO numbers VALUES (500)"))
        waited = time.monotonic() - started
        async with db.read() as conn:
            count = (await conn.execute(sa.text("SELECT count(*) FROM numbers"))).scalar_one()
    finally:
        await db.close()
    assert waited < 10, f"the next writer waited {waited:.1f} s for the cancelled transaction"
    assert count == 501  # the cancelled transaction wrote nothing; the next one did


async def test_stopping_twice_then_closing_ends(tmp_path: Path) -> None:
    connection = await StopOnceConnection(str(tmp_path / "plain.db"))
    first = connection.stop()
    second = connection.stop()
    assert first is second
    with anyio.fail_after(5):  # aiosqlite's own close after a stop waited for ever
        await connection.close()
        await connection.close()
    assert first is not None
    assert first.done()


async def test_closing_while_a_stop_is_requested_ends(tmp_path: Path) -> None:
    connection = await StopOnceConnection(str(tmp_path / "plain.db"))
    await connection.execute("CREATE TABLE t (x INTEGER)")
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(connection.close)  # graceful close queued first
            await anyio.lowlevel.checkpoint()
            connection.stop()  # then the forced stop, as SQLAlchemy's terminate does
    with pytest.raises(ValueError, match=r"no active connection|Connection closed"):
        await connection.execute("SELECT 1")
