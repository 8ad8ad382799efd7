"""``pml status``: what the running gateway sees now (asked over its control socket), or,
when none runs with this config, the last state stored in the database, labelled so; plus
the database, capability counts, API keys, the tool catalog and the latest curation run.

Read-only. Exit 1 when the database cannot be reached (the report is still printed, and one
line on stderr says why). Every string that comes from the user, an upstream server or a
gateway is printed as ``rich.text.Text``, never parsed as markup::

    $ pml status --json
    {"gateway": {"running": true, "pid": 4242, ...}, "servers_source": "live",
     "database": {"exists": true, "up_to_date": true, ...}, "servers": [...], ...}

The heavy parts (SQLAlchemy, the registry) are imported when the command runs, so that
``pml --help`` and the other commands do not pay for them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from pml.cli.common import (
    ConfigOption,
    JsonOption,
    config_path,
    load_cli_settings,
    print_json,
    run_command,
)

if TYPE_CHECKING:
    from rich.text import Text

    from pml.cli.status_live import LiveView
    from pml.config import Settings


def safe_text(value: object) -> Text:
    """``value`` as plain text: never parsed as markup, control characters shown escaped.

    Upstream servers write ``last_error``; an escape sequence in it must not reach the
    terminal, and a newline must not break the one-line layout.
    """
    from rich.text import Text

    text = str(value)
    if not text.isprintable():
        text = "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)
    return Text(text)


async def collect_status(
    settings: Settings, *, live: LiveView | None = None, config: Path | None = None
) -> dict[str, Any]:
    """Everything ``pml status`` reports (``status_collect.collect_status``)."""
    from pml.cli.status_collect import collect_status as collect

    return await collect(settings, live=live, config=config)


def unreachable_line(report: dict[str, Any]) -> str | None:
    """The one stderr line when the database cannot be reached (None when it can)."""
    database = report["database"]
    if database["reachable"] is not False:
        return None
    reason = " ".join(str(database["error"] or "no answer").split())
    return f"error: STORAGE_ERROR: the database {database['url']} is unreachable: {reason}"


def register(app: typer.Typer) -> None:
    """Add ``status`` to the ``pml`` application."""

    @app.command("status")
    def status(
        ctx: typer.Context, config: ConfigOption = None, as_json: JsonOption = False
    ) -> None:
        """Show the running gateway's view (servers now), database, capabilities, API keys."""
        from pml.cli.status_live import ask_running_gateways
        from pml.gateway.running import find_config

        async def body() -> dict[str, Any]:
            settings = load_cli_settings(ctx, config)
            path = find_config(config_path(ctx, config), os.environ, Path.cwd())
            live = ask_running_gateways(path)
            return await collect_status(settings, live=live, config=path)

        report = run_command(body, as_json=as_json)
        if as_json:
            print_json(report)
        else:
            from rich.console import Console

            from pml.cli.status_view import print_status

            print_status(report, Console())
        line = unreachable_line(report)
        if line is not None:
            print(line, file=sys.stderr)
            raise typer.Exit(code=1)
