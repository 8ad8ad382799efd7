"""``pml reload [--config PATH]``: make the gateways running with a config re-read it.

Every ``pml serve`` (stdio gateways started by MCP clients, ``pml serve --http``) leaves a
file naming its config while it runs; ``pml reload`` sends SIGHUP to each process serving
the config it is given (``--config``, ``$PML_CONFIG``, else ``./pml.toml``) and says how
many it told. Each gateway then logs what it applied, or why it refused the new config.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from pml.cli.common import ConfigOption, config_path, fail, print_json

ReloadJsonOption = Annotated[
    bool, typer.Option("--json", help="Print the gateways told, as a JSON list.")
]


def register(app: typer.Typer) -> None:
    """Add ``reload`` to the ``pml`` application."""

    @app.command("reload")
    def reload(
        ctx: typer.Context,
        config: ConfigOption = None,
        as_json: ReloadJsonOption = False,
    ) -> None:
        """Make the running gateways re-read their config (same as sending them SIGHUP)."""
        from platformdirs import user_data_dir

        from pml.errors import NotFound
        from pml.gateway.running import (
            find_config,
            run_directory,
            running_gateways,
            tell_to_reload,
        )

        path = find_config(config_path(ctx, config), os.environ, Path.cwd())
        directory = run_directory(Path(user_data_dir("pml")))
        told = tell_to_reload(running_gateways(directory, path))
        shown = _shown(path) if path is not None else "the default settings (no config file)"
        if not told:
            raise fail(NotFound(f"no gateway is running with {shown}"), as_json=as_json)
        if as_json:
            print_json(
                [
                    {
                        "pid": gateway.pid,
                        "transport": gateway.transport,
                        "config": gateway.config or None,
                        "started_at": gateway.started_at,
                    }
                    for gateway in told
                ]
            )
            return
        count = len(told)
        pids = ", ".join(str(gateway.pid) for gateway in told)
        plural = "gateway" if count == 1 else "gateways"
        typer.echo(f"told {count} {plural} to reload {shown} (pid {pids}); each logs the outcome")


MAX_SHOWN = 300


def _shown(path: Path) -> str:
    """A path as one safe line: control characters escaped, a very long one cut."""
    text = str(path)
    cut = text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "…"
    return "".join(char if char.isprintable() else ascii(char)[1:-1] for char in cut)
