"""What a running gateway sees now, as a bounded JSON object (``pml status`` asks for it).

    snapshot = await status_snapshot(gateway, process)   # {"gateway": ..., "servers": [...], ...}

Everything in it comes from the live objects: the pool's server states (``starting``
included), the database as this process reaches it (one read, bounded in time), the
capability counts of the gateway's own scope and those of its project that keep failing
(``failing``: how many, and up to 10 names), the embedding model in use. Sizes are
bounded: at most ``MAX_SERVERS`` servers, texts cut to ``MAX_TEXT``.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

import anyio
from sqlalchemy.exc import SQLAlchemyError

from pml import __version__
from pml.errors import PmlError
from pml.registry.scope import Scope
from pml.storage.capability_usage import failing_in_project
from pml.storage.database import Database, describe_url, head_revision

if TYPE_CHECKING:
    from pml.gateway.server import Gateway
    from pml.upstream.base import ServerStatus

logger = logging.getLogger(__name__)

MAX_SERVERS: Final = 500
MAX_TEXT: Final = 2000
DATABASE_TIMEOUT_S: Final = 2.0


@dataclass(frozen=True, slots=True)
class ServingProcess:
    """This process as its announcement file names it."""

    transport: str
    config: str
    started_at: float


def _cut(text: str | None, limit: int = MAX_TEXT) -> str | None:
    if text is None:
        return None
    return text if len(text) <= limit else text[:limit] + "…"


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def server_entry(status: ServerStatus) -> dict[str, Any]:
    """One pool entry as JSON."""
    return {
        "name": _cut(status.name, 200),
        "state": status.state,
        "transport": status.transport,
        "tool_count": status.tool_count,
        "last_latency_ms": status.last_latency_ms,
        "last_error": _cut(status.last_error),
        "lazy": status.lazy,
        "flagged_tools": [_cut(tool, 200) for tool in status.flagged_tools[:100]],
        "updated_at": _iso(status.updated_at),
    }


async def _database(
    gateway: Gateway,
) -> tuple[dict[str, Any], dict[str, int] | None, dict[str, Any] | None]:
    """The database as this gateway reaches it, its scope's capability counts and the
    capabilities of its project that keep failing."""
    head = head_revision()
    entry: dict[str, Any] = {
        "url": describe_url(gateway.settings.database_url),
        "reachable": False,
        "revision": None,
        "up_to_date": False,
        "error": None,
    }
    counts: dict[str, int] | None = None
    failing: dict[str, Any] | None = None
    try:
        with anyio.fail_after(DATABASE_TIMEOUT_S):
            revision = await gateway.db.current_revision()
            entry.update(reachable=True, revision=revision, up_to_date=revision == head)
            if revision == head:
                counts = await gateway.registry.counts(gateway.default_scope)
                failing = await failing_capabilities(gateway.db, gateway.default_scope)
    except TimeoutError:
        entry["error"] = f"no answer within {DATABASE_TIMEOUT_S:g} s"
    except PmlError as error:
        entry["error"] = _cut(error.message)
    except (SQLAlchemyError, OSError) as error:
        entry["error"] = _cut(type(error).__name__)
    return entry, counts, failing


async def failing_capabilities(db: Database, scope: Scope) -> dict[str, Any]:
    """``{"count", "names"}``: the capabilities of ``scope``'s project that keep failing
    (``Reliability.failing``), up to ``FAILING_SHOWN`` names, the most recently used first."""
    async with db.read() as conn:
        count, names = await failing_in_project(conn, scope)
    return {"count": count, "names": [_cut(name, 200) for name in names]}


def _embedding_model(gateway: Gateway) -> str | None:
    try:
        return _cut(gateway.discovery.model_id, 200)
    except AttributeError:  # a discovery service without a model id
        return None


def _embedding_process(gateway: Gateway) -> str | None:
    try:
        return _cut(gateway.discovery.model_process, 200)
    except AttributeError:  # a discovery service that does not say
        return None


async def status_snapshot(gateway: Gateway, process: ServingProcess) -> dict[str, Any]:
    """What ``pml status`` shows of this gateway."""
    database, counts, failing = await _database(gateway)
    statuses = gateway.pool.status()
    scope = gateway.default_scope
    return {
        "gateway": {
            "pid": os.getpid(),
            "transport": _cut(process.transport, 200),
            "config": _cut(process.config, 4096),
            "started_at": process.started_at,
            "uptime_s": round(max(0.0, time.time() - process.started_at), 3),
            "version": __version__,
            "host": _cut(socket.gethostname(), 200),
            "embedding_model": _embedding_model(gateway),
            "embedding_process": _embedding_process(gateway),
            "scope": {"org": scope.org, "project": scope.project, "user": scope.user},
        },
        "servers": [server_entry(status) for status in statuses[:MAX_SERVERS]],
        "servers_total": len(statuses),
        "database": database,
        "capabilities": counts,
        "failing": failing,
    }
