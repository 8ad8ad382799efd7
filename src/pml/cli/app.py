"""The ``pml`` application: command groups are registered here, bodies live in modules."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from pml.cli import (
    agent_cmd,
    approvals_cmd,
    audit_cmd,
    cap_cmd,
    connect_cmd,
    dashboard_cmd,
    db_cmd,
    discover_cmd,
    execute_cmd,
    init_cmd,
    keys_cmd,
    memory_cmd,
    perms_cmd,
    reload_cmd,
    serve_cmd,
    status_cmd,
)

app = typer.Typer(
    name="pml",
    help="PML, the Procedural Memory Layer: an MCP gateway that learns capabilities.",
    no_args_is_help=True,
    invoke_without_command=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def root(
    ctx: typer.Context,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="Path to pml.toml (default: $PML_CONFIG, ./pml.toml)."),
    ] = None,
    show_version: Annotated[
        bool,
        typer.Option("--version", help="Print the version and exit.", is_eager=True),
    ] = False,
) -> None:
    """PML, the Procedural Memory Layer: an MCP gateway that learns capabilities."""
    if show_version:
        from pml import __version__

        typer.echo(f"pml {__version__}")
        raise typer.Exit()
    ctx.obj = {"config": config}


init_cmd.register(app)
db_cmd.register(app)
cap_cmd.register(app)
status_cmd.register(app)
keys_cmd.register(app)
perms_cmd.register(app)
approvals_cmd.register(app)
connect_cmd.register(app)
dashboard_cmd.register(app)
audit_cmd.register(app)
serve_cmd.register(app)
reload_cmd.register(app)
execute_cmd.register(app)
discover_cmd.register(app)
memory_cmd.register(app)
agent_cmd.register(app)


# Loggers whose warnings a command already shows in its own output (e.g. alias warnings).
SHOWN_BY_COMMANDS = frozenset({"pml.registry.service"})


def configure_logging() -> None:
    """Warnings and errors to stderr, one line each, without repeating what commands print."""
    handler = logging.StreamHandler()
    handler.set_name("pml")  # pml serve replaces it with [log]'s (pml.telemetry.logs)
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    handler.addFilter(lambda record: record.name not in SHOWN_BY_COMMANDS)
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)


def main() -> None:
    """Console-script entry point."""
    configure_logging()
    app()
