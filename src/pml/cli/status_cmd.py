"""``pml status``: the database, capability counts, API keys, the tool catalog, the latest
curation run and, for each configured upstream server, the last state a running gateway
reported.

Read-only: a database behind the shipped migrations is reported, not upgraded, and an SQLite
file that does not exist is reported, not created. Every string that comes from the user or
from an upstream server is printed as ``rich.text.Text``, never parsed as markup::

    $ pml status --json
    {"database": {"exists": true, "up_to_date": true, ...}, "servers": [...], ...}
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from pml.cli.common import ConfigOption, JsonOption, load_cli_settings, print_json, run_command
from pml.cli.curation_view import latest_curation, print_latest_curation
from pml.config import ServerSettings, Settings
from pml.errors import StorageError
from pml.registry.scope import Scope
from pml.registry.service import CapabilityRegistry
from pml.storage.database import Database, async_url, describe_url, head_revision
from pml.storage.keys_repo import SqlApiKeyRepository
from pml.storage.tables import tool_schema, upstream_servers
from pml.storage.usage_repo import SqlToolUsageRepository
from pml.wiring import scope_of

TOOL_USAGE_ROWS = 10
UPGRADE_HINT = "run `pml db upgrade` to create or migrate it"


def sqlite_file(url: str) -> Path | None:
    """The file an SQLite URL names (None for PostgreSQL and in-memory databases)."""
    target = async_url(url)
    database = target.database or ""
    if target.get_backend_name() != "sqlite" or database in {"", ":memory:"}:
        return None
    return Path(database).expanduser()


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


async def _reports(db: Database) -> dict[str, dict[str, Any]]:
    """The last report of each upstream server, by name."""
    async with db.read() as conn:
        rows = await conn.execute(sa.select(upstream_servers))
        return {str(row.name): dict(row._mapping) for row in rows}  # pyright: ignore[reportPrivateUsage]


async def _catalog(db: Database) -> tuple[dict[str, int], list[dict[str, Any]]]:
    """Stored tools per server, and the flagged definitions (changed since first seen)."""
    t = tool_schema.c
    async with db.read() as conn:
        counts = {
            str(server): int(count)
            for server, count in await conn.execute(
                sa.select(t.server_id, sa.func.count()).group_by(t.server_id)
            )
        }
        flagged_rows = await conn.execute(
            sa.select(t.server_id, t.tool_name, t.first_seen_at, t.updated_at)
            .where(t.flagged.is_(True))
            .order_by(t.server_id, t.tool_name)
        )
        flagged = [
            {
                "server": row.server_id,
                "tool": row.tool_name,
                "first_seen_at": _iso(row.first_seen_at),
                "updated_at": _iso(row.updated_at),
            }
            for row in flagged_rows
        ]
    return counts, flagged


async def _key_counts(db: Database) -> dict[str, int]:
    async with db.read() as conn:
        return await SqlApiKeyRepository(conn).count_by_state()


def _server_entry(
    name: str,
    server: ServerSettings,
    report: dict[str, Any] | None,
    catalog_tools: int | None,
    flagged: Iterable[str],
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": name,
        "transport": "http" if server.url else "stdio",
        "target": server.url or " ".join([server.command or "", *server.args]).strip(),
        "lazy": server.lazy,
        "disabled": server.disabled,
        "state": "never started",
        "reported": report is not None,
        "tool_count": None,
        "last_latency_ms": None,
        "last_error": None,
        "updated_at": None,
        "reported_by": None,
        "catalog_tools": catalog_tools,
        "flagged_tools": [],
    }
    reported_flags: list[str] = []
    if report is not None:
        entry.update(
            state=report["state"],
            tool_count=report["tool_count"],
            last_latency_ms=report["last_latency_ms"],
            last_error=report["last_error"],
            updated_at=_iso(report["updated_at"]),
            reported_by=report["reported_by"],
        )
        stored: object = report["flagged_tools"]
        if isinstance(stored, list):
            reported_flags = [str(tool) for tool in stored]  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    if server.disabled:
        entry["state"] = "disabled"
    entry["flagged_tools"] = sorted({*flagged, *reported_flags})
    return entry


async def collect_status(settings: Settings) -> dict[str, Any]:
    """Everything ``pml status`` reports, as JSON-ready data."""
    scope = scope_of(settings)
    head = head_revision()
    database: dict[str, Any] = {
        "url": describe_url(settings.database_url),
        "backend": async_url(settings.database_url).get_backend_name(),
        "exists": True,
        "reachable": None,
        "revision": None,
        "head": head,
        "up_to_date": False,
        "error": None,
        "hint": None,
    }
    counts: dict[str, int] | None = None
    keys: dict[str, int] | None = None
    reports: dict[str, dict[str, Any]] = {}
    catalog_counts: dict[str, int] | None = None
    flagged: list[dict[str, Any]] | None = None
    usage: list[dict[str, Any]] | None = None
    curation: dict[str, Any] | None = None
    path = sqlite_file(settings.database_url)
    if path is not None and not path.is_file():
        database.update(exists=False, hint=UPGRADE_HINT)
    else:
        db = await Database.open(settings.database_url, migrate=False)
        try:
            revision = await db.current_revision()
            database.update(reachable=True, revision=revision, up_to_date=revision == head)
            if revision == head:
                counts = await CapabilityRegistry(db).counts(scope)
                keys = await _key_counts(db)
                reports = await _reports(db)
                catalog_counts, flagged = await _catalog(db)
                usage = await _tool_usage(db, scope)
                curation = await latest_curation(db, scope)
            else:
                database["hint"] = UPGRADE_HINT
        except StorageError as error:
            database.update(reachable=False, error=error.message)
        finally:
            await db.close()
    by_server: dict[str, list[str]] = {}
    for item in flagged or []:
        by_server.setdefault(item["server"], []).append(item["tool"])
    servers = [
        _server_entry(
            name,
            server,
            reports.get(name),
            catalog_counts.get(name, 0) if catalog_counts is not None else None,
            by_server.get(name, []),
        )
        for name, server in sorted(settings.servers.items())
    ]
    catalog = None
    if catalog_counts is not None and flagged is not None:
        catalog = {"tools": sum(catalog_counts.values()), "flagged": flagged}
    return {
        "database": database,
        "scope": {"org": scope.org, "project": scope.project, "user": scope.user},
        "capabilities": counts,
        "api_keys": keys,
        "catalog": catalog,
        "servers": servers,
        "tool_usage": usage,
        "curation": curation,
    }


async def _tool_usage(db: Database, scope: Scope) -> list[dict[str, Any]]:
    """The scope's most called tools (capabilities as ``pml-capabilities`` + FQDN)."""
    async with db.read() as conn:
        rows = await SqlToolUsageRepository(conn).summary(
            scope.org, scope.project, limit=TOOL_USAGE_ROWS
        )
    return [row.to_dict() for row in rows]


def _usage_table(usage: list[dict[str, Any]]) -> Table:
    table = Table("server", "tool", "calls", "success", "avg latency", "last call",
                  title="tool calls in this scope (most called first)")  # fmt: skip
    for row in usage:
        rate = row["successes"] / row["calls"] if row["calls"] else 0.0
        cells = (
            row["server_id"],
            row["tool_name"],
            str(row["calls"]),
            f"{rate:.0%}",
            f"{row['avg_latency_ms']:.1f} ms",
            (row["last_called_at"] or "-")[:19].replace("T", " "),
        )
        table.add_row(*(safe_text(cell) for cell in cells))
    return table


def safe_text(value: object) -> Text:
    """``value`` as plain text: never parsed as markup, control characters shown escaped.

    Upstream servers write ``last_error``; an escape sequence in it must not reach the
    terminal, and a newline must not break the one-line layout.
    """
    text = str(value)
    if not text.isprintable():
        text = "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)
    return Text(text)


def _label(name: str, *parts: str) -> Text:
    """``name`` in bold followed by plain ``parts`` (never parsed as markup)."""
    return Text.assemble((name, "bold"), " ", *(safe_text(part) for part in parts))


def _database_line(database: dict[str, Any]) -> Text:
    if not database["exists"]:
        return _label("database", f"{database['url']} does not exist yet; {database['hint']}")
    if database["reachable"] is False:
        return _label("database", f"{database['url']} is unreachable: {database['error']}")
    state = "up to date" if database["up_to_date"] else "needs `pml db upgrade`"
    return _label(
        "database",
        f"{database['url']} ({database['backend']}, "
        f"revision {database['revision'] or 'none'}, {state})",
    )


def _servers_table(servers: list[dict[str, Any]]) -> Table:
    table = Table(
        "server", "transport", "target", "state", "tools", "latency", "flagged", "reported",
        title="upstream servers",
    )  # fmt: skip
    for server in servers:
        tools = server["tool_count"] if server["reported"] else server["catalog_tools"]
        latency = server["last_latency_ms"]
        reported = (
            f"{server['updated_at'][:19].replace('T', ' ')} by {server['reported_by']}"
            if server["reported"]
            else "-"
        )
        cells = (
            server["name"],
            server["transport"],
            server["target"],
            server["state"],
            "-" if tools is None else str(tools),
            "-" if latency is None else f"{latency:.1f} ms",
            ", ".join(server["flagged_tools"]) or "-",
            reported,
        )
        table.add_row(*(safe_text(cell) for cell in cells))
    return table


def print_status(report: dict[str, Any], console: Console) -> None:
    """The report as plain text."""
    console.print(_database_line(report["database"]))
    scope = report["scope"]
    console.print(_label("scope", f"{scope['org']}.{scope['project']} as {scope['user']}"))
    counts = report["capabilities"]
    if counts is not None:
        console.print(
            _label(
                "capabilities",
                f"{counts['named']} named, {counts['unnamed']} unnamed; "
                f"{counts['mcp_servers']} MCP server records",
            )
        )
    keys = report["api_keys"]
    if keys is not None:
        console.print(_label("api keys", f"{keys['active']} active, {keys['revoked']} revoked"))
    catalog = report["catalog"]
    if catalog is not None:
        console.print(
            _label("tool catalog", f"{catalog['tools']} tools, {len(catalog['flagged'])} flagged")
        )
    servers = report["servers"]
    if servers:
        console.print(_servers_table(servers))
        for server in servers:
            if server["last_error"]:
                console.print(safe_text(f"{server['name']}: last error: {server['last_error']}"))
    else:
        console.print(safe_text("no upstream servers configured (add [servers.NAME] to pml.toml)"))
    if report["capabilities"] is not None:
        print_latest_curation(report["curation"], console)
    usage = report["tool_usage"]
    if usage:
        console.print(_usage_table(usage))
    if catalog is not None and catalog["flagged"]:
        console.print(_label("flagged tool definitions", "(changed since first seen):"))
        for item in catalog["flagged"]:
            changed = (item["updated_at"] or "")[:19].replace("T", " ")
            console.print(safe_text(f"  {item['server']}:{item['tool']} (changed {changed})"))


def register(app: typer.Typer) -> None:
    """Add ``status`` to the ``pml`` application."""

    @app.command("status")
    def status(
        ctx: typer.Context, config: ConfigOption = None, as_json: JsonOption = False
    ) -> None:
        """Show the database, capabilities, curation, API keys, tool catalog and servers."""

        async def body() -> dict[str, Any]:
            return await collect_status(load_cli_settings(ctx, config))

        report = run_command(body, as_json=as_json)
        if as_json:
            print_json(report)
            return
        print_status(report, Console())
