"""The MCP server agents connect to, and the gateway it runs on (database, registry, pool).

    async with open_gateway(settings) as gateway:          # db open, pool started
        async with Client(gateway.server) as client:       # or serve_stdio / serve_http
            await client.call_tool("cap_list", {})

The server is the SDK's low-level ``Server``: both protocol generations (2025-11-25 sessions
and stateless 2026-07-28) are served by the same handlers. The caller's scope is the one the
HTTP auth middleware put on the request (``request.state.pml_scope``); without an HTTP
request (stdio, in-process) it is the configured ``[scope]``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import anyio
import mcp_types
from mcp.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.shared.exceptions import MCPError

from pml import __version__
from pml.config import Settings
from pml.errors import InvalidInput, PmlError, Unauthorized
from pml.execution.clients import ClientCaller, calling_as, client_from_headers
from pml.freed_memory import release_periodically
from pml.gateway.approval_edge import ApprovalEdge
from pml.gateway.background import in_background
from pml.gateway.capability_tools import CapabilityToolCatalog
from pml.gateway.early_stdio import INSTRUCTIONS  # also the early answer's (early_stdio.py)
from pml.gateway.handlers import service_handlers
from pml.gateway.notify import Context, ToolListNotifier
from pml.gateway.policy_services import PolicyServices, open_policy
from pml.gateway.relay import GatewayRelay
from pml.gateway.relay_requests import RelayedRequests
from pml.gateway.results import error_result
from pml.gateway.services import (
    default_pool,
    open_curation,
    open_discovery,
    open_executor,
    register_servers,
)
from pml.gateway.surface import GatewaySurface
from pml.gateway.tool_seams import Executor
from pml.gateway.tools import GatewayTools
from pml.gateway.watch import ToolListWatcher
from pml.llm import open_llm
from pml.registry.routing_start import routing_at_start
from pml.registry.scope import Principal, Scope
from pml.registry.service import CapabilityRegistry
from pml.registry.tools import CapTools
from pml.storage.database import Database
from pml.telemetry import metrics, observe
from pml.upstream.base import UpstreamPool
from pml.upstream.start_window import StartWindow
from pml.web.auth import PRINCIPAL_STATE_KEY, SCOPE_STATE_KEY
from pml.wiring import routing_rules, scope_of

if TYPE_CHECKING:
    from pml.curation.service import CurationService
    from pml.discovery.service import DiscoveryService
    from pml.execution.trace_ingest import TraceIngest

logger = logging.getLogger(__name__)


class GatewayServer(Server[dict[str, Any]]):
    """The low-level SDK server, declaring ``listChanged`` (tools, prompts, resources) in
    every generation."""

    notifier: ToolListNotifier

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        """The SDK's options, with ``listChanged: true`` unless told otherwise (prompts and
        resources are declared only when the surface's handlers are installed)."""
        changed = NotificationOptions(
            prompts_changed=True, resources_changed=True, tools_changed=True
        )
        return super().create_initialization_options(
            notification_options or changed,
            experimental_capabilities,
            extensions,
        )


def caller_scope(ctx: Context, default_scope: Scope) -> Scope:
    """The scope of the request's API key over HTTP, else ``default_scope`` (stdio)."""
    request: object = ctx.request
    if request is None:
        return default_scope
    state = getattr(request, "state", None)
    scope = getattr(state, SCOPE_STATE_KEY, None)
    if isinstance(scope, Scope):
        return scope
    # An HTTP request that skipped authentication: refuse rather than act as the default.
    raise Unauthorized("This request carries no authenticated scope")


def caller_client(ctx: Context) -> ClientCaller | None:
    """The PML client (``pml connect``) the request's headers announce, if any."""
    headers: object = getattr(ctx.request, "headers", None)
    if not isinstance(headers, Mapping):
        return None
    return client_from_headers(cast(Mapping[str, str], headers))


def caller_key(ctx: Context) -> str | None:
    """The display prefix of the API key of the request (None over stdio/in-process)."""
    state = getattr(ctx.request, "state", None)
    principal = getattr(state, PRINCIPAL_STATE_KEY, None)
    return principal.key_prefix if isinstance(principal, Principal) else None


def build_server(
    tools: GatewayTools,
    *,
    default_scope: Scope,
    notifier: ToolListNotifier | None = None,
    edge: ApprovalEdge | None = None,
    surface: GatewaySurface | None = None,
) -> GatewayServer:
    """The MCP server exposing ``tools``; a request without an API-key scope uses the default.
    With ``edge``, calls that wait for approval ask the client's person (elicitation); with
    ``surface``, upstream prompts, resources, completions and logging pass through."""
    notifier = notifier if notifier is not None else ToolListNotifier()

    def request_scope(ctx: Context) -> Scope:
        try:
            return caller_scope(ctx, default_scope)
        except Unauthorized as error:
            raise MCPError(mcp_types.INVALID_REQUEST, error.message) from None

    async def on_list_tools(
        ctx: Context, params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        scope = request_scope(ctx)
        notifier.track(ctx, scope)
        try:
            page, next_cursor = await tools.list_page(scope, params.cursor if params else None)
        except InvalidInput as error:
            raise MCPError(mcp_types.INVALID_PARAMS, error.message) from None
        except PmlError as error:
            raise MCPError(mcp_types.INTERNAL_ERROR, error.message) from None
        return mcp_types.ListToolsResult(tools=page, next_cursor=next_cursor)

    async def on_call_tool(
        ctx: Context, params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult:
        try:
            scope = caller_scope(ctx, default_scope)
        except PmlError as error:
            return error_result(error)
        notifier.track(ctx, scope)
        with (
            calling_as(caller_client(ctx), key := caller_key(ctx)),
            observe.step(
                "tool_call", tool=params.name, lane="mcp", key=key or "", user=scope.user
            ) as step,
        ):
            if edge is not None and (params.request_state is not None or params.input_responses):
                return await edge.answered(ctx, scope, params)  # a person's answer to our form
            result = await tools.call_tool(scope, params.name, params.arguments)
            if edge is not None and tools.may_wait(params.name):
                result = await edge.settle(ctx, scope, params.name, params.arguments, result)
            if isinstance(result, mcp_types.CallToolResult) and result.is_error:
                step.outcome = "tool_error"
            return result

    server = GatewayServer(
        "pml",
        version=__version__,
        title="PML gateway",
        instructions=INSTRUCTIONS,
        get_tool_input_schema=tools.input_schema,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
        on_subscriptions_listen=notifier.listen_handler(request_scope),
    )
    server.notifier = notifier
    if surface is not None:
        surface.install(server, scope_of=request_scope, notifier=notifier)
    tools.on_tools_changed(notifier.tools_changed)
    return server


@dataclass(slots=True)
class Gateway:
    """An open gateway: database, registry, started pool, tools and the MCP server
    (``settings``: those in force, replaced by a reload)."""

    settings: Settings
    db: Database
    registry: CapabilityRegistry
    pool: UpstreamPool
    tools: GatewayTools
    server: GatewayServer
    default_scope: Scope
    executor: Executor
    catalog: CapabilityToolCatalog
    watcher: ToolListWatcher
    discovery: DiscoveryService
    curation: CurationService
    policy: PolicyServices
    traces: TraceIngest
    relay: GatewayRelay
    window: StartWindow  # the upstream tools as listings see them (waits for starting servers)
    surface: GatewaySurface | None = None

    async def notify_tools_changed(self) -> None:
        """Tell connected clients to list tools again (e.g. after a capability rename)."""
        await self.server.notifier.tools_changed()


@asynccontextmanager
async def open_gateway(
    settings: Settings,
    *,
    pool: UpstreamPool | None = None,
    llm_api_key: str | None = None,
    started_at: float | None = None,
) -> AsyncGenerator[Gateway]:
    """Open the database, the registry and the pool; on exit stop the pool, close the db.

    ``llm_api_key`` is the key of the ``[llm]`` endpoint, read by the entry point from the
    variable ``llm.api_key_env`` names (core code never reads the environment).
    ``started_at``: when the process began (``anyio.current_time()`` clock): listings wait
    for starting servers until ``list_wait_s`` after it (default: from now)."""
    db = await Database.open(settings.database_url)
    try:
        registry = CapabilityRegistry(
            db,
            routing=routing_rules(settings),
            capabilities_per_project=settings.limits.capabilities_per_project,
        )
        upstream = pool if pool is not None else default_pool(settings, db)
        relay = GatewayRelay()
        upstream.set_events(relay)  # before the sessions open: they declare its callbacks
        requests = RelayedRequests.answering(relay)  # upstream sampling/elicitation/roots
        try:
            await upstream.start(wait=False)  # initialize never waits for upstream servers
            window = StartWindow(upstream, settings.upstream.list_wait_s, opened_at=started_at)
            surface = GatewaySurface(upstream, list_wait=window.wait)
            relay.add_sink(surface)  # prompt/resource list changes, updates, log messages
            upstream.on_tools_changed(surface.server_changed)
            default_scope = scope_of(settings)
            await register_servers(registry, settings, default_scope)
            await routing_at_start(db, settings)  # stored routing follows [routing]
            discovery = open_discovery(settings, db, window)
            registry.on_change(discovery.capability_changed)
            async with (
                discovery.running(),
                in_background(release_periodically),
                surface.running(),
                open_llm(settings.llm, api_key=llm_api_key) as llm,
                open_policy(settings, db, llm) as policy,
                open_executor(settings, db, registry, upstream, discovery, policy) as (
                    executor,
                    recorder,
                    traces,
                ),
            ):
                discovery.policy = policy.enforcer
                registry.auditor = policy.audit
                catalog = CapabilityToolCatalog(db, budget=settings.gateway.capability_tools_budget)
                notifier = ToolListNotifier()
                watcher = ToolListWatcher(catalog, notifier, db, origin=registry.origin)
                registry.on_change(watcher.registry_changed)
                watcher.on_remote_change(discovery.capability_changed)
                registry.on_change(traces.capability_changed)
                watcher.on_remote_change(traces.capability_changed)
                # Only this process's captures count towards its automatic curation runs
                # (the count itself is read from the database): replicas never race.
                curation = open_curation(registry, db, settings, llm)
                registry.on_change(curation.capability_changed)
                tools = GatewayTools(
                    CapTools(registry),
                    upstream,
                    expose_upstream=settings.expose_upstream,
                    executor=executor,
                    catalog=catalog,
                    usage=recorder,
                    page_size=settings.tools_page_size,
                    handlers=service_handlers(discovery=discovery, curation=curation),
                    policy=policy.enforcer,
                    list_wait=window.wait,
                    max_result_bytes=settings.sandbox.max_tool_result_bytes,
                )
                edge = ApprovalEdge(executor, policy.approvals, policy.audit)
                surface.auditor = policy.audit
                server = build_server(
                    tools,
                    default_scope=default_scope,
                    notifier=notifier,
                    edge=edge,
                    surface=surface,
                )
                with metrics.observing(tools, registry):  # counted while open (GET /metrics)
                    async with (
                        watcher.running(),
                        curation.running(),
                        requests.serving(server, settings, policy.audit, default_scope, upstream),
                    ):
                        await _warm(catalog, default_scope)
                        yield Gateway(
                            settings,
                            db,
                            registry,
                            upstream,
                            tools,
                            server,
                            default_scope,
                            executor,
                            catalog,
                            watcher,
                            discovery,
                            curation,
                            policy,
                            traces,
                            relay,
                            window,
                            surface,
                        )
        finally:
            # Not inside a cancel scope of ours: a pool may close task groups it opened in
            # start(), which anyio allows only from the same scope (ClientPool hosts its own).
            await upstream.stop()
    finally:
        with anyio.CancelScope(shield=True):
            await db.close()


async def _warm(catalog: CapabilityToolCatalog, scope: Scope) -> None:
    """Build the default caller's capability tools before the first ``tools/list`` asks."""
    try:
        await catalog.listing(scope)
    except PmlError as error:
        logger.warning("capability tools not listed at start: %s", error.message)
