"""Resources through the gateway: list, templates, read, subscribe and unsubscribe.

    resources = ResourceSurface(catalog, pool, edge, subscriptions)
    Server(..., on_list_resources=resources.list_resources, ...)
    listen = resources.listening(listen)          # 2026-07-28 streams hold subscriptions

Resources and templates are listed with a marked URI (``pml://<server>/<upstream URI>``,
see ``surface_names``) and the name ``<server>__<name>``. ``resources/read`` takes a marked
URI, or an upstream URI that routes to one server (a resource link in a tool result). Reads
and subscriptions are audited (``RESOURCE_READ``, ``RESOURCE_SUBSCRIBE``,
``RESOURCE_UNSUBSCRIBE``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import mcp_types
from mcp.server.context import HandlerResult

from pml.errors import PmlError
from pml.gateway.notify import Context, connection_of
from pml.gateway.surface_catalog import SurfaceCatalog, resource_view, template_view
from pml.gateway.surface_edge import SurfaceEdge, translating
from pml.gateway.surface_prompts import refuse_cursor
from pml.gateway.surface_subscriptions import ResourceSubscriptions, Target
from pml.upstream.base import UpstreamPool

logger = logging.getLogger(__name__)

ListenFn = Callable[[Context, mcp_types.SubscriptionsListenRequestParams], Awaitable[HandlerResult]]


class ResourceSurface:
    """The resource handlers of the gateway's MCP server."""

    def __init__(
        self,
        catalog: SurfaceCatalog,
        pool: UpstreamPool,
        edge: SurfaceEdge,
        subscriptions: ResourceSubscriptions,
    ) -> None:
        self._catalog = catalog
        self._pool = pool
        self._edge = edge
        self._subscriptions = subscriptions

    async def list_resources(
        self, ctx: Context, params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListResourcesResult:
        """Every running server's resources, with marked URIs."""
        self._edge.caller(ctx)
        refuse_cursor(params)
        resources = [
            resource_view(server, item)
            for server, item in await self._catalog.items("resources")
            if isinstance(item, mcp_types.Resource)
        ]
        return mcp_types.ListResourcesResult(resources=resources)

    async def list_templates(
        self, ctx: Context, params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListResourceTemplatesResult:
        """Every running server's resource templates, with marked URI templates."""
        self._edge.caller(ctx)
        refuse_cursor(params)
        templates = [
            template_view(server, item)
            for server, item in await self._catalog.items("templates")
            if isinstance(item, mcp_types.ResourceTemplate)
        ]
        return mcp_types.ListResourceTemplatesResult(resource_templates=templates)

    async def read_resource(
        self, ctx: Context, params: mcp_types.ReadResourceRequestParams
    ) -> mcp_types.ReadResourceResult:
        """The resource from its server; contents keep the URI the client asked for."""
        scope = self._edge.caller(ctx)
        with translating():
            server, uri = await self._catalog.resource_target(params.uri)
        details: dict[str, object] = {"server": server, "uri": uri, "success": False}
        try:
            async with self._edge.upstream(server), self._pool.session(server) as client:
                result = await client.read_resource(uri, cache_mode="bypass")
            details["success"] = True
        finally:
            self._edge.audit(ctx, scope, "RESOURCE_READ", details)
        return _as_asked(result, uri, params.uri)

    async def subscribe(
        self, ctx: Context, params: mcp_types.SubscribeRequestParams
    ) -> mcp_types.EmptyResult:
        """Subscribe the session to a resource (updates come under the URI given)."""
        scope = self._edge.caller(ctx)
        with translating():
            target = await self._catalog.resource_target(params.uri)
        server, uri = target
        self._edge.audit(ctx, scope, "RESOURCE_SUBSCRIBE", {"server": server, "uri": uri})
        async with self._edge.upstream(server):
            await self._subscriptions.subscribe(connection_of(ctx), params.uri, target)
        return mcp_types.EmptyResult()

    async def unsubscribe(
        self, ctx: Context, params: mcp_types.UnsubscribeRequestParams
    ) -> mcp_types.EmptyResult:
        """Drop the session's subscription (unknown URIs are a no-op, as upstream)."""
        scope = self._edge.caller(ctx)
        with translating():
            found = await self._subscriptions.unsubscribe(connection_of(ctx), params.uri)
        details = {"uri": params.uri[:200], "subscribed": found}
        self._edge.audit(ctx, scope, "RESOURCE_UNSUBSCRIBE", details)
        return mcp_types.EmptyResult()

    def listening(self, listen: ListenFn) -> ListenFn:
        """``listen`` (a ``subscriptions/listen`` handler), also holding upstream the
        resource subscriptions the stream asks for while it is open."""

        async def with_resources(
            ctx: Context, params: mcp_types.SubscriptionsListenRequestParams
        ) -> HandlerResult:
            wanted = params.notifications
            if wanted.prompts_list_changed or wanted.resources_list_changed:
                await self._catalog.watch_running()
            uris = wanted.resource_subscriptions or []
            if not uris:
                return await listen(ctx, params)
            scope = self._edge.caller(ctx)
            targets: dict[str, Target] = {}
            for uri in dict.fromkeys(uris):
                try:
                    targets[uri] = await self._catalog.resource_target(uri)
                except PmlError as error:  # honoured by the stream, it simply never fires
                    logger.info("listen: resource %r not routed: %s", uri[:200], error.message)
            for server, uri in targets.values():
                self._edge.audit(ctx, scope, "RESOURCE_SUBSCRIBE", {"server": server, "uri": uri})
            async with self._subscriptions.streaming(targets):
                return await listen(ctx, params)

        return with_resources


def _as_asked(
    result: mcp_types.ReadResourceResult, upstream_uri: str, asked: str
) -> mcp_types.ReadResourceResult:
    """Contents that carry the upstream URI carry the URI the client asked for instead."""
    if asked == upstream_uri:
        return result
    contents = [
        content.model_copy(update={"uri": asked}) if content.uri == upstream_uri else content
        for content in result.contents
    ]
    return result.model_copy(update={"contents": contents})
