"""The contract between the gateway and the upstream pool.

    pool: UpstreamPool = ...
    tools = await pool.list_tools()                      # every known upstream tool
    result = await pool.call_tool("time", "get_current_time", {"timezone": "UTC"})
    for server in pool.status(): print(server.name, server.state, server.tool_count)

Tools are addressed as ``server:tool`` internally and ``server__tool`` when passed through
to an agent; names that collide across servers never clash because the server is part of
every address.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

import mcp_types
from mcp import Client

from pml.upstream.events import UpstreamEvents

ServerState = Literal["starting", "running", "idle", "stopped", "failed", "disabled"]
PASS_THROUGH_SEPARATOR = "__"


@dataclass(frozen=True, slots=True)
class UpstreamTool:
    """One tool of one upstream server, with its definition as the server gave it."""

    server: str
    definition: mcp_types.Tool

    @property
    def name(self) -> str:
        """The tool's own name on its server."""
        return self.definition.name

    @property
    def address(self) -> str:
        """``server:tool``, the internal address."""
        return f"{self.server}:{self.definition.name}"

    @property
    def pass_through_name(self) -> str:
        """``server__tool``, the name an agent sees when upstream tools are exposed."""
        return f"{self.server}{PASS_THROUGH_SEPARATOR}{self.definition.name}"


@dataclass(frozen=True, slots=True)
class ServerStatus:
    """What the pool knows about one server right now."""

    name: str
    state: ServerState
    transport: Literal["stdio", "http"]
    tool_count: int
    last_latency_ms: float | None = None
    last_error: str | None = None
    flagged_tools: tuple[str, ...] = ()
    lazy: bool = False
    updated_at: datetime | None = None
    extra: Mapping[str, Any] = field(default_factory=dict[str, Any])


ToolsChangedListener = Callable[[str], Awaitable[None]]


class ToolSource(Protocol):
    """Where a listing takes the upstream tools from (the pool, or its ``StartWindow``)."""

    async def list_tools(self) -> list[UpstreamTool]:
        """Every tool of every enabled server."""
        ...


class UpstreamPool(Protocol):
    """The upstream servers the gateway talks to (see ``upstream.pool.ClientPool``)."""

    async def start(self, *, wait: bool = True) -> None:
        """Start every non-lazy, enabled server in parallel; a broken one never stops the
        others. ``wait=False``: return once the starts are under way."""
        ...

    async def settled(self, timeout_s: float, names: Collection[str] | None = None) -> list[str]:
        """Wait up to ``timeout_s`` for servers still starting (only ``names``, if given);
        the names of those still starting then."""
        ...

    def session(self, server: str) -> AbstractAsyncContextManager[Client]:
        """The live client of ``server`` for a request other than a tool call (prompts,
        resources, completion...): started first, or waited for while it starts. Raises
        ``UnknownTool`` for an unknown server and ``UpstreamUnavailable`` as ``call_tool``."""
        ...

    async def stop(self) -> None:
        """Close every session and stop every child process (idempotent)."""
        ...

    async def list_tools(self) -> list[UpstreamTool]:
        """Every tool of every enabled server (lazy servers: from the stored catalog)."""
        ...

    async def call_tool(
        self,
        server: str,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout_s: float | None = None,
    ) -> mcp_types.CallToolResult:
        """Call one tool and return the server's result unchanged.

        Raises ``UnknownTool`` (no such server or tool), ``UpstreamUnavailable`` (the server
        is down, crashed or could not start: it is restarted with backoff on a later call),
        ``ExecutionTimeout`` (no answer within the timeout), ``ToolCallError`` (a JSON-RPC
        error instead of a result) and ``InvalidArgs`` (arguments that are not a JSON
        object), each naming the server. A result with ``isError`` is returned as it is.
        """
        ...

    async def call_tool_raw(
        self,
        server: str,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """``call_tool``, with the result as the server's JSON object (no model round trip).

        The pass-through fast lane uses it to hand the upstream result on as it came.
        """
        ...

    def status(self) -> list[ServerStatus]:
        """One entry per configured server, sorted by name."""
        ...

    def on_tools_changed(self, listener: ToolsChangedListener) -> None:
        """Call ``listener(server)`` after a server's tool list changed and was refreshed."""
        ...

    def set_events(self, events: UpstreamEvents | None) -> None:
        """Relay what sessions send unasked (notifications, sampling/elicitation/roots
        requests) to ``events``; sessions opened from now on use its callbacks."""
        ...
