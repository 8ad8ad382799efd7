"""Running ``pml connect`` over stdio: local servers, sandbox, policy, trace syncer, gateway.

    await serve_connect(settings, server_url="https://pml.example.com", api_key=key)

Opens, from this machine's ``pml.toml``: its database (grants and audit of the local
enforcement point), its upstream servers, the sandbox and the policy pipeline; the durable
trace queue (``queue_path``, by default one file per server URL and key in the user data
dir); the session to the shared gateway; then serves MCP on stdin/stdout until the agent
leaves or SIGTERM/SIGINT. On the way out the syncer flushes what it can (the rest stays
queued for the next start) and the local servers stop.
"""

from __future__ import annotations

import hashlib
import logging
import signal
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types
from platformdirs import user_data_dir

from pml import __version__
from pml.client.connect import ConnectTools
from pml.client.elicit_relay import ElicitationRelay
from pml.client.remote import RemoteGateway, client_headers, mcp_url
from pml.client.runner import LocalRunner
from pml.client.syncer import TraceSyncer
from pml.client.trace_queue import TraceQueue
from pml.config import Settings
from pml.gateway.notify import Context, ToolListNotifier
from pml.gateway.policy_services import open_policy
from pml.gateway.server import GatewayServer
from pml.gateway.services import default_pool
from pml.gateway.stdio import claim_stdio, serve_on_pipes
from pml.llm import open_llm
from pml.registry.scope import Scope
from pml.registry.service import CapabilityRegistry
from pml.storage.database import Database
from pml.upstream.children import terminate_children
from pml.wiring import routing_rules, scope_of

logger = logging.getLogger(__name__)

FLUSH_TIMEOUT_S = 5.0
INSTRUCTIONS = (
    "PML (through pml connect): use pml_discover to find tools and capabilities, pml_execute "
    "to run a Python snippet that calls them (successful snippets become capabilities of "
    "your team's PML), and the cap_* tools to list, look up and rename capabilities."
)


def default_queue_path(server_url: str, api_key: str) -> Path:
    """One queue per gateway and key: traces are only ever sent where they belong."""
    digest = hashlib.sha256(f"{mcp_url(server_url)}\n{api_key}".encode()).hexdigest()[:16]
    return Path(user_data_dir("pml")) / "traces" / f"{digest}.sqlite3"


def build_connect_server(
    tools: ConnectTools, notifier: ToolListNotifier, relay: ElicitationRelay | None = None
) -> GatewayServer:
    """The MCP server the agent talks to (declares ``tools.listChanged``); ``relay`` passes
    the gateway's approval forms on to the agent's client."""
    me = Scope("local", "connect", "agent")

    def scope_of_ctx(_ctx: Context) -> Scope:
        return me

    async def on_list_tools(
        ctx: Context, _params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        notifier.track(ctx, me)
        return mcp_types.ListToolsResult(tools=await tools.list_tools())

    async def on_call_tool(
        ctx: Context, params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        notifier.track(ctx, me)
        if relay is not None:
            relay.remember(ctx)
        return await tools.call_tool(params.name, params.arguments)

    server = GatewayServer(
        "pml-connect",
        version=__version__,
        title="PML (pml connect)",
        instructions=INSTRUCTIONS,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
        on_subscriptions_listen=notifier.listen_handler(scope_of_ctx),
    )
    server.notifier = notifier
    tools.on_tools_changed(notifier.tools_changed)
    return server


@asynccontextmanager
async def open_runner(settings: Settings, llm_api_key: str | None) -> AsyncGenerator[LocalRunner]:
    """This machine's servers, sandbox and enforcement point, as a ``LocalRunner``."""
    from pml.sandbox.fair import fair_engine

    db = await Database.open(settings.database_url)
    try:
        registry = CapabilityRegistry(db, routing=routing_rules(settings))
        pool = default_pool(settings, db)
        scope = scope_of(settings)
        engine = fair_engine(  # its one user: queued beyond the pool, BUSY beyond the queue
            settings.sandbox, settings.limits, only_tenant=(scope.org, scope.project, scope.user)
        )
        try:
            await pool.start(wait=False)  # the agent's initialize never waits for them
            async with (
                open_llm(settings.llm, api_key=llm_api_key) as llm,
                open_policy(settings, db, llm) as policy,
            ):
                yield LocalRunner(
                    pool=pool,
                    engine=engine,
                    registry=registry,
                    limits=settings.sandbox,
                    scope=scope,
                    policy=policy.enforcer,
                )
        finally:
            with anyio.CancelScope(shield=True):
                await engine.aclose()
            await pool.stop()
    finally:
        with anyio.CancelScope(shield=True):
            await db.close()


async def serve_connect(
    settings: Settings,
    *,
    server_url: str,
    api_key: str,
    queue_path: Path | None = None,
    llm_api_key: str | None = None,
) -> None:
    """Serve the agent over stdio until it leaves or the process is told to stop."""
    servers = sorted(settings.servers)
    relay = ElicitationRelay()
    remote = RemoteGateway(server_url, api_key, servers=servers, elicitation=relay)
    base_url = remote.url.removesuffix("/mcp")
    queue = TraceQueue(queue_path or default_queue_path(server_url, api_key))
    import httpx

    async with (
        claim_stdio() as pipes,
        open_runner(settings, llm_api_key) as runner,
        httpx.AsyncClient(headers=client_headers(api_key, servers)) as http,
    ):
        syncer = TraceSyncer(queue, base_url=base_url, api_key=api_key, http=http)
        tools = ConnectTools(remote, runner, syncer)
        remote.on_tools_changed(tools.gateway_changed)
        server = build_connect_server(tools, ToolListNotifier(), relay)
        stopping = anyio.CancelScope()
        async with anyio.create_task_group() as group:
            group.start_soon(_stop_on_signal, stopping)
            async with remote.running(), syncer.running(flush_timeout_s=FLUSH_TIMEOUT_S):
                with stopping:
                    await _serve(server, pipes)
            group.cancel_scope.cancel()
    queue.close()
    terminate_children(signal.SIGKILL)


async def _serve(server: GatewayServer, pipes: Any) -> None:
    if pipes is not None:
        await serve_on_pipes(server, pipes)
        return
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


async def _stop_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for number in signals:
            logger.warning("received %s: stopping", signal.Signals(number).name)
            scope.cancel()
            return
