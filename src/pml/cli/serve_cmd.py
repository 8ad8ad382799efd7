"""``pml serve [--stdio | --http HOST:PORT]``: run the gateway.

Over stdio, stdout carries the MCP protocol and nothing else: logs and notices go to
stderr. Over HTTP, the MCP endpoint is ``http://HOST:PORT/mcp`` and every request needs an
API key (``pml keys create``), except ``GET /health``. SIGHUP (or ``pml reload``) makes a
running gateway re-read its config (``docs/reload.md``).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Generator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from pml.cli.common import (
    ConfigOption,
    DebugRoutingOption,
    config_path,
    llm_key,
    load_cli_settings,
    run_command,
    with_debug_routing,
    with_model_process,
)
from pml.errors import ConfigError, InvalidInput

if TYPE_CHECKING:
    from pml.config import Settings
    from pml.gateway.early_stdio import EarlyAnswers
    from pml.gateway.reload import ReloadSource

_HOST_PORT = re.compile(
    r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9.-]+)):(?P<port>\d{1,5})"
)

MAX_ADDRESS = 300  # a DNS name is at most 253 characters
AGENT_MAY_APPROVE_WARNING = (
    "warning: [permissions] agent_may_approve = true: agents can approve their own risky "
    "tool calls with continue_workflow; approvals are then not a person's decision"
)


def parse_host_port(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as a pair, or ``INVALID_INPUT``."""
    match = _HOST_PORT.fullmatch(value.strip()) if len(value) <= MAX_ADDRESS else None
    port = int(match.group("port")) if match else -1
    if match is None or not 0 < port < 65536:
        shown = value if len(value) <= 60 else value[:60] + "…"
        raise InvalidInput(
            f"--http expects HOST:PORT with a port from 1 to 65535 "
            f"(e.g. 127.0.0.1:8765), not {shown!r}",
            field="http",
        )
    return match.group("v6") or match.group("host"), port


def register(app: typer.Typer) -> None:
    """Add ``serve`` to the ``pml`` application."""

    @app.command("serve")
    def serve(
        ctx: typer.Context,
        stdio: Annotated[
            bool, typer.Option("--stdio", help="Serve MCP over stdin/stdout (the default).")
        ] = False,
        http: Annotated[
            str | None,
            typer.Option(
                "--http",
                metavar="HOST:PORT",
                help="Serve streamable HTTP at http://HOST:PORT/mcp (API keys required).",
            ),
        ] = None,
        config: ConfigOption = None,
        debug_routing: DebugRoutingOption = False,
    ) -> None:
        """Run the gateway: stdio for one agent, or HTTP for a shared deployment."""
        early = None
        if http is None:  # the client's opening request is answered while PML starts
            from pml.gateway.early_stdio import EarlyAnswers

            early = EarlyAnswers.start()

        async def body() -> None:
            from pml.telemetry.setup import telemetry_running

            if stdio and http is not None:
                raise InvalidInput("give either --stdio or --http HOST:PORT, not both")
            address = parse_host_port(http) if http is not None else None
            settings = _for_serving(load_cli_settings(ctx, config), debug_routing, address)
            if settings.permissions.agent_may_approve:
                print(AGENT_MAY_APPROVE_WARNING, file=sys.stderr, flush=True)
            found = config_path(ctx, config)
            with (
                telemetry_running(settings, os.environ),
                _reloads(found, debug_routing, address) as reload,
            ):
                await _serve(settings, address, reload, early)

        try:
            run_command(body)
        except KeyboardInterrupt:
            raise typer.Exit(code=130) from None


@contextmanager
def _reloads(
    config: Path | None, debug_routing: bool, address: tuple[str, int] | None
) -> Generator[ReloadSource]:
    """SIGHUP (and ``pml reload``, which finds this process by its file) re-reads the config
    this process started with, in the environment it started with."""
    from platformdirs import user_data_dir

    from pml.gateway.reload import ReloadSource, config_loader, sighup_requests
    from pml.gateway.running import announced, find_config, run_directory

    cwd = Path.cwd()
    path = find_config(config, os.environ, cwd)
    load = config_loader(
        path,
        environ=os.environ,
        cwd=cwd,
        adjust=partial(_for_serving, debug_routing=debug_routing, address=address),
    )
    transport = "stdio" if address is None else "http {}:{}".format(*address)
    directory = run_directory(Path(user_data_dir("pml")))
    with sighup_requests() as requests:  # before the file: a found process never dies of it
        yield ReloadSource(load, requests, partial(announced, directory, path, transport=transport))


def _for_serving(
    settings: Settings, debug_routing: bool, address: tuple[str, int] | None
) -> Settings:
    routed = with_debug_routing(settings, debug_routing)
    return with_model_process(routed, stdio=address is None)


async def _serve(
    settings: Settings,
    address: tuple[str, int] | None,
    reload: ReloadSource | None = None,
    early: EarlyAnswers | None = None,
) -> None:
    if address is None:
        from pml.gateway.serve_stdio import serve_stdio

        await serve_stdio(settings, llm_api_key=llm_key(settings), reload=reload, early=early)
        return
    from pml.gateway.http import serve_http

    host, port = address
    try:
        await serve_http(
            settings, host, port, ready=_announce, llm_api_key=llm_key(settings), reload=reload
        )
    except OSError as error:
        reason = error.strerror or str(error)
        raise ConfigError(f"cannot serve HTTP on {host}:{port}: {reason}") from None


def _announce(url: str) -> None:
    print(f"PML gateway: MCP at {url}/mcp (health: {url}/health)", file=sys.stderr, flush=True)
