"""Log messages of upstream servers, relayed to the clients that asked for them.

    logs = LogRelay(pool, edge, route=catalog_route)
    server.add_request_handler("logging/setLevel", SetLevelRequestParams, logs.set_level)
    server.middleware.append(logs.opt_in)          # 2026-07-28: per-request opt-in
    await logs.relay("everything", params)         # an upstream notifications/message

Two generations, two opt-ins:

- 2025-11-25: a session sends ``logging/setLevel``; from then on it gets every upstream
  log message at or above its level. The level upstream servers are asked for is the
  lowest any session (or any opted-in request) wants; the gateway filters per client.
  A session that never sets a level gets none: one upstream server serves many clients,
  and a log line caused by one client's call is not sent to the others uninvited.
- 2026-07-28: a request whose ``_meta`` carries ``io.modelcontextprotocol/logLevel`` gets,
  on its own stream and while it runs, the log messages of the upstream server it reaches
  (any server for ``pml_execute``) at or above that level.

The logger name of a relayed message says which server it came from: ``<server>`` or
``<server>/<logger>``.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, get_args

import anyio
import mcp_types
from mcp.server.connection import Connection
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from pml.errors import PmlError
from pml.gateway.notify import Context, connection_of
from pml.gateway.surface_edge import SurfaceEdge
from pml.upstream.base import UpstreamPool
from pml.upstream.surface import offers_logging

logger = logging.getLogger(__name__)

LEVELS: Final[tuple[mcp_types.LoggingLevel, ...]] = get_args(mcp_types.LoggingLevel)
SET_LEVEL_TIMEOUT_S: Final = 10.0
# Which upstream server a request reaches, from its method and raw params (None: any).
RouteOf = Callable[[str, Mapping[str, Any] | None], str | None]


def rank(level: mcp_types.LoggingLevel) -> int:
    """Severity order: debug 0 ... emergency 7."""
    return LEVELS.index(level)


@dataclass(frozen=True, slots=True)
class _OptIn:
    """One in-flight 2026-07-28 request that asked for log messages."""

    session: ServerSession
    request_id: mcp_types.RequestId
    level: mcp_types.LoggingLevel
    server: str | None


class LogRelay:
    """``logging/setLevel``, the per-request opt-in, and relaying upstream log messages."""

    def __init__(self, pool: UpstreamPool, edge: SurfaceEdge, *, route: RouteOf) -> None:
        self._pool = pool
        self._edge = edge
        self._route = route
        self._levels: weakref.WeakKeyDictionary[Connection, mcp_types.LoggingLevel] = (
            weakref.WeakKeyDictionary()
        )
        self._requests: dict[object, _OptIn] = {}
        self._modern_floor: mcp_types.LoggingLevel | None = None
        self._applied: dict[str, mcp_types.LoggingLevel] = {}
        self._lock = anyio.Lock()

    async def set_level(
        self, ctx: Context, params: mcp_types.SetLevelRequestParams
    ) -> mcp_types.EmptyResult:
        """A session's ``logging/setLevel``: remembered for it, passed on upstream."""
        scope = self._edge.caller(ctx)
        self._levels[connection_of(ctx)] = params.level
        self._edge.audit(ctx, scope, "LOG_LEVEL_SET", {"level": params.level})
        await self.apply()
        return mcp_types.EmptyResult()

    def wanted(self) -> mcp_types.LoggingLevel | None:
        """The lowest level any client wants now (None: nobody asked)."""
        levels = list(self._levels.values())
        if self._modern_floor is not None:
            levels.append(self._modern_floor)
        return min(levels, key=rank) if levels else None

    async def apply(self, servers: list[str] | None = None) -> None:
        """Ask running upstream servers (or ``servers``) for the wanted level, where it
        differs from what they were last asked for."""
        level = self.wanted()
        if level is None:
            return
        names = servers if servers is not None else self._running()
        async with self._lock:
            for server in names:
                if self._applied.get(server) == level:
                    continue
                try:
                    with anyio.fail_after(SET_LEVEL_TIMEOUT_S):
                        async with self._pool.session(server) as client:
                            if not offers_logging(client):
                                continue
                            # 2025-11-25 only (where it is not deprecated): sent as it is.
                            request = mcp_types.SetLevelRequest(
                                params=mcp_types.SetLevelRequestParams(level=level)
                            )
                            await client.session.send_request(request, mcp_types.EmptyResult)
                    self._applied[server] = level
                except (MCPError, PmlError, TimeoutError, OSError) as error:
                    logger.warning(
                        "upstream server %r: setting log level failed: %s", server, error
                    )

    def forget_server(self, server: str) -> None:
        """``server`` restarted: it must be asked for the level again."""
        self._applied.pop(server, None)

    async def relay(self, server: str, params: mcp_types.LoggingMessageNotificationParams) -> None:
        """Hand an upstream log message to the clients that want it."""
        named = params.model_copy(
            update={"logger": server if not params.logger else f"{server}/{params.logger}"}
        )
        payload = named.model_dump(by_alias=True, mode="json", exclude_none=True)
        severity = rank(params.level)
        for connection, level in list(self._levels.items()):
            if severity >= rank(level):
                await connection.notify("notifications/message", payload)
        message = mcp_types.LoggingMessageNotification(params=named)
        for request in list(self._requests.values()):
            if request.server not in (None, server) or severity < rank(request.level):
                continue
            try:
                await request.session.send_notification(
                    message, related_request_id=request.request_id
                )
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                logger.debug("log message for a finished request dropped")

    async def opt_in(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        """Server middleware: a 2026-07-28 request that asks for log messages gets those
        of its upstream server while it runs."""
        level = _requested_level(ctx)
        if level is None or ctx.request_id is None:
            return await call_next(ctx)
        if self._modern_floor is None or rank(level) < rank(self._modern_floor):
            self._modern_floor = level  # upstream servers must send at least this much
            await self.apply()
        token = object()
        self._requests[token] = _OptIn(
            ctx.session, ctx.request_id, level, self._route(ctx.method, ctx.params)
        )
        try:
            return await call_next(ctx)
        finally:
            self._requests.pop(token, None)

    def _running(self) -> list[str]:
        return [status.name for status in self._pool.status() if status.state == "running"]


def _requested_level(ctx: ServerRequestContext[Any, Any]) -> mcp_types.LoggingLevel | None:
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS or not ctx.meta:
        return None
    requested = ctx.meta.get(mcp_types.LOG_LEVEL_META_KEY)
    for level in LEVELS:
        if requested == level:
            return level
    return None
