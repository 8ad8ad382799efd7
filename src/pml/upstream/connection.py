"""One upstream server: its state, its live session, and the task that owns the session.

A session lives in its own supervisor task, because anyio cancel scopes must be exited by
the task that entered them: the task opens the client (one ``AsyncExitStack``), fetches the
catalog, then waits for a stop, the idle timeout (lazy servers), a ``tools/list_changed``
refresh or the end of the connection, and closes everything on its way out. Calls from any
task use the open session; they never open one.

    conn = ServerConnection("time", settings, UpstreamSettings(), hooks)
    conn.activate()
    run = await conn.acquire()        # starts the server if needed, or fails fast in backoff
    try:
        result = await run.client.call_tool("get_current_time", {"timezone": "UTC"})
    finally:
        conn.release(run, latency_ms=1.2)

States: ``stopped`` → ``starting`` → ``running`` → (``idle`` | ``failed`` | ``stopped``).
A failed server is restarted on its next use once its backoff (0.5 s doubling to 30 s, with
jitter) has passed; a call inside the window fails at once, naming the seconds left.
"""

from __future__ import annotations

import logging
import math
import time
from contextlib import AsyncExitStack
from datetime import datetime
from functools import partial
from typing import Any

import anyio
import mcp_types
from mcp import Client
from mcp.client.session import IncomingMessage
from mcp.server import Server
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from pml.config import UpstreamSettings
from pml.errors import UpstreamUnavailable
from pml.storage.types import utc_now
from pml.upstream.base import ServerState, ServerStatus
from pml.upstream.messages import describe_error
from pml.upstream.session import ConnectionHooks, Run, backoff_delay
from pml.upstream.transport import (
    UpstreamTarget,
    fetch_tools,
    listen_for_tool_changes,
    open_client,
    transport_kind,
)

logger = logging.getLogger(__name__)

# What a refresh may raise when the session is failing under it; logged, the old list stays.
REFRESH_ERRORS = (MCPError, TimeoutError, ValidationError, RuntimeError, anyio.BrokenResourceError)


class ServerConnection:
    """The state of one upstream server and the supervisor of its session."""

    def __init__(
        self,
        name: str,
        target: UpstreamTarget,
        settings: UpstreamSettings,
        hooks: ConnectionHooks,
    ) -> None:
        self.name = name
        self.target = target
        self.kind = transport_kind(target)
        self.lazy = not isinstance(target, Server) and target.lazy
        self.disabled = not isinstance(target, Server) and target.disabled
        self.state: ServerState = "disabled" if self.disabled else "stopped"
        self.tools: list[mcp_types.Tool] | None = None  # last catalog fetched by this process
        self.stored_tools: list[mcp_types.Tool] = []  # the catalog store's, for lazy servers
        self.flagged: tuple[str, ...] = ()
        self.last_error: str | None = None
        self.last_latency_ms: float | None = None
        self.reported_latency: float | None = None  # the pool's status reporter keeps this
        self.updated_at: datetime = utc_now()
        self.protocol_version: str | None = None
        self.sessions_opened = 0
        self._settings = settings
        self._hooks = hooks
        self._run: Run | None = None
        self._accepting = False
        self._failures = 0
        self._retry_at = 0.0
        self._in_flight = 0
        self._last_used = 0.0
        self._supervisors = 0  # supervisor tasks still running (an old one may be closing)
        self._all_closed: anyio.Event | None = None

    # -- the pool's side -------------------------------------------------------------------

    def activate(self) -> None:
        """Accept starts from now on (the pool is running)."""
        self._accepting = True
        if self.lazy and not self.disabled:
            self._set_state("idle")

    def begin_start(self) -> Run:
        """Start a new session in its own supervisor task."""
        run = Run(self.name)
        self._hooks.spawn(partial(self._supervise, run))  # raises when the pool has stopped
        if self._supervisors == 0:
            self._all_closed = anyio.Event()
        self._supervisors += 1
        self._run = run
        self._set_state("starting")
        return run

    def request_stop(self) -> None:
        """Stop the session (and refuse new ones); the supervisor closes it."""
        self._accepting = False
        run = self._run
        if run is None or run.done:
            if not self.disabled:
                self._set_state("stopped")
            return
        run.stop = True
        if not run.started and run.scope is not None:
            run.scope.cancel()
        run.wake.set()

    async def close(self, grace_s: float) -> bool:
        """Stop for good and wait until every session of this server has closed; after
        ``grace_s`` the session is cancelled (its process stopped). False if it still runs."""
        self.request_stop()
        for attempt in range(2):
            closed = self._all_closed
            if closed is None or self._supervisors == 0:
                return True
            if attempt == 1 and self._run is not None and self._run.scope is not None:
                self._run.scope.cancel()
            with anyio.move_on_after(grace_s):
                await closed.wait()
        return self._supervisors == 0

    def retune(self, settings: UpstreamSettings) -> None:
        """Use new timeouts from now on (a reload); an idle deadline is recomputed at once."""
        self._settings = settings
        if self._run is not None:
            self._run.wake.set()

    def known_tools(self) -> list[mcp_types.Tool]:
        """The catalog ``list_tools`` shows: the live one, else the stored one (lazy only)."""
        if self.disabled:
            return []
        if self.tools is not None:
            return self.tools
        return self.stored_tools if self.lazy else []

    def status(self) -> ServerStatus:
        """A snapshot for ``pml status``."""
        extra: dict[str, Any] = {"sessions_opened": self.sessions_opened}
        if self.kind not in ("stdio", "http"):
            extra["transport"] = self.kind
        if self.protocol_version is not None:
            extra["protocol_version"] = self.protocol_version
        if self.state == "failed":
            extra["next_restart_in_s"] = round(max(0.0, self._retry_at - time.monotonic()), 2)
        return ServerStatus(
            name=self.name,
            state=self.state,
            transport="http" if self.kind in ("http", "sse") else "stdio",
            tool_count=len(self.known_tools()),
            last_latency_ms=self.last_latency_ms,
            last_error=self.last_error,
            flagged_tools=self.flagged,
            lazy=self.lazy,
            updated_at=self.updated_at,
            extra=extra,
        )

    # -- the call path ---------------------------------------------------------------------

    async def acquire(self) -> Run:
        """The running session, started (or restarted) first if needed; pair with ``release``."""
        while True:
            run = self._run
            if run is not None and self.state == "running" and run.usable():
                self._in_flight += 1
                return run
            if self.disabled:
                raise UpstreamUnavailable(
                    f"Upstream server '{self.name}' is disabled in the configuration",
                    server=self.name,
                )
            if not self._accepting:
                raise UpstreamUnavailable(
                    f"Upstream server '{self.name}' is not running "
                    "(the upstream pool is stopped or not started)",
                    server=self.name,
                )
            if self.state == "starting" and run is not None:
                await run.settled.wait()
                continue
            if self.state == "failed":
                left = self._retry_at - time.monotonic()
                if left > 0:
                    wait = math.ceil(left * 100) / 100  # waiting this long is always enough
                    raise UpstreamUnavailable(
                        f"Upstream server '{self.name}' is unavailable ({self.last_error}); "
                        f"next restart attempt in {wait:.2f} s",
                        server=self.name,
                        retry_in_s=wait,
                    )
            self.begin_start()

    async def wait_settled(self) -> None:
        """Return once the current start attempt (if any) has settled."""
        run = self._run
        if run is not None and self.state == "starting":
            await run.settled.wait()

    def release(self, run: Run, latency_ms: float | None) -> None:
        """End a call begun with ``acquire`` (``latency_ms`` when the server answered)."""
        self._in_flight -= 1
        self._last_used = time.monotonic()
        if latency_ms is not None:
            self.last_latency_ms = latency_ms
            if run is self._run:
                self._failures = 0  # the server works again: the next crash starts at 0.5 s
        if self.lazy and self._in_flight == 0:
            run.wake.set()  # recompute the idle deadline

    def connection_lost(self, run: Run, reason: str) -> None:
        """The connection ended under a call or the reader: fail now, restart on a later use."""
        if run.stop or run.idle or run.lost:
            return  # we are closing it ourselves, or it is already reported
        run.lost = True
        run.error = reason
        self._fail(run, self._with_stderr(run, reason))
        run.wake.set()

    # -- the supervisor --------------------------------------------------------------------

    async def _supervise(self, run: Run) -> None:
        outcome = "stopped"
        try:
            with anyio.CancelScope() as scope:
                run.scope = scope
                if run.stop:
                    return
                scope.deadline = anyio.current_time() + self._settings.start_timeout_s
                async with AsyncExitStack() as stack:
                    try:
                        outcome = await self._open_and_serve(run, stack, scope)
                    finally:
                        run.closing = True  # from here on the connection's end is ours
            if not run.started and not run.stop:
                outcome = "failed"
                run.error = self._with_stderr(
                    run, f"no answer within {self._settings.start_timeout_s:g} s while starting"
                )
                logger.warning("upstream server %r failed: %s", self.name, run.error)
        except Exception as error:  # the session's top-level boundary: any failure fails it
            outcome = "failed"
            if run.lost:  # already reported: add why the transport says it broke
                run.error = f"{run.error}: {describe_error(error, self.target)}"
                logger.debug("upstream server %r: closing a lost session", self.name, exc_info=True)
            else:
                run.error = self._with_stderr(run, describe_error(error, self.target))
                logger.warning("upstream server %r failed: %s", self.name, run.error)
                logger.debug("upstream server %r failure", self.name, exc_info=True)
        finally:
            run.closing = True
            run.session = None
            self._on_finished(run, outcome)
            run.settled.set()
            self._supervisors -= 1
            if self._supervisors == 0 and self._all_closed is not None:
                self._all_closed.set()

    async def _open_and_serve(
        self, run: Run, stack: AsyncExitStack, scope: anyio.CancelScope
    ) -> str:
        client = await open_client(
            stack,
            self.target,
            on_message=partial(self._on_message, run),
            on_closed=partial(self._on_closed, run),
            stderr=run.stderr,
            callbacks=self._hooks.client_callbacks(self.name),
        )
        await listen_for_tool_changes(stack, client)
        tools = await fetch_tools(client)
        scope.deadline = math.inf
        run.session = client
        changed = await self._record_catalog(run, tools)
        self._on_started(run, client)
        if changed:
            await self._hooks.tools_changed(self.name)
        return await self._serve(run)

    async def _serve(self, run: Run) -> str:
        """Wait for a stop, the idle timeout, a refresh or the connection's end."""
        while True:
            run.wake = anyio.Event()
            if run.stop:
                return "stopped"
            if run.lost:
                return "lost"
            if run.refresh:
                run.refresh = False
                await self._refresh(run)
                continue
            timeout = math.inf
            if self.lazy and self._in_flight == 0:
                timeout = self._last_used + self._settings.idle_timeout_s - time.monotonic()
                if timeout <= 0:
                    run.idle = run.closing = True
                    self._set_state("idle")
                    return "idle"
            with anyio.move_on_after(timeout):
                await run.wake.wait()

    async def _refresh(self, run: Run) -> None:
        try:
            with anyio.fail_after(self._settings.call_timeout_s):
                tools = await fetch_tools(run.client)
        except REFRESH_ERRORS as error:
            logger.warning("upstream server %r: tool list refresh failed: %s", self.name, error)
            return
        if await self._record_catalog(run, tools):
            self._hooks.status_changed(self.name)
            await self._hooks.tools_changed(self.name)

    async def _record_catalog(self, run: Run, tools: list[mcp_types.Tool]) -> bool:
        """Keep and store a fetched catalog; True when ``list_tools`` now shows another list."""
        before = self.known_tools()
        run.tools = {tool.name: tool for tool in tools}
        self.tools = tools
        self.flagged = await self._hooks.catalog_fetched(self.name, tools)
        return before != tools

    async def _on_message(self, run: Run, message: IncomingMessage) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            run.refresh = True
            run.wake.set()
        elif isinstance(message, Exception):
            logger.debug("upstream server %r: transport error: %s", self.name, message)
        else:
            await self._hooks.notification(self.name, message)

    def _on_closed(self, run: Run) -> None:
        if run.started:
            self.connection_lost(run, "the server closed the connection")

    def _on_started(self, run: Run, client: Client) -> None:
        run.started = True
        self.sessions_opened += 1
        self.protocol_version = client.protocol_version
        self._last_used = time.monotonic()
        if self._run is run:
            self._set_state("running")
        run.settled.set()

    def _on_finished(self, run: Run, outcome: str) -> None:
        run.done = True
        current = self._run is run
        if run.lost and current and self.state == "failed":
            # The process is gone now: its stderr tail is complete.
            self._set_state("failed", self._with_stderr(run, run.error or "connection lost"))
        elif outcome == "failed":
            self._fail(run, run.error or "failed")
        if current and not self._accepting and not self.disabled:
            self._set_state("stopped")

    def _fail(self, run: Run, error: str) -> None:
        if run.failed:
            return
        run.failed = True
        if self._run is not run:
            return  # a newer session owns the state
        self._failures += 1
        self._retry_at = time.monotonic() + backoff_delay(self._failures)
        self._set_state("failed", error)

    def _set_state(self, state: ServerState, error: str | None = None) -> None:
        if error is not None:
            self.last_error = error
        if state != self.state or error is not None:
            self.state = state
            self.updated_at = utc_now()
            self._hooks.status_changed(self.name)

    def _with_stderr(self, run: Run, message: str) -> str:
        reason = run.stderr.reason()  # the error line of a crash, not its stack's tail
        return f"{message}; stderr: {reason}" if reason else message
