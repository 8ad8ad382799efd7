"""List changes for the clients whose lists changed, in both protocol generations.

    notifier = ToolListNotifier()
    notifier.track(ctx, scope)                 # a 2025-11-25 session that listed/called tools
    server = Server(..., on_subscriptions_listen=notifier.listen_handler(scope_of_ctx))
    await notifier.tools_changed(scope)        # only the clients of that caller
    await notifier.tools_changed()             # every client (upstream tools changed)
    await notifier.broadcast(PromptsListChanged())  # every client, both generations
    notifier.end_streams()                     # the HTTP server stops: let go of clients

2025-11-25 sessions get ``notifications/tools/list_changed`` on their standalone stream;
2026-07-28 clients ``subscriptions/listen`` and get ``tools_list_changed`` events. Each
caller (org, project, user) has its own subscription bus, so a tenant never hears of
another tenant's changes.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from typing import Any

import mcp_types
from mcp import MCPError
from mcp.server import ServerRequestContext
from mcp.server.connection import Connection
from mcp.server.subscriptions import (
    ListenHandler,
    PromptsListChanged,
    ResourcesListChanged,
    ServerEvent,
    ToolsListChanged,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from pml.registry.scope import Scope

logger = logging.getLogger(__name__)

Context = ServerRequestContext[dict[str, Any], Any]
ScopeOf = Callable[[Context], Scope]


def connection_of(ctx: Context) -> Connection:
    """The client connection a request came on (one per 2025-11-25 session)."""
    # The SDK hands handlers the connection only through the session (TODO(L54) there).
    return ctx.session._connection  # pyright: ignore[reportPrivateUsage]


class ScopeBus:
    """An in-process subscription bus for one caller that knows whether anyone listens."""

    def __init__(self) -> None:
        self._listeners: dict[object, Callable[[ServerEvent], None]] = {}

    @property
    def listening(self) -> bool:
        """Whether a ``subscriptions/listen`` stream is open on this bus."""
        return bool(self._listeners)

    async def publish(self, event: ServerEvent) -> None:
        for listener in list(self._listeners.values()):
            try:
                listener(event)
            except Exception:  # fan-out boundary: one stream must not starve the others
                logger.exception("subscription listener raised; continuing")

    def subscribe(self, listener: Callable[[ServerEvent], None]) -> Callable[[], None]:
        token = object()
        self._listeners[token] = listener

        def unsubscribe() -> None:
            self._listeners.pop(token, None)

        return unsubscribe


class ToolListNotifier:
    """Which clients listen, as whom, and telling them that their tool list changed."""

    def __init__(self) -> None:
        self._sessions: weakref.WeakKeyDictionary[Connection, Scope] = weakref.WeakKeyDictionary()
        self._buses: dict[Scope, tuple[ScopeBus, ListenHandler]] = {}
        self._ending = False

    def track(self, ctx: Context, scope: Scope) -> None:
        """Remember a session-era connection that has listed or called tools, and its caller."""
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return
        connection = connection_of(ctx)
        if connection.has_standalone_channel:
            self._sessions[connection] = scope

    def listen_handler(self, scope_of: ScopeOf) -> Callable[..., Any]:
        """The ``subscriptions/listen`` handler: each caller listens on its own bus."""

        async def listen(
            ctx: Context, params: mcp_types.SubscriptionsListenRequestParams
        ) -> mcp_types.SubscriptionsListenResult:
            if self._ending:
                raise MCPError(mcp_types.INTERNAL_ERROR, "The server is shutting down")
            return await self._handler_for(scope_of(ctx))(ctx, params)

        return listen

    def end_streams(self) -> None:
        """End every listen stream gracefully, and refuse new ones until ``resume_streams``.

        A listen stream lasts as long as its client: an HTTP server that is stopping would
        otherwise wait its whole graceful-shutdown time for the clients to leave."""
        self._ending = True
        for _, handler in self._buses.values():
            handler.close()

    def resume_streams(self) -> None:
        """Serve listen streams again (the HTTP server started)."""
        self._ending = False

    def scopes(self) -> set[Scope]:
        """The callers that have a session or a listen stream open now."""
        found = set(self._sessions.values())
        found.update(scope for scope, (bus, _) in self._buses.items() if bus.listening)
        return found

    async def tools_changed(self, scope: Scope | None = None) -> None:
        """Tell the clients of ``scope`` (every client when None); never raises."""
        for bus_scope, (bus, _) in list(self._buses.items()):
            if scope is None or bus_scope == scope:
                await bus.publish(ToolsListChanged())
        for connection, session_scope in list(self._sessions.items()):
            if scope is None or session_scope == scope:
                await connection.send_tool_list_changed()

    async def broadcast(self, event: ServerEvent) -> None:
        """Publish ``event`` on every caller's bus (each listen stream's filter decides who
        gets it) and send a list change to every tracked session; never raises."""
        for bus, _ in list(self._buses.values()):
            await bus.publish(event)
        for connection in list(self._sessions.keys()):
            if isinstance(event, PromptsListChanged):
                await connection.send_prompt_list_changed()
            elif isinstance(event, ResourcesListChanged):
                await connection.send_resource_list_changed()
            elif isinstance(event, ToolsListChanged):
                await connection.send_tool_list_changed()

    def _handler_for(self, scope: Scope) -> ListenHandler:
        found = self._buses.get(scope)
        if found is None:
            bus = ScopeBus()
            found = self._buses[scope] = (bus, ListenHandler(bus))
        return found[1]
