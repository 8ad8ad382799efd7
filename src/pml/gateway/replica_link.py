"""What the replicas of one database tell each other about MCP sessions, and keeping the
session records fresh.

    link = ReplicaLink(db, McpSessionStore(db))
    async with link.running(on_notice, streaming, idle_s=1800):   # LISTEN + the touch loop
        link.used(session_hash)                        # still in use: touched within a minute
        await link.pass_on(session_hash, tag, reply)   # to the replica whose request it answers
        await link.ended(session_hash)                 # closed in the database, every replica told

Notices travel over PostgreSQL ``NOTIFY`` on ``pml_mcp_sessions``; on SQLite there is only
one server process, so there is nobody to tell. A notice lost while a replica's ``LISTEN``
connection is down costs at most one answer: the call that waited for it times out.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Final

import anyio

from pml.errors import InvalidInput, PmlError
from pml.gateway.session_wire import MAX_RELAYED_REPLY, Notice, Reply
from pml.storage.database import Database
from pml.storage.session_repo import McpSessionStore

logger = logging.getLogger(__name__)

SESSIONS_CHANNEL: Final = "pml_mcp_sessions"
TOUCH_INTERVAL_S: Final = 60.0
PURGE_INTERVAL_S: Final = 3600.0
LISTEN_START_S: Final = 10.0

OnNotice = Callable[[Notice], Awaitable[None]]


class ReplicaLink:
    """This replica's side of the conversation about sessions (see module)."""

    def __init__(
        self, db: Database, store: McpSessionStore, *, touch_interval_s: float = TOUCH_INTERVAL_S
    ) -> None:
        self._db = db
        self._store = store
        self._touch_interval_s = touch_interval_s
        self._used: set[str] = set()

    def used(self, session_hash: str) -> None:
        """The session served a request here: it stays open on every replica."""
        self._used.add(session_hash)

    async def pass_on(self, session_hash: str, tag: int, reply: Reply) -> None:
        """Send ``reply`` to the replica of ``tag``; InvalidInput when it is too large to
        travel, StorageError when PostgreSQL did not take it."""
        payload = Notice("reply", session_hash, tag, reply).payload()
        if len(payload.encode()) > MAX_RELAYED_REPLY:
            raise InvalidInput("This reply is too large to pass between replicas")
        self._used.add(session_hash)
        await self._db.notify(SESSIONS_CHANNEL, payload)

    async def ended(self, session_hash: str) -> None:
        """The client ended the session: closed in the database, every replica told."""
        try:
            await self._store.close(session_hash)
            await self._db.notify(SESSIONS_CHANNEL, Notice("closed", session_hash).payload())
        except PmlError as error:
            logger.warning("MCP session end not shared with the other replicas: %s", error)

    @asynccontextmanager
    async def running(
        self, on_notice: OnNotice, streaming: Callable[[], set[str]], *, idle_s: float | None
    ) -> AsyncGenerator[None]:
        """Hear the other replicas and keep records fresh while the block runs; ``streaming``
        names the sessions whose GET stream is open here (in use even without requests)."""

        async def noticed(payload: str) -> None:
            notice = Notice.parse(payload)
            if notice is None:
                logger.warning("ignored a session notice that is not PML's")
                return
            await on_notice(notice)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._keep_records, streaming, idle_s)
            if self._db.dialect == "postgresql":
                ready = anyio.Event()
                tasks.start_soon(self._listen, noticed, ready)
                with anyio.move_on_after(LISTEN_START_S):
                    await ready.wait()
            try:
                yield
            finally:
                tasks.cancel_scope.cancel()

    async def _listen(self, noticed: Callable[[str], Awaitable[None]], ready: anyio.Event) -> None:
        from pml.storage.listen import listen_forever

        async def relisten() -> None:
            logger.info(
                "session notices resumed; an answer sent meanwhile is lost (its call times out)"
            )

        dsn = self._db.listen_dsn()
        await listen_forever(dsn, SESSIONS_CHANNEL, noticed, relisten, ready=ready)

    async def _keep_records(self, streaming: Callable[[], set[str]], idle_s: float | None) -> None:
        """Sessions in use here stay open everywhere; ended ones are purged hourly."""
        since_purge = 0.0
        while True:
            await anyio.sleep(self._touch_interval_s)
            since_purge += self._touch_interval_s
            used, self._used = self._used | streaming(), set()
            try:
                if used:
                    await self._store.touch(used)
                if since_purge >= PURGE_INTERVAL_S and idle_s is not None:
                    since_purge = 0.0
                    await self._store.purge(idle_s=idle_s)
            except PmlError as error:
                logger.warning("MCP session records not refreshed: %s", error)
