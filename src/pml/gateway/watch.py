"""Keeping capability tool lists fresh, and telling exactly the clients whose list changed.

    watcher = ToolListWatcher(catalog, notifier, db, origin=registry.origin)
    registry.on_change(watcher.registry_changed)     # changes made by this process
    watcher.on_remote_change(discovery.capability_changed)   # others' changes, every kind
    async with watcher.running():                    # other processes: LISTEN or a poll
        ...

A change in ``org.project`` drops that project's cached listings; every caller of that
project with an open session is listed again, and told ``tools/list_changed`` when its list
is not what it was (a rename in one tenant never disturbs another). Changes made by other
processes arrive through PostgreSQL ``LISTEN`` (other replicas, a ``pml cap rename`` on the
command line); on SQLite, where the other process can only be a CLI command on the same
file, a cheap watermark query over named capabilities once a second catches them.

A listing the token budget cut short (``[gateway] capability_tools_budget``) ranks the
capabilities by use, which changes with every run; those listings are rebuilt when usage
stats are refreshed (every ``RERANK_INTERVAL_S``, as discovery re-reads its usage counts),
never per call, and a client is told only when its listed set changed.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio
import sqlalchemy as sa

from pml.errors import PmlError
from pml.gateway.capability_tools import CapabilityToolCatalog, ToolListing
from pml.gateway.notify import ToolListNotifier
from pml.registry.changes import (
    CHANGES_CHANNEL,
    INTENTS_CHANGED,
    UNNAMED_CAPTURE,
    CapabilityChange,
    ChangeListener,
)
from pml.registry.scope import Scope
from pml.storage.database import Database
from pml.storage.tables import capability_records as records

logger = logging.getLogger(__name__)

POLL_INTERVAL_S: Final = 1.0
LISTEN_START_S: Final = 10.0
RERANK_INTERVAL_S: Final = 30.0
# Changes that never alter a tool listing: an unnamed capture, and a capability's remembered
# intents (``INTENTS_CHANGED``; listings show the record's own intent).
UNLISTED_KINDS: Final = frozenset({UNNAMED_CAPTURE, INTENTS_CHANGED})

# Over named capabilities only: unnamed captures (most writes) never change a listing, and
# a resync they caused would re-rank budget-cut listings by usage after every capture.
WATERMARK_STATEMENT = sa.select(sa.func.count(), sa.func.max(records.c.updated_at)).where(
    records.c.record_type == "capability", records.c.named
)


class ToolListWatcher:
    """Reacts to capability changes from any process (see module)."""

    def __init__(
        self,
        catalog: CapabilityToolCatalog,
        notifier: ToolListNotifier,
        db: Database,
        *,
        origin: str,
        poll_interval_s: float = POLL_INTERVAL_S,
        rerank_interval_s: float = RERANK_INTERVAL_S,
    ) -> None:
        self._catalog = catalog
        self._notifier = notifier
        self._db = db
        self._origin = origin
        self._poll_interval_s = poll_interval_s
        self._rerank_interval_s = rerank_interval_s
        self._lock = anyio.Lock()
        self._watermark: tuple[Any, ...] | None = None
        self._remote_listeners: list[ChangeListener] = []

    async def registry_changed(self, change: CapabilityChange) -> None:
        """A change this process committed (the registry's listener)."""
        if change.kind not in UNLISTED_KINDS:
            await self.project_changed(change.org, change.project)

    async def notified(self, payload: str) -> None:
        """A change another process announced (``NOTIFY``); this process's own echo is skipped."""
        change = CapabilityChange.from_payload(payload)
        if change is None:
            logger.warning("ignored a capability change notification that is not PML's")
            return
        if change.origin == self._origin:
            return
        for listener in self._remote_listeners:
            await listener(change)
        if change.kind not in UNLISTED_KINDS:
            await self.project_changed(change.org, change.project)

    def on_remote_change(self, listener: ChangeListener) -> None:
        """Also tell ``listener`` of every change another process announced (any kind)."""
        self._remote_listeners.append(listener)

    async def project_changed(self, org: str, project: str) -> None:
        """Re-list the callers of ``org.project``; notify those whose list changed."""
        async with self._lock:
            scopes = [s for s in self._notifier.scopes() if (s.org, s.project) == (org, project)]
            before = {scope: self._catalog.cached(scope) for scope in scopes}
            self._catalog.invalidate(org, project)
            for scope in scopes:
                await self._announce_if_changed(scope, before[scope])

    async def rerank(self) -> None:
        """Usage changed: rebuild the listings the budget cut short, notify whose set changed."""
        for org, project in sorted(self._catalog.truncated_projects()):
            await self.project_changed(org, project)

    async def resync(self) -> None:
        """Changes may have been missed: re-list every open caller, notify what differs."""
        async with self._lock:
            scopes = self._notifier.scopes()
            before = {scope: self._catalog.cached(scope) for scope in scopes}
            self._catalog.invalidate_all()
            for scope in scopes:
                await self._announce_if_changed(scope, before[scope])

    @asynccontextmanager
    async def running(self) -> AsyncGenerator[None]:
        """Follow other processes' changes while the block runs."""
        async with anyio.create_task_group() as tasks:
            if self._db.dialect == "postgresql":
                ready = anyio.Event()
                tasks.start_soon(self._listen, ready)
                with anyio.move_on_after(LISTEN_START_S):
                    await ready.wait()
            else:
                self._watermark = await self._read_watermark()
                tasks.start_soon(self._poll)
            tasks.start_soon(self._rerank_forever)
            try:
                yield
            finally:
                tasks.cancel_scope.cancel()

    async def _listen(self, ready: anyio.Event) -> None:
        from pml.storage.listen import listen_forever

        await listen_forever(
            self._db.listen_dsn(), CHANGES_CHANNEL, self.notified, self.resync, ready=ready
        )

    async def _poll(self) -> None:
        while True:
            await anyio.sleep(self._poll_interval_s)
            watermark = await self._read_watermark()
            if watermark is not None and watermark != self._watermark:
                if self._watermark is not None:
                    await self.resync()
                self._watermark = watermark

    async def _rerank_forever(self) -> None:
        while True:
            await anyio.sleep(self._rerank_interval_s)
            try:
                await self.rerank()
            except PmlError as error:  # the next round tries again
                logger.warning("capability tools not re-ranked: %s", error)

    async def _read_watermark(self) -> tuple[Any, ...] | None:
        """How many capabilities there are and the last change to any (None on failure)."""
        try:
            row = await self._db.first(WATERMARK_STATEMENT, {})
        except PmlError as error:
            logger.warning("capability change poll failed: %s", error)
            return None
        return tuple(row) if row is not None else None

    async def _announce_if_changed(self, scope: Scope, before: ToolListing | None) -> None:
        try:
            after = await self._catalog.listing(scope)
        except PmlError as error:
            logger.warning("capability tools of %s not re-listed: %s", scope.key, error)
            await self._notifier.tools_changed(scope)  # let the client list again itself
            return
        if before is None or before.fingerprint != after.fingerprint:
            await self._notifier.tools_changed(scope)
