"""Serving the gateway over this process's stdin/stdout (``pml serve --stdio``).

await serve_stdio(settings)            # until the client leaves or SIGTERM/SIGINT
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Awaitable, Callable
from contextlib import nullcontext

import anyio
from mcp.server.stdio import stdio_server

from pml.config import Settings
from pml.gateway.control import answering_status
from pml.gateway.early_stdio import EarlyAnswers, HandedOver
from pml.gateway.fast_lane import ToolCallLane
from pml.gateway.reload import ReloadSource, reloading
from pml.gateway.server import Gateway, open_gateway
from pml.gateway.stdio import claim_stdio, serve_on_pipes
from pml.gateway.stop_signals import signals_stop_children
from pml.telemetry import tracing
from pml.upstream.base import UpstreamPool
from pml.upstream.children import terminate_children

logger = logging.getLogger(__name__)


async def serve_stdio(
    settings: Settings,
    *,
    pool: UpstreamPool | None = None,
    llm_api_key: str | None = None,
    reload: ReloadSource | None = None,
    early: EarlyAnswers | None = None,
) -> None:
    """Serve over this process's stdin/stdout until the client leaves or SIGTERM/SIGINT;
    with ``reload``, its requests (SIGHUP) reload the config meanwhile; ``early``: the
    thread that answered the opening request while this process started (``early_stdio``).

    Pipes (what MCP clients give) are served on the event loop with the pass-through fast
    lane; a terminal or a file falls back to the SDK's threaded stdio transport. On a signal
    the upstream children are signalled at once and the gateway closes (sessions stopped,
    database closed); then the process ends by that signal.
    """
    # stdout is claimed first: whatever start-up prints (migrations, children) goes to stderr.
    handed = early.handover() if early is not None else HandedOver()
    async with claim_stdio(pending=handed.pending) as pipes:
        if pipes is not None:

            async def on_pipes(gateway: Gateway) -> None:
                lane = ToolCallLane(
                    gateway.tools,
                    gateway.default_scope,
                    server_info=gateway.server.server_info_stamp,
                    write=pipes.write_line,
                    session_tracked=lambda: bool(gateway.server.notifier.scopes()),
                )
                await serve_on_pipes(gateway.server, pipes, lane=lane, answered=handed.answered)

            await _serve_until_stopped(
                settings, pool, on_pipes, llm_api_key, reload, handed.started_at
            )
            return
    async with stdio_server() as (read, write):

        async def on_sdk_streams(gateway: Gateway) -> None:
            server = gateway.server
            await server.run(read, write, server.create_initialization_options())

        # Ends by the signal (if any) inside: leaving stdio_server waits for its stdin reader.
        await _serve_until_stopped(
            settings, pool, on_sdk_streams, llm_api_key, reload, handed.started_at
        )


async def _serve_until_stopped(
    settings: Settings,
    pool: UpstreamPool | None,
    serve: Callable[[Gateway], Awaitable[None]],
    llm_api_key: str | None,
    reload: ReloadSource | None = None,
    started_at: float | None = None,
) -> None:
    received: list[int] = []
    serving = anyio.CancelScope()  # a signal cancels the serving, never the orderly stop
    announce = reload.announce if reload is not None else nullcontext
    with signals_stop_children(received, serving), announce() as announcement:
        async with (
            open_gateway(
                settings, pool=pool, llm_api_key=llm_api_key, started_at=started_at
            ) as gateway,
            reloading(gateway, reload),
            answering_status(announcement, gateway),  # pml status asks it (control.py)
        ):
            with serving:
                await serve(gateway)
        # Backstop: every upstream session is closed by now, so any child still alive would
        # outlive PML (the SDK's shielded clean-up can be cut short by asyncio's final
        # cancellation of leftover tasks).
        leftover = terminate_children(signal.SIGKILL)
        if leftover:
            logger.warning("killed %d upstream process(es) left after shutdown", len(leftover))
    if received:
        tracing.finish()  # the serving block never ends: send the last spans first
        signal.signal(received[0], signal.SIG_DFL)
        signal.raise_signal(received[0])
