"""The upstream pool: one reused MCP client session per configured server.

    pool = ClientPool({"time": ServerSettings(command="mcp-server-time")},
                      settings=UpstreamSettings(call_timeout_s=10), catalog=CatalogStore(db))
    async with pool:                                   # or: await pool.start() ... pool.stop()
        tools = await pool.list_tools()                # [UpstreamTool(server="time", ...), ...]
        result = await pool.call_tool("time", "get_current_time", {"timezone": "UTC"})
        await pool.reconfigure({"time": ServerSettings(command="mcp-server-time"),
                                "git": ServerSettings(command="mcp-server-git")})  # git starts

``start()`` starts every non-lazy server in parallel (a broken one is ``failed``, never
stopping the others); lazy ones start on their first call and stop after ``idle_timeout_s``.
Sessions live in supervisor tasks hosted by a task of the pool's own (``start()`` and
``stop()`` may run in different tasks); a catalog store gets catalogs and state changes.
``reconfigure()`` (a reload) starts added servers, stops removed ones and restarts changed
ones (calls wait for the new session), leaving the others alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import AsyncGenerator, Callable, Collection, Coroutine, Mapping, Sequence
from typing import Any, Final

import anyio
import anyio.abc
import mcp_types
from mcp import Client

from pml.config import UpstreamSettings
from pml.errors import (
    InvalidInput,
    UpstreamUnavailable,
)
from pml.storage.catalog_repo import CatalogStore
from pml.upstream.base import ServerStatus, ToolsChangedListener, UpstreamTool
from pml.upstream.calls import Result, Send, raw_call, send_call, typed_call
from pml.upstream.connection import ServerConnection
from pml.upstream.events import EventsSlot, UpstreamEvents
from pml.upstream.messages import (
    check_arguments,
    check_timeout,
    tool_elsewhere,
    unknown_server,
    unknown_tool,
)
from pml.upstream.results import check_result_depth
from pml.upstream.session import ConnectionHooks, PoolChanges, Run
from pml.upstream.status_report import StatusReporter
from pml.upstream.transport import UpstreamTarget

logger = logging.getLogger(__name__)

STOP_GRACE_S: Final = 10.0  # then sessions still closing are cancelled (stdio still kills)


class ClientPool:
    """``UpstreamPool`` over the official MCP client: stdio, streamable HTTP, in-process."""

    def __init__(
        self,
        servers: Mapping[str, UpstreamTarget],
        *,
        settings: UpstreamSettings | None = None,
        catalog: CatalogStore | None = None,
        reporter_id: str | None = None,
    ) -> None:
        self._settings = settings if settings is not None else UpstreamSettings()
        self._events = EventsSlot()
        reporter = reporter_id or f"{socket.gethostname()}:{os.getpid()}"
        self._reporter = StatusReporter(catalog, reporter, connections=lambda: self._connections)
        self._hooks = ConnectionHooks(
            spawn=self._spawn,
            status_changed=self._reporter.changed,
            catalog_fetched=self._catalog_fetched,
            tools_changed=self._tools_changed,
            notification=self._events.notification,
            client_callbacks=self._events.client_callbacks,
        )
        self._connections: dict[str, ServerConnection] = {
            name: ServerConnection(name, target, self._settings, self._hooks)
            for name, target in sorted(servers.items())
        }
        self._retiring: set[ServerConnection] = set()  # removed or replaced, still closing
        self._restarting: dict[str, anyio.Event] = {}  # calls wait until the new one starts
        self._quiet: set[str] = set()  # reconfigure announces these servers' tools itself
        self._listeners: list[ToolsChangedListener] = []
        self._phase = "new"  # new → starting → running → stopping → stopped
        self._host: asyncio.Task[None] | None = None
        self._sessions: anyio.abc.TaskGroup | None = None
        self._stop_requested = anyio.Event()
        self._host_done = anyio.Event()
        self._changing = anyio.Lock()  # start() and each reconfigure() run one at a time

    async def __aenter__(self) -> ClientPool:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self, *, wait: bool = True) -> None:
        """Start every non-lazy, enabled server in parallel (see ``UpstreamPool.start``);
        with ``wait=False`` servers that join later are announced as tool changes."""
        if self._phase != "new":
            if self._phase in ("stopping", "stopped"):
                raise RuntimeError("a stopped ClientPool cannot be started again")
            return
        self._phase = "starting"
        async with self._changing:
            await self._reporter.load_stored(list(self._connections.values()))
            ready = anyio.Event()
            self._host = asyncio.get_running_loop().create_task(self._run_host(ready))
            await ready.wait()
            runs: list[Run] = []
            for conn in self._connections.values():
                conn.activate()
                if not conn.lazy and not conn.disabled:
                    runs.append(conn.begin_start())
            if not wait:
                self._phase = "running"
                return
            for run in runs:
                await run.settled.wait()
            if self._phase == "starting":
                self._phase = "running"
        await self._reporter.flush(set(self._connections))

    async def settled(self, timeout_s: float, names: Collection[str] | None = None) -> list[str]:
        """Wait for servers still starting (see ``UpstreamPool.settled``)."""
        with anyio.move_on_after(max(0.0, timeout_s)):
            while waiting := self.starting(names):
                await self._connections[waiting[0]].wait_settled()
        return self.starting(names)

    def starting(self, names: Collection[str] | None = None) -> list[str]:
        """The servers (among ``names``, if given) whose session is starting now."""
        return [
            name
            for name, conn in self._connections.items()
            if conn.state == "starting" and (names is None or name in names)
        ]

    @contextlib.asynccontextmanager
    async def session(self, server: str) -> AsyncGenerator[Client]:
        """The live client of ``server`` (see ``UpstreamPool.session``)."""
        conn = self._connections.get(server) if _is_text(server) else None
        if conn is None:
            raise unknown_server(server, list(self._connections))
        run = await conn.acquire()
        try:
            yield run.client
        finally:
            conn.release(run, None)

    async def stop(self) -> None:
        """Close every session and stop every child process (idempotent)."""
        if self._phase in ("stopping", "stopped"):
            await self._host_done.wait()
            return
        started = self._host is not None
        self._phase = "stopping"
        if not started:
            for conn in self._every_connection():
                conn.request_stop()
            self._host_done.set()
        else:
            self._stop_requested.set()
            await self._host_done.wait()
        self._phase = "stopped"
        if started:
            await self._reporter.flush(set(self._connections))

    def targets(self) -> dict[str, UpstreamTarget]:
        """What each server is configured as now, by name."""
        return {name: conn.target for name, conn in self._connections.items()}

    async def reconfigure(
        self, servers: Mapping[str, UpstreamTarget], *, settings: UpstreamSettings | None = None
    ) -> PoolChanges:
        """Serve exactly ``servers`` from now on, with ``settings``' timeouts; returns once
        every start has settled (a server that fails to start is ``failed``, as at start)."""
        if self._phase in ("stopping", "stopped"):
            raise UpstreamUnavailable("the upstream pool is stopped")
        async with self._changing:
            if settings is not None and settings != self._settings:
                self._settings = settings
                for conn in self._connections.values():
                    conn.retune(settings)
            old = self._connections
            added = sorted(servers.keys() - old.keys())
            removed = sorted(old.keys() - servers.keys())
            restarted = sorted(
                name for name in servers.keys() & old.keys() if old[name].target != servers[name]
            )
            fresh = {
                name: ServerConnection(name, servers[name], self._settings, self._hooks)
                for name in [*added, *restarted]
            }
            await self._reporter.load_stored(list(fresh.values()))
            before = {name: old[name].known_tools() for name in [*removed, *restarted]}
            leaving = [old[name] for name in [*removed, *restarted]]
            # From here to the first await: the pool switches over as one step.
            staying = {name: conn for name, conn in old.items() if name in servers}
            self._connections = dict(sorted({**staying, **fresh}.items()))
            self._retiring.update(leaving)
            self._quiet.update(fresh)
            running = self._phase == "running"
            for name in restarted:
                self._restarting[name] = anyio.Event()
            for conn in leaving:
                conn.request_stop()
            try:
                async with anyio.create_task_group() as group:
                    for conn in fresh.values():
                        if running:
                            conn.activate()
                        replaced = old.get(conn.name)
                        group.start_soon(self._switch, replaced, conn if running else None)
                    for name in removed:
                        group.start_soon(self._switch, old[name], None)
            finally:
                self._quiet.difference_update(fresh)
        changes = PoolChanges(
            added=tuple(added),
            removed=tuple(removed),
            restarted=tuple(restarted),
            failed=tuple(name for name, conn in fresh.items() if conn.state == "failed"),
        )
        final = [old[name].status() for name in removed]
        await self._reporter.flush(set(fresh), final=final)
        for name in [*added, *removed, *restarted]:
            now = self._connections[name].known_tools() if name in self._connections else []
            if now != before.get(name, []):
                await self._tools_changed(name)
        return changes

    async def _switch(self, old: ServerConnection | None, new: ServerConnection | None) -> None:
        """Close ``old`` (if any), then start ``new`` (if any, unless lazy or disabled)."""
        run: Run | None = None
        try:
            if old is not None:
                if await old.close(STOP_GRACE_S):
                    self._retiring.discard(old)
                else:
                    logger.warning("upstream server %r: its old session did not close", old.name)
        finally:
            if new is not None and not new.lazy and not new.disabled:
                with contextlib.suppress(UpstreamUnavailable):  # the pool is stopping meanwhile
                    run = new.begin_start()
            if old is not None and (gate := self._restarting.pop(old.name, None)) is not None:
                gate.set()  # calls waiting for the restart find the new session starting
        if run is not None:
            await run.settled.wait()

    async def _run_host(self, ready: anyio.Event) -> None:
        try:
            async with anyio.create_task_group() as host:
                host.start_soon(self._reporter.run)
                with anyio.CancelScope() as grace:
                    async with anyio.create_task_group() as sessions:
                        self._sessions = sessions
                        ready.set()
                        await self._stop_requested.wait()
                        for conn in self._every_connection():
                            conn.request_stop()
                        grace.deadline = anyio.current_time() + STOP_GRACE_S
                self._sessions = None
                host.cancel_scope.cancel()
        except Exception:  # the pool's top-level task: log, never lose the stop
            logger.exception("the upstream pool's host task failed")
        finally:
            self._sessions = None
            ready.set()
            self._host_done.set()

    def _every_connection(self) -> list[ServerConnection]:
        return [*self._connections.values(), *self._retiring]

    def _spawn(self, supervise: Callable[[], Coroutine[Any, Any, None]]) -> None:
        if self._sessions is None:
            raise UpstreamUnavailable("the upstream pool is not running")
        self._sessions.start_soon(supervise)

    # -- the UpstreamPool surface ------------------------------------------------------------

    async def list_tools(self) -> list[UpstreamTool]:
        """Every tool of every enabled server (lazy servers not started: the stored catalog)."""
        return [
            UpstreamTool(name, tool)
            for name, conn in self._connections.items()
            for tool in conn.known_tools()
        ]

    async def call_tool(
        self,
        server: str,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout_s: float | None = None,
    ) -> mcp_types.CallToolResult:
        """Call one tool and return the server's result unchanged (see ``UpstreamPool``)."""
        return await self._call(server, tool, arguments, timeout_s, typed_call)

    async def call_tool_raw(
        self,
        server: str,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """``call_tool`` returning the result as the server's JSON object (see ``UpstreamPool``)."""
        return await self._call(server, tool, arguments, timeout_s, raw_call)

    async def _call(
        self,
        server: str,
        tool: str,
        arguments: Mapping[str, Any] | None,
        timeout_s: float | None,
        send: Send[Result],
    ) -> Result:
        conn = None
        if _is_text(server):
            restarting = self._restarting.get(server) if self._restarting else None
            if restarting is not None:  # a reload restarts it: wait for the new session
                await restarting.wait()
            conn = self._connections.get(server)
        if conn is None:
            raise unknown_server(server, list(self._connections))
        if not _is_text(tool) or not tool:
            raise InvalidInput(
                f"Tool name for upstream server '{server}' must be a non-empty string"
            )
        args = check_arguments(server, tool, arguments)
        timeout = self._settings.call_timeout_s if timeout_s is None else check_timeout(timeout_s)
        run = await conn.acquire()
        latency_ms: float | None = None
        try:
            if tool not in run.tools:
                raise unknown_tool(
                    server, tool, run.tools, tool_elsewhere(self._connections, server, tool)
                )
            started = time.perf_counter()
            result = await send_call(conn, run, tool, args, timeout_s=timeout, send=send)
            latency_ms = (time.perf_counter() - started) * 1000
            check_result_depth(server, tool, result)  # TOOL_ERROR, before anyone walks it
            return result
        finally:
            conn.release(run, latency_ms)

    def status(self) -> list[ServerStatus]:
        """One entry per configured server, sorted by name."""
        return [conn.status() for conn in self._connections.values()]

    def on_tools_changed(self, listener: ToolsChangedListener) -> None:
        """Call ``listener(server)`` after a server's tool list changed and was refreshed."""
        self._listeners.append(listener)

    def set_events(self, events: UpstreamEvents | None) -> None:
        """Relay what sessions send unasked to ``events`` (see ``upstream.events``)."""
        self._events.target = events

    # -- hooks the connections call ----------------------------------------------------------

    async def _catalog_fetched(
        self, server: str, tools: Sequence[mcp_types.Tool]
    ) -> tuple[str, ...]:
        conn = self._connections.get(server)
        if conn is None:
            return ()  # removed by a reload while its last catalog was on its way
        return await self._reporter.record_catalog(conn, tools)

    async def _tools_changed(self, server: str) -> None:
        if self._phase != "running" or server in self._quiet:
            return  # start() reports the initial catalogs through list_tools, reconfigure its own
        for listener in list(self._listeners):
            try:
                await listener(server)
            except Exception:  # a listener's failure must not take the session down
                logger.exception("tools-changed listener failed for upstream server %r", server)

    async def _flush(self, names: set[str] | None = None) -> None:
        """Report the servers' states to the catalog store now (tests force a report)."""
        await self._reporter.flush(names)


def _is_text(value: object) -> bool:
    """Callers pass JSON values through: check what the annotations cannot promise."""
    return isinstance(value, str)
