"""What ``pml status`` reports, as JSON-ready data: the database (read-only), capability
counts and the capabilities that keep failing, API keys, the tool catalog, the latest
curation run, the embedding model, and each configured upstream server, live when a running
gateway answered (``status_live``), else as last stored.

    report = await collect_status(settings, live=ask_running_gateways(config_path))

A database behind the shipped migrations is reported, not upgraded, and an SQLite file that
does not exist is reported, not created. Imported only when ``pml status`` runs (it brings
SQLAlchemy).
"""

from __future__ import annotations

import stat
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import anyio
import sqlalchemy as sa

from pml.cli.curation_view import latest_curation
from pml.cli.status_live import LiveView
from pml.config import ServerSettings, Settings
from pml.errors import PmlError, StorageError
from pml.registry.scope import Scope
from pml.registry.service import CapabilityRegistry
from pml.storage.capability_usage import failing_in_project
from pml.storage.database import Database, async_url, describe_url, head_revision
from pml.storage.keys_repo import SqlApiKeyRepository
from pml.storage.tables import tool_schema, upstream_servers
from pml.storage.usage_repo import SqlToolUsageRepository
from pml.wiring import scope_of

TOOL_USAGE_ROWS: Final = 10
UPGRADE_HINT: Final = "run `pml db upgrade` to create or migrate it"
DATABASE_TIMEOUT_S: Final = 10.0  # every read of the report together
CLOSE_TIMEOUT_S: Final = 2.0


def sqlite_file(url: str) -> Path | None:
    """The file an SQLite URL names (None for PostgreSQL and in-memory databases)."""
    target = async_url(url)
    database = target.database or ""
    if target.get_backend_name() != "sqlite" or database in {"", ":memory:"}:
        return None
    return Path(database).expanduser()


def _sqlite_problem(path: Path) -> str | None:
    """Why an SQLite file cannot be read: ``missing`` (created by ``pml db upgrade``), or
    what is wrong; None when it is a file (whether it is a database is for SQLite to say)."""
    try:
        found = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return "missing"
    except OSError as error:
        return f"cannot reach {path}: {error.strerror or error}"
    if not stat.S_ISREG(found.st_mode):
        return f"{path} is not a regular file"
    return None


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


async def _failing(db: Database, scope: Scope) -> dict[str, Any]:
    """``{"count", "names"}``: the project's capabilities that keep failing (at most
    ``FAILING_SHOWN`` names, the most recently used first)."""
    async with db.read() as conn:
        count, names = await failing_in_project(conn, scope)
    return {"count": count, "names": names}


def embedding_model(settings: Settings, live: LiveView | None) -> dict[str, Any]:
    """The embedding model in use: the running gateway's, else the one a gateway started
    with these settings would load (its files are checked, the model is not built)."""
    told = live.section().get("embedding_model") if live is not None and live.answer else None
    if told:
        return {"model": told, "source": "gateway"}
    from pml.discovery.embedder import load_embedder

    try:
        return {"model": load_embedder(settings.discovery.embedder).model_id, "source": "settings"}
    except PmlError as error:  # "minilm" asked for and not installed
        return {"model": None, "source": "settings", "error": error.message}


async def _tool_usage(db: Database, scope: Scope) -> list[dict[str, Any]]:
    """The scope's most called tools (capabilities as ``pml-capabilities`` + FQDN)."""
    async with db.read() as conn:
        rows = await SqlToolUsageRepository(conn).summary(
            scope.org, scope.project, limit=TOOL_USAGE_ROWS
        )
    return [row.to_dict() for row in rows]


def _server_entry(
    name: str,
    server: ServerSettings | None,
    report: dict[str, Any] | None,
    catalog_tools: int | None,
    flagged: Iterable[str],
    live: dict[str, Any] | None,
    live_by: str | None,
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": name,
        "transport": ("http" if server.url else "stdio") if server else None,
        # As written: a ${TOKEN} in the URL or the arguments is shown as ${TOKEN}.
        "target": (server.url or " ".join([server.command or "", *server.args]).strip())
        if server
        else "",
        "lazy": server.lazy if server else False,
        "disabled": server.disabled if server else False,
        "state": "never started",
        "reported": report is not None,
        "tool_count": None,
        "last_latency_ms": None,
        "last_error": None,
        "updated_at": None,
        "reported_by": None,
        "catalog_tools": catalog_tools,
        "flagged_tools": [],
        "source": None,
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
            source="stored",
        )
        stored: object = report["flagged_tools"]
        if isinstance(stored, list):
            reported_flags = [str(tool) for tool in stored]  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    if live is not None:
        entry.update(_live_fields(live), reported=True, reported_by=live_by, source="live")
        live_flags: object = live.get("flagged_tools")
        if isinstance(live_flags, list):
            reported_flags += [str(tool) for tool in live_flags]  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    if server is not None and server.disabled:
        entry["state"] = "disabled"
    entry["flagged_tools"] = sorted({*flagged, *reported_flags})
    return entry


def _live_fields(live: dict[str, Any]) -> dict[str, Any]:
    """The fields a gateway's answer sets, checked for type (its values are never trusted
    beyond being shown)."""
    state, transport = live.get("state"), live.get("transport")
    tools, latency = live.get("tool_count"), live.get("last_latency_ms")
    error, updated = live.get("last_error"), live.get("updated_at")
    fields: dict[str, Any] = {
        "state": state[:100] if isinstance(state, str) else "unknown",
        "tool_count": tools if isinstance(tools, int) and not isinstance(tools, bool) else None,
        "last_latency_ms": float(latency)
        if isinstance(latency, int | float) and not isinstance(latency, bool)
        else None,
        "last_error": error if isinstance(error, str) else None,
        "updated_at": updated if isinstance(updated, str) else None,
    }
    if isinstance(transport, str):
        fields["transport"] = transport[:20]
    return fields


async def _read_database(
    settings: Settings, scope: Scope, database: dict[str, Any]
) -> dict[str, Any]:
    """Everything read from the database (``database`` updated in place); empty when it is
    missing, behind the migrations, or unreachable."""
    found: dict[str, Any] = {}
    db: Database | None = None
    try:
        with anyio.fail_after(DATABASE_TIMEOUT_S):
            db = await Database.open(settings.database_url, migrate=False)
            head = database["head"]
            revision = await db.current_revision()
            database.update(reachable=True, revision=revision, up_to_date=revision == head)
            if revision != head:
                database["hint"] = UPGRADE_HINT
                return found
            found["capabilities"] = await CapabilityRegistry(db).counts(scope)
            found["failing"] = await _failing(db, scope)
            found["api_keys"] = await _key_counts(db)
            found["reports"] = await _reports(db)
            found["catalog"] = await _catalog(db)
            found["tool_usage"] = await _tool_usage(db, scope)
            found["curation"] = await latest_curation(db, scope)
    except StorageError as error:
        database.update(reachable=False, error=error.message)
        found.clear()
    except TimeoutError:
        database.update(reachable=False, error=f"no answer within {DATABASE_TIMEOUT_S:g} s")
        found.clear()
    finally:
        if db is not None:
            with anyio.move_on_after(CLOSE_TIMEOUT_S, shield=True):
                await db.close()
    return found


async def collect_status(
    settings: Settings, *, live: LiveView | None = None, config: Path | None = None
) -> dict[str, Any]:
    """Everything ``pml status`` reports, as JSON-ready data; with ``live`` (the gateways
    running with ``config``, asked), servers are shown as the gateway sees them now and
    ``gateway`` describes it (None: not asked)."""
    scope = scope_of(settings)
    database: dict[str, Any] = {
        "url": describe_url(settings.database_url),
        "backend": async_url(settings.database_url).get_backend_name(),
        "exists": True,
        "reachable": None,
        "revision": None,
        "head": head_revision(),
        "up_to_date": False,
        "error": None,
        "hint": None,
    }
    path = sqlite_file(settings.database_url)
    problem = _sqlite_problem(path) if path is not None else None
    found: dict[str, Any] = {}
    if problem == "missing":
        database.update(exists=False, hint=UPGRADE_HINT)
    elif problem is not None:
        database.update(reachable=False, error=problem)
    else:
        found = await _read_database(settings, scope, database)
    reports: dict[str, dict[str, Any]] = found.get("reports", {})
    catalog_counts: dict[str, int] | None = None
    flagged: list[dict[str, Any]] | None = None
    if "catalog" in found:
        catalog_counts, flagged = found["catalog"]
    by_server: dict[str, list[str]] = {}
    for item in flagged or []:
        by_server.setdefault(item["server"], []).append(item["tool"])
    live_servers = live.servers() if live is not None else None
    live_by = None
    if live is not None and live.asked is not None:
        host = live.section()["host"]
        live_by = f"{host}:{live.asked.pid}" if host else f"pid {live.asked.pid}"
    names: list[str] = sorted({*map(str, settings.servers), *(live_servers or {})})
    servers = [
        _server_entry(
            name,
            settings.server_as_written(name) if name in settings.servers else None,
            reports.get(name),
            catalog_counts.get(name, 0) if catalog_counts is not None else None,
            by_server.get(name, []),
            (live_servers or {}).get(name),
            live_by,
        )
        for name in names
    ]
    catalog = None
    if catalog_counts is not None and flagged is not None:
        catalog = {"tools": sum(catalog_counts.values()), "flagged": flagged}
    return {
        "database": database,
        "scope": {"org": scope.org, "project": scope.project, "user": scope.user},
        "capabilities": found.get("capabilities"),
        "failing": found.get("failing"),
        "embedding": embedding_model(settings, live),
        "api_keys": found.get("api_keys"),
        "catalog": catalog,
        "servers": servers,
        "tool_usage": found.get("tool_usage"),
        "curation": found.get("curation"),
        "config": str(config) if config is not None else None,
        "gateway": live.section() if live is not None else None,
        "servers_source": _servers_source(live_servers, reports),
    }


def _servers_source(live: dict[str, Any] | None, reports: dict[str, Any]) -> str:
    """``live`` (a gateway answered), ``stored`` (its last stored reports), else ``none``."""
    if live is not None:
        return "live"
    return "stored" if reports else "none"
