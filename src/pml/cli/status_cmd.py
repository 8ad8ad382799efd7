"""``pml status``: the database, the capability counts and the configured upstream servers.

Read-only: a database behind the shipped migrations is reported, not upgraded.
"""

from __future__ import annotations

from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from pml.cli.common import ConfigOption, JsonOption, load_cli_settings, print_json, run_command
from pml.cli.runtime import scope_of
from pml.config import Settings
from pml.registry.service import CapabilityRegistry
from pml.storage.database import Database, describe_url, head_revision


async def collect_status(settings: Settings) -> dict[str, Any]:
    """Everything ``pml status`` reports, as JSON-ready data."""
    scope = scope_of(settings)
    db = await Database.open(settings.database_url, migrate=False)
    try:
        revision = await db.current_revision()
        head = head_revision()
        counts = await CapabilityRegistry(db).counts(scope) if revision == head else None
        backend = db.dialect
    finally:
        await db.close()
    servers = [
        {
            "name": name,
            "transport": "http" if server.url else "stdio",
            "target": server.url or " ".join([server.command or "", *server.args]).strip(),
            "lazy": server.lazy,
            "disabled": server.disabled,
            "state": "disabled" if server.disabled else "not started",
        }
        for name, server in sorted(settings.servers.items())
    ]
    return {
        "database": {
            "url": describe_url(settings.database_url),
            "backend": backend,
            "revision": revision,
            "head": head,
            "up_to_date": revision == head,
        },
        "scope": {"org": scope.org, "project": scope.project, "user": scope.user},
        "capabilities": counts,
        "servers": servers,
    }


def register(app: typer.Typer) -> None:
    """Add ``status`` to the ``pml`` application."""

    @app.command("status")
    def status(
        ctx: typer.Context, config: ConfigOption = None, as_json: JsonOption = False
    ) -> None:
        """Show the database, capability counts and upstream servers."""

        async def body() -> dict[str, Any]:
            return await collect_status(load_cli_settings(ctx, config))

        report = run_command(body, as_json=as_json)
        if as_json:
            print_json(report)
            return
        console = Console()
        database = report["database"]
        state = "up to date" if database["up_to_date"] else "needs `pml db upgrade`"
        console.print(
            f"[bold]database[/bold] {database['url']} ({database['backend']}, "
            f"revision {database['revision'] or 'none'}, {state})"
        )
        scope = report["scope"]
        console.print(f"[bold]scope[/bold] {scope['org']}.{scope['project']} as {scope['user']}")
        counts = report["capabilities"]
        if counts is not None:
            console.print(
                f"[bold]capabilities[/bold] {counts['named']} named, "
                f"{counts['unnamed']} unnamed; {counts['mcp_servers']} MCP server records"
            )
        table = Table("server", "transport", "target", "state", title="upstream servers")
        for server in report["servers"]:
            table.add_row(server["name"], server["transport"], server["target"], server["state"])
        if report["servers"]:
            console.print(table)
        else:
            console.print(
                "no upstream servers configured (add [servers.NAME] to pml.toml)", markup=False
            )
