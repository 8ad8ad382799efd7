"""SQLite connections that close cleanly when the task using them is cancelled mid-query.

aiosqlite runs each connection on a worker thread fed by a queue; ``stop()`` queues a
sentinel that ends the thread. SQLAlchemy's aiosqlite dialect closes a connection whose
task was cancelled mid-query in two steps: a graceful ``close()`` in a shielded task and,
if the caller is cancelled again meanwhile (anyio cancel scopes cancel again on every loop
turn), a forced ``stop()``. Two things went wrong there:

- aiosqlite 0.22's ``close()`` ends by calling ``stop()`` again and awaiting its answer, but
  the thread already left at the first sentinel. That shielded task waited for ever, and so
  did every ``asyncio.run`` shutdown after it: a ``pml`` command that had printed its answer
  never exited.
- Python's ``sqlite3`` closes a connection that still has an unfinished read by leaving it
  open until that cursor is collected, with its transaction and SQLite's write lock. Every
  other writer then waited out the 30 s busy timeout and failed with "database is locked".

Here ``stop()`` is idempotent (a second request gets the first one's answer, and a
``close()`` after a stop waits for the thread to end), and a connection rolls back before
it closes. ``attach(engine)`` makes every connection of an aiosqlite engine one of these.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from typing import Any

import aiosqlite
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

# aiosqlite.connect's default (rows fetched per step of an async iteration).
ITER_CHUNK_SIZE = 64


class RollingBackConnection(sqlite3.Connection):
    """A sqlite3 connection that ends its transaction before it closes."""

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.rollback()
        super().close()


class StopOnceConnection(aiosqlite.Connection):
    """An ``aiosqlite.Connection`` that stops its worker thread at most once."""

    def __init__(self, database: str, **sqlite_arguments: Any) -> None:
        def connector() -> sqlite3.Connection:
            return sqlite3.connect(database, factory=RollingBackConnection, **sqlite_arguments)

        super().__init__(connector, ITER_CHUNK_SIZE)
        self._stop_requested = False
        self._stopped: asyncio.Future[Any] | None = None
        worker = getattr(self, "_thread", None)  # aiosqlite 0.22 keeps its thread here
        if worker is not None:
            worker.daemon = True  # as SQLAlchemy's dialect does: an exit never waits on it

    def stop(self) -> asyncio.Future[Any] | None:
        """Stop the worker thread once; later calls return the first call's future."""
        if not self._stop_requested:
            self._stop_requested = True
            self._stopped = super().stop()  # pyright: ignore[reportUnknownMemberType]
        return self._stopped

    async def close(self) -> None:
        """Close the connection; after a stop, wait for the worker thread to end instead."""
        if not self._stop_requested:
            await super().close()
            return
        stopped = self._stopped
        if stopped is not None and stopped.get_loop() is asyncio.get_running_loop():
            await asyncio.shield(stopped)


def _connect_stop_once(database: str, **sqlite_arguments: Any) -> StopOnceConnection:
    return StopOnceConnection(database, **sqlite_arguments)


def _use_stop_once(_dialect: Any, _record: Any, _arguments: Any, parameters: Any) -> None:
    # The aiosqlite dialect builds the driver connection with ``async_creator_fn`` when the
    # connect parameters carry one, passing it the same database and sqlite3 arguments.
    parameters["async_creator_fn"] = _connect_stop_once


def attach(engine: AsyncEngine) -> None:
    """Open every connection of the aiosqlite ``engine`` as a ``StopOnceConnection``."""
    event.listen(engine.sync_engine, "do_connect", _use_stop_once)
