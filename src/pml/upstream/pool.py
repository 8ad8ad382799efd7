"""The upstream pool: one reused MCP client session per configured server.

    pool = ClientPool(
        {"time": ServerSettings(command="mcp-server-time")},
        settings=UpstreamSettings(call_timeout_s=10),
        catalog=CatalogStore(db),
    )
    async with pool:                                   # or: await pool.start() ... pool.stop()
        tools = await pool.list_tools()                # [UpstreamTool(server="time", ...), ...]
        result = await pool.call_tool("time", "get_current_time", {"timezone": "UTC"})

``start()`` starts every non-lazy server in parallel (a broken one is ``failed`` and never
stops the others); lazy servers start on their first call and stop after ``idle_timeout_s``
without calls. Sessions live in supervisor tasks under one task group, hosted by a task of
the pool's own so that ``start()`` and ``stop()`` need not be called from the same task;
when a catalog store is given, catalogs and every state change are written to it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any, Final, TypeVar, cast

import anyio
import anyio.abc
import mcp_types
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import PydanticSerializationError
from sqlalchemy.exc import SQLAlchemyError

from pml.config import UpstreamSettings
from pml.errors import (
    ExecutionTimeout,
    InvalidArgs,
    InvalidInput,
    PmlError,
    ToolCallError,
    UpstreamUnavailable,
)
from pml.storage.catalog_repo import CatalogStore
from pml.telemetry import observe
from pml.upstream.base import ServerStatus, ToolsChangedListener, UpstreamTool
from pml.upstream.connection import ServerConnection
from pml.upstream.messages import (
    check_arguments,
    check_timeout,
    show,
    unknown_server,
    unknown_tool,
)
from pml.upstream.session import ConnectionHooks, Run
from pml.upstream.transport import UpstreamTarget

logger = logging.getLogger(__name__)

_Result = TypeVar("_Result")


class _RawResult(BaseModel):
    """A result kept as the server's JSON object (the SDK still checks it against the protocol)."""

    model_config = ConfigDict(extra="allow")


async def _typed_call(run: Run, tool: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
    return await run.client.call_tool(tool, arguments)


async def _raw_call(run: Run, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    request = mcp_types.CallToolRequest(
        params=mcp_types.CallToolRequestParams(name=tool, arguments=arguments)
    )
    result = await run.client.session.send_request(request, _RawResult)
    return dict(result.model_extra or {})


STOP_GRACE_S: Final = 10.0  # then sessions still closing are cancelled (stdio still kills)
REPORT_INTERVAL_S: Final = 5.0  # how often call latencies reach the status table


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
        self._catalog = catalog
        self._reporter_id = reporter_id or f"{socket.gethostname()}:{os.getpid()}"
        hooks = ConnectionHooks(
            spawn=self._spawn,
            status_changed=self._status_changed,
            catalog_fetched=self._catalog_fetched,
            tools_changed=self._tools_changed,
        )
        self._connections = {
            name: ServerConnection(name, target, self._settings, hooks)
            for name, target in sorted(servers.items())
        }
        self._listeners: list[ToolsChangedListener] = []
        self._phase = "new"  # new → starting → running → stopping → stopped
        self._host: asyncio.Task[None] | None = None
        self._sessions: anyio.abc.TaskGroup | None = None
        self._stop_requested = anyio.Event()
        self._host_done = anyio.Event()
        self._dirty: set[str] = set()
        self._report_wake = anyio.Event()
        self._flush_lock = anyio.Lock()

    async def __aenter__(self) -> ClientPool:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Start every non-lazy, enabled server in parallel; a broken one never stops the rest."""
        if self._phase != "new":
            if self._phase in ("stopping", "stopped"):
                raise RuntimeError("a stopped ClientPool cannot be started again")
            return
        self._phase = "starting"
        await self._load_stored()
        ready = anyio.Event()
        self._host = asyncio.get_running_loop().create_task(self._run_host(ready))
        await ready.wait()
        runs: list[Run] = []
        for conn in self._connections.values():
            conn.activate()
            if not conn.lazy and not conn.disabled:
                runs.append(conn.begin_start())
        for run in runs:
            await run.settled.wait()
        if self._phase == "starting":
            self._phase = "running"
        await self._flush(set(self._connections))

    async def stop(self) -> None:
        """Close every session and stop every child process (idempotent)."""
        if self._phase in ("stopping", "stopped"):
            await self._host_done.wait()
            return
        started = self._host is not None
        self._phase = "stopping"
        if not started:
            for conn in self._connections.values():
                conn.request_stop()
            self._host_done.set()
        else:
            self._stop_requested.set()
            await self._host_done.wait()
        self._phase = "stopped"
        if started:
            await self._flush(set(self._connections))

    async def _run_host(self, ready: anyio.Event) -> None:
        try:
            async with anyio.create_task_group() as host:
                host.start_soon(self._report_loop)
                with anyio.CancelScope() as grace:
                    async with anyio.create_task_group() as sessions:
                        self._sessions = sessions
                        ready.set()
                        await self._stop_requested.wait()
                        for conn in self._connections.values():
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
        return await self._call(server, tool, arguments, timeout_s, _typed_call)

    async def call_tool_raw(
        self,
        server: str,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """``call_tool`` returning the result as the server's JSON object (see ``UpstreamPool``)."""
        return await self._call(server, tool, arguments, timeout_s, _raw_call)

    async def _call(
        self,
        server: str,
        tool: str,
        arguments: Mapping[str, Any] | None,
        timeout_s: float | None,
        send: Callable[[Run, str, dict[str, Any]], Awaitable[_Result]],
    ) -> _Result:
        conn = self._connections.get(server) if _is_text(server) else None
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
                raise unknown_tool(server, tool, run.tools, self._elsewhere(server, tool))
            started = time.perf_counter()
            try:
                with (
                    observe.step("upstream_call", server=server, tool=tool) as step,
                    anyio.fail_after(timeout),
                ):
                    result = await send(run, tool, args)
                    if _is_error(result):
                        step.outcome = "tool_error"
            except TimeoutError:
                raise ExecutionTimeout(
                    f"Upstream tool {server}:{show(tool)} did not answer within {timeout:g} s",
                    server=server,
                    tool=tool,
                    timeout_s=timeout,
                ) from None
            except MCPError as error:
                if error.code == mcp_types.CONNECTION_CLOSED or not run.usable():
                    raise self._lost(conn, run, tool) from None
                raise ToolCallError(
                    f"Upstream server '{server}' refused {server}:{show(tool)}: {error.message}",
                    server=server,
                    tool=tool,
                    upstream_code=error.code,
                ) from None
            except PydanticSerializationError as error:
                raise InvalidArgs(
                    f"Arguments for {server}:{show(tool)} are not JSON values: {error}"
                ) from None
            except ValidationError as error:
                raise ToolCallError(
                    f"Upstream server '{server}' returned an invalid result for "
                    f"{server}:{show(tool)}: {error.error_count()} validation errors",
                    server=server,
                    tool=tool,
                ) from None
            except (RuntimeError, anyio.BrokenResourceError, anyio.ClosedResourceError) as error:
                if not run.usable() or not isinstance(error, RuntimeError):
                    raise self._lost(conn, run, tool) from None
                raise ToolCallError(
                    f"Upstream tool {server}:{show(tool)} failed: {error}",
                    server=server,
                    tool=tool,
                ) from None
            latency_ms = (time.perf_counter() - started) * 1000
            return result
        finally:
            conn.release(run, latency_ms)

    def status(self) -> list[ServerStatus]:
        """One entry per configured server, sorted by name."""
        return [conn.status() for conn in self._connections.values()]

    def on_tools_changed(self, listener: ToolsChangedListener) -> None:
        """Call ``listener(server)`` after a server's tool list changed and was refreshed."""
        self._listeners.append(listener)

    # -- hooks the connections call ----------------------------------------------------------

    def _status_changed(self, server: str) -> None:
        self._dirty.add(server)
        self._report_wake.set()

    async def _catalog_fetched(
        self, server: str, tools: Sequence[mcp_types.Tool]
    ) -> tuple[str, ...]:
        conn = self._connections[server]
        if self._catalog is None:
            return conn.flagged
        try:
            await self._catalog.record_catalog(server, tools)
            flagged = await self._catalog.flagged(server)
        except (PmlError, SQLAlchemyError) as error:
            logger.warning("could not store the catalog of upstream server %r: %s", server, error)
            return conn.flagged
        return tuple(flagged.get(server, ()))

    async def _tools_changed(self, server: str) -> None:
        if self._phase != "running":
            return  # start() reports the initial catalogs through list_tools
        for listener in list(self._listeners):
            try:
                await listener(server)
            except Exception:  # a listener's failure must not take the session down
                logger.exception("tools-changed listener failed for upstream server %r", server)

    # -- the status table --------------------------------------------------------------------

    async def _load_stored(self) -> None:
        if self._catalog is None:
            return
        try:
            flagged = await self._catalog.flagged()
            for name, conn in self._connections.items():
                conn.flagged = tuple(flagged.get(name, ()))
                if conn.lazy:
                    conn.stored_tools = await self._catalog.load_catalog(name)
        except (PmlError, SQLAlchemyError) as error:
            logger.warning("could not load the stored upstream catalog: %s", error)

    async def _report_loop(self) -> None:
        if self._catalog is None:
            return
        while True:
            with anyio.move_on_after(REPORT_INTERVAL_S):
                await self._report_wake.wait()
            self._report_wake = anyio.Event()
            await self._flush()

    async def _flush(self, names: set[str] | None = None) -> None:
        if self._catalog is None:
            return
        async with self._flush_lock:
            names = self._dirty | (names or set()) | self._recent_latencies()
            self._dirty = set()
            if not names:
                return
            try:
                # The stored catalog is the truth (a person may accept a definition anywhere).
                flagged = await self._catalog.flagged()
                for name in names:
                    self._connections[name].flagged = tuple(flagged.get(name, ()))
                statuses = [self._connections[name].status() for name in sorted(names)]
                await self._catalog.record_status(statuses, self._reporter_id)
            except (PmlError, SQLAlchemyError) as error:
                logger.warning("could not record the upstream server states: %s", error)

    def _recent_latencies(self) -> set[str]:
        fresh: set[str] = set()
        for name, conn in self._connections.items():
            if conn.last_latency_ms is not None and conn.last_latency_ms != conn.reported_latency:
                conn.reported_latency = conn.last_latency_ms
                fresh.add(name)
        return fresh

    # -- errors ------------------------------------------------------------------------------

    def _lost(self, conn: ServerConnection, run: Run, tool: str) -> UpstreamUnavailable:
        conn.connection_lost(run, f"the connection closed during a call to {show(tool)}")
        return UpstreamUnavailable(
            f"Upstream server '{conn.name}' went away during {conn.name}:{show(tool)} "
            "(it will be restarted on a later call)",
            server=conn.name,
            tool=tool,
        )

    def _elsewhere(self, server: str, tool: str) -> list[str]:
        return [
            name
            for name, conn in self._connections.items()
            if name != server and any(known.name == tool for known in conn.known_tools())
        ]


def _is_error(result: object) -> bool:
    if isinstance(result, mcp_types.CallToolResult):
        return result.is_error is True
    return isinstance(result, dict) and cast("dict[str, Any]", result).get("isError") is True


def _is_text(value: object) -> bool:
    """Callers pass JSON values through: check what the annotations cannot promise."""
    return isinstance(value, str)
