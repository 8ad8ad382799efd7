"""The upstream status table: what this gateway's pool reports to the catalog store.

    reporter = StatusReporter(CatalogStore(db), "host:1234", connections=lambda: pool_conns)
    await reporter.load_stored(conns)     # flags (and lazy servers' catalogs) at start
    reporter.changed("time")              # a server's state changed: reported soon
    await reporter.flush({"time"})        # report now (states, latencies, flags)

A background loop (``run``) reports what changed, at most every ``REPORT_INTERVAL_S``, and
call latencies as they move. Every other process reads the table (``pml status``, the
dashboard, ``/ready`` of other replicas); the stored flags are the truth, since a person may
accept a changed tool definition from any of them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Final

import anyio
import mcp_types
from sqlalchemy.exc import SQLAlchemyError

from pml.errors import PmlError
from pml.storage.catalog_repo import CatalogStore
from pml.upstream.base import ServerStatus
from pml.upstream.connection import ServerConnection

logger = logging.getLogger(__name__)

REPORT_INTERVAL_S: Final = 5.0  # how often call latencies reach the status table

Connections = Callable[[], Mapping[str, ServerConnection]]


class StatusReporter:
    """Reports the pool's servers to the catalog store (does nothing without a store)."""

    def __init__(
        self, catalog: CatalogStore | None, reporter_id: str, *, connections: Connections
    ) -> None:
        self._catalog = catalog
        self._reporter_id = reporter_id
        self._connections = connections
        self._dirty: set[str] = set()
        self._wake = anyio.Event()
        self._lock = anyio.Lock()

    def changed(self, server: str) -> None:
        """``server``'s state changed: report it at the next flush."""
        self._dirty.add(server)
        self._wake.set()

    async def record_catalog(
        self, conn: ServerConnection, tools: Sequence[mcp_types.Tool]
    ) -> tuple[str, ...]:
        """Store ``conn``'s fetched catalog; the tools the store flags on it now."""
        if self._catalog is None:
            return conn.flagged
        try:
            await self._catalog.record_catalog(conn.name, tools)
            flagged = await self._catalog.flagged(conn.name)
        except (PmlError, SQLAlchemyError) as error:
            logger.warning(
                "could not store the catalog of upstream server %r: %s", conn.name, error
            )
            return conn.flagged
        return tuple(flagged.get(conn.name, ()))

    async def load_stored(self, connections: Collection[ServerConnection]) -> None:
        """Give ``connections`` their stored flags, and lazy ones their stored catalog."""
        if self._catalog is None or not connections:
            return
        try:
            flagged = await self._catalog.flagged()
            for conn in connections:
                conn.flagged = tuple(flagged.get(conn.name, ()))
                if conn.lazy:
                    conn.stored_tools = await self._catalog.load_catalog(conn.name)
        except (PmlError, SQLAlchemyError) as error:
            logger.warning("could not load the stored upstream catalog: %s", error)

    async def run(self) -> None:
        """Report changes as they come, and latencies every ``REPORT_INTERVAL_S`` (forever)."""
        if self._catalog is None:
            return
        while True:
            with anyio.move_on_after(REPORT_INTERVAL_S):
                await self._wake.wait()
            self._wake = anyio.Event()
            await self.flush()

    async def flush(
        self, names: set[str] | None = None, *, final: Collection[ServerStatus] = ()
    ) -> None:
        """Report the changed servers and ``names`` now; ``final``: the last states of servers
        that left the pool (a reload removed them)."""
        if self._catalog is None:
            return
        async with self._lock:
            connections = self._connections()
            names = self._dirty | (names or set()) | self._recent_latencies(connections)
            self._dirty = set()
            names &= connections.keys()  # a server removed meanwhile has its final report
            if not names and not final:
                return
            try:
                # The stored catalog is the truth (a person may accept a definition anywhere).
                flagged = await self._catalog.flagged()
                for name in names:
                    connections[name].flagged = tuple(flagged.get(name, ()))
                statuses = [connections[name].status() for name in sorted(names)]
                await self._catalog.record_status([*final, *statuses], self._reporter_id)
            except (PmlError, SQLAlchemyError) as error:
                logger.warning("could not record the upstream server states: %s", error)

    @staticmethod
    def _recent_latencies(connections: Mapping[str, ServerConnection]) -> set[str]:
        fresh: set[str] = set()
        for name, conn in connections.items():
            if conn.last_latency_ms is not None and conn.last_latency_ms != conn.reported_latency:
                conn.reported_latency = conn.last_latency_ms
                fresh.add(name)
        return fresh
