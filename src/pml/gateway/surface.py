"""The MCP surface besides tools, passed through the gateway: prompts, resources,
subscriptions, completions and logging, in both protocol generations.

    surface = GatewaySurface(pool, list_wait=window.wait, auditor=policy.audit)
    relay.add_sink(surface)                       # upstream notifications reach it
    pool.on_tools_changed(surface.server_changed) # a server (re)started or changed
    async with surface.running():
        server = build_server(tools, ..., surface=surface)   # calls surface.install(...)

What passes and how it is named is documented in ``docs/protocol.md``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import mcp_types
from mcp.server import Server
from mcp.server.subscriptions import PromptsListChanged, ResourcesListChanged, ServerEvent

from pml.gateway.notify import Context, ToolListNotifier
from pml.gateway.surface_catalog import SurfaceCatalog
from pml.gateway.surface_edge import SurfaceEdge
from pml.gateway.surface_logging import LogRelay
from pml.gateway.surface_names import split_name, unmark_uri
from pml.gateway.surface_prompts import PromptSurface
from pml.gateway.surface_resources import ResourceSurface
from pml.gateway.surface_subscriptions import ResourceSubscriptions
from pml.policy.model import Auditor
from pml.registry.scope import Scope
from pml.upstream.base import UpstreamPool
from pml.upstream.surface import offers

logger = logging.getLogger(__name__)


class GatewaySurface:
    """Everything but tools, between the gateway's clients and its upstream servers."""

    def __init__(
        self,
        pool: UpstreamPool,
        *,
        list_wait: Callable[[], Awaitable[None]] | None = None,
        auditor: Auditor | None = None,
    ) -> None:
        self._pool = pool
        self.auditor = auditor  # set before install(): reads and gets are audited
        self._notifier: ToolListNotifier | None = None
        self.subscriptions = ResourceSubscriptions(pool, publish=self._publish)
        self.catalog = SurfaceCatalog(
            pool, list_wait=list_wait, fetched=self.subscriptions.watch_lists
        )
        self._logs: LogRelay | None = None

    @asynccontextmanager
    async def running(self) -> AsyncGenerator[GatewaySurface]:
        """Hold the upstream subscription streams while the gateway runs."""
        async with self.subscriptions.running():
            yield self

    def install(
        self,
        server: Server[Any],
        *,
        scope_of: Callable[[Context], Scope],
        notifier: ToolListNotifier,
    ) -> None:
        """Give ``server`` the prompt, resource, completion and logging handlers."""
        self._notifier = notifier
        edge = SurfaceEdge(scope_of=scope_of, track=notifier.track, auditor=self.auditor)
        prompts = PromptSurface(self.catalog, self._pool, edge)
        resources = ResourceSurface(self.catalog, self._pool, edge, self.subscriptions)
        logs = LogRelay(self._pool, edge, route=self._route)
        self._logs = logs
        add = server.add_request_handler
        add("prompts/list", mcp_types.PaginatedRequestParams, prompts.list_prompts)
        add("prompts/get", mcp_types.GetPromptRequestParams, prompts.get_prompt)
        add("completion/complete", mcp_types.CompleteRequestParams, prompts.complete)
        add("resources/list", mcp_types.PaginatedRequestParams, resources.list_resources)
        add("resources/templates/list", mcp_types.PaginatedRequestParams, resources.list_templates)
        add("resources/read", mcp_types.ReadResourceRequestParams, resources.read_resource)
        add("resources/subscribe", mcp_types.SubscribeRequestParams, resources.subscribe)
        add("resources/unsubscribe", mcp_types.UnsubscribeRequestParams, resources.unsubscribe)
        # Registered here rather than as a constructor argument: the SDK warns at
        # construction that logging is deprecated in 2026-07-28, where it is not served.
        add("logging/setLevel", mcp_types.SetLevelRequestParams, logs.set_level)
        server.middleware.append(logs.opt_in)
        listen = server.get_request_handler("subscriptions/listen")
        if listen is not None:  # 2026-07-28 streams also hold resource subscriptions
            params = mcp_types.SubscriptionsListenRequestParams
            add("subscriptions/listen", params, resources.listening(listen.handler))

    async def notification(self, server: str, message: mcp_types.ServerNotification) -> None:
        """A ``NotificationSink``: list changes, resource updates and log messages."""
        if isinstance(message, mcp_types.PromptListChangedNotification):
            self.catalog.invalidate(server, ("prompts",))
            await self._publish(PromptsListChanged())
        elif isinstance(message, mcp_types.ResourceListChangedNotification):
            self.catalog.invalidate(server, ("resources", "templates"))
            await self._publish(ResourcesListChanged())
        elif isinstance(message, mcp_types.ResourceUpdatedNotification):
            await self.subscriptions.updated(server, message.params.uri)
        elif isinstance(message, mcp_types.LoggingMessageNotification) and self._logs:
            await self._logs.relay(server, message.params)

    async def server_changed(self, server: str) -> None:
        """The pool's hook: ``server`` started, restarted or changed its tools. Its lists
        are fetched again; clients that listed prompts or resources hear of a server that
        offers them; its log level and subscriptions are taken again."""
        self.catalog.invalidate(server)
        if self._logs is not None:
            self._logs.forget_server(server)
            await self._logs.apply([server])
        await self.subscriptions.resubscribe(server)
        try:
            async with self._pool.session(server) as client:
                has_prompts, has_resources = offers(client, "prompts"), offers(client, "resources")
        except Exception:  # the hook must not fail the pool; the server is down again
            logger.debug("upstream server %r: capabilities unknown", server, exc_info=True)
            return
        if has_prompts and "prompts" in self.catalog.listed:
            await self._publish(PromptsListChanged())
        if has_resources and self.catalog.listed & {"resources", "templates"}:
            await self._publish(ResourcesListChanged())

    async def _publish(self, event: ServerEvent) -> None:
        if self._notifier is not None:
            await self._notifier.broadcast(event)

    def _route(self, method: str, params: Mapping[str, Any] | None) -> str | None:
        """The upstream server a request reaches, when its name or URI says (else None)."""
        if params is None:
            return None
        if method in ("tools/call", "prompts/get"):
            name = params.get("name")
            if isinstance(name, str):
                found = split_name(name, self.catalog.configured())
                return found[0] if found is not None else None
        if method == "resources/read":
            uri = params.get("uri")
            if isinstance(uri, str) and (marked := unmark_uri(uri)) is not None:
                return marked[0]
        return None
