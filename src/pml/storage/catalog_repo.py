"""The upstream tool catalog (with tool pinning) and the last reported state of each server.

Each tool definition is stored with the SHA-256 of its canonical JSON. The first definition
seen is pinned (its hash and the definition itself); a later, different definition is kept
but flagged (a server that changes what a tool does under the same name is worth a look),
and the flag stays until a person accepts the new definition (even if the server goes back
to the pinned one meanwhile). The dashboard diffs the current definition against the pinned.

    store = CatalogStore(db)
    flagged = await store.record_catalog("time", listed.tools)   # names newly flagged
    tools = await store.load_catalog("time")                     # list[mcp_types.Tool]
    rows = await store.stored_tools("time")                      # pinned and current, per tool
    await store.accept("time", "get_current_time", expected_hash=rows[0].definition_hash)
    await store.record_status(pool.status(), reported_by="host:4242")
    for server in await store.load_status(): print(server.name, server.state)
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import mcp_types
import sqlalchemy as sa
from pydantic import ValidationError
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from pml.storage.database import Database
from pml.storage.tables import tool_schema, upstream_servers
from pml.storage.types import utc_now
from pml.upstream.base import ServerStatus

logger = logging.getLogger(__name__)

MAX_TOOL_NAME = 256  # the length of tool_schema.tool_name
MAX_SERVER_NAME = 128  # the length of tool_schema.server_id
STATES: frozenset[str] = frozenset(("starting", "running", "idle", "stopped", "failed", "disabled"))


def tool_definition(tool: mcp_types.Tool) -> dict[str, Any]:
    """The JSON form a definition is stored and hashed in."""
    return tool.model_dump(mode="json", by_alias=True, exclude_none=True)


def definition_hash(definition: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON (sorted keys, no spaces) of a tool definition."""
    canonical = json.dumps(definition, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _storable(server: str, tool: str | None = None) -> bool:
    """Whether the names could be stored at all (longer ones, or ones with NUL, which
    PostgreSQL refuses in text, are simply not there)."""
    names = (server,) if tool is None else (server, tool)
    return (
        0 < len(server) <= MAX_SERVER_NAME
        and (tool is None or 0 < len(tool) <= MAX_TOOL_NAME)
        and not any("\x00" in name for name in names)
    )


def _as_definition(value: object) -> dict[str, Any] | None:
    return cast(dict[str, Any], value) if isinstance(value, dict) else None


@dataclass(frozen=True, slots=True)
class StoredTool:
    """One stored tool: its current definition, and the one pinned (None when a database
    migrated from before pinned definitions were kept lost it)."""

    server: str
    name: str
    definition: dict[str, Any]
    definition_hash: str
    pinned_hash: str
    pinned_definition: dict[str, Any] | None
    flagged: bool
    first_seen_at: datetime
    updated_at: datetime

    @property
    def address(self) -> str:
        """``server:tool``."""
        return f"{self.server}:{self.name}"


class CatalogStore:
    """Reads and writes ``tool_schema`` and ``upstream_servers``."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def _insert(self, table: sa.Table) -> Any:
        dialect = postgresql if self._db.dialect == "postgresql" else sqlite
        return dialect.insert(table)

    async def record_catalog(self, server: str, tools: Sequence[mcp_types.Tool]) -> list[str]:
        """Store the catalog a server listed; return the tools whose definition just changed."""
        incoming: dict[str, dict[str, Any]] = {}
        for tool in tools:
            if len(tool.name) > MAX_TOOL_NAME:
                logger.warning(
                    "upstream server %r: tool name of %d characters not stored (max %d)",
                    server,
                    len(tool.name),
                    MAX_TOOL_NAME,
                )
                continue
            incoming[tool.name] = tool_definition(tool)
        t = tool_schema.c
        now = utc_now()
        flagged: list[str] = []
        async with self._db.transaction() as conn:
            rows = await conn.execute(
                sa.select(t.tool_name, t.definition_hash, t.pinned_hash).where(
                    t.server_id == server
                )
            )
            known: dict[str, tuple[str, str]] = {
                row.tool_name: (row.definition_hash, row.pinned_hash) for row in rows
            }
            gone = [name for name in known if name not in incoming]
            if gone:
                await conn.execute(
                    sa.delete(tool_schema).where(t.server_id == server, t.tool_name.in_(gone))
                )
            for name, definition in sorted(incoming.items()):
                digest = definition_hash(definition)
                if name not in known:
                    insert = self._insert(tool_schema).values(
                        server_id=server,
                        tool_name=name,
                        definition=definition,
                        definition_hash=digest,
                        pinned_hash=digest,
                        pinned_definition=definition,
                        flagged=False,
                        first_seen_at=now,
                        updated_at=now,
                    )
                    # Another gateway sharing the database may have pinned it a moment ago.
                    await conn.execute(insert.on_conflict_do_nothing())
                    continue
                current, pinned = known[name]
                if digest == current:
                    continue
                # The pinned definition stays as it was: it is what the change is shown against.
                # Even a change back to it stays flagged: a server that flips a definition
                # back and forth is itself worth a look, and a person clears the flag.
                await conn.execute(
                    sa.update(tool_schema)
                    .where(t.server_id == server, t.tool_name == name)
                    .values(
                        definition=definition, definition_hash=digest, flagged=True, updated_at=now
                    )
                )
                flagged.append(name)
                logger.warning(
                    "upstream tool %s:%s changed its definition (pinned %s…, now %s…): flagged",
                    server,
                    name,
                    pinned[:12],
                    digest[:12],
                )
        return flagged

    async def load_catalog(self, server: str) -> list[mcp_types.Tool]:
        """The stored definitions of a server's tools, by name."""
        t = tool_schema.c
        async with self._db.read() as conn:
            rows = await conn.execute(
                sa.select(t.tool_name, t.definition)
                .where(t.server_id == server)
                .order_by(t.tool_name)
            )
            stored = [(row.tool_name, row.definition) for row in rows]
        tools: list[mcp_types.Tool] = []
        for name, definition in stored:
            try:
                tools.append(mcp_types.Tool.model_validate(definition))
            except ValidationError:
                logger.warning(
                    "stored definition of %s:%s is no longer valid; skipped", server, name
                )
        return tools

    async def flagged(self, server: str | None = None) -> dict[str, list[str]]:
        """Flagged tool names per server (only servers that have some)."""
        t = tool_schema.c
        query = sa.select(t.server_id, t.tool_name).where(t.flagged == sa.true())
        if server is not None:
            query = query.where(t.server_id == server)
        result: dict[str, list[str]] = {}
        async with self._db.read() as conn:
            for row in await conn.execute(query.order_by(t.server_id, t.tool_name)):
                result.setdefault(row.server_id, []).append(row.tool_name)
        return result

    async def stored_tools(self, server: str) -> list[StoredTool]:
        """One server's stored tools with their current and pinned definitions, by name."""
        if not _storable(server):
            return []
        t = tool_schema.c
        async with self._db.read() as conn:
            rows = await conn.execute(
                sa.select(tool_schema).where(t.server_id == server).order_by(t.tool_name)
            )
            return [_stored(row) for row in rows]

    async def stored_tool(self, server: str, tool: str) -> StoredTool | None:
        """One stored tool, or None."""
        if not _storable(server, tool):
            return None
        t = tool_schema.c
        async with self._db.read() as conn:
            row = (
                await conn.execute(
                    sa.select(tool_schema).where(t.server_id == server, t.tool_name == tool)
                )
            ).first()
        return _stored(row) if row is not None else None

    async def accept(self, server: str, tool: str, *, expected_hash: str | None = None) -> bool:
        """Pin the tool's current definition (a person reviewed it): pinned hash and
        definition become the current ones, the flag is cleared, in one statement.

        With ``expected_hash``, only while the current definition still has that hash (the
        one the person saw). False when there is no such tool (or it changed meanwhile)."""
        if not _storable(server, tool):
            return False
        t = tool_schema.c
        where: list[sa.ColumnElement[bool]] = [t.server_id == server, t.tool_name == tool]
        if expected_hash is not None:
            where.append(t.definition_hash == expected_hash)
        async with self._db.transaction() as conn:
            result = await conn.execute(
                sa.update(tool_schema)
                .where(*where)
                .values(
                    pinned_hash=t.definition_hash,
                    pinned_definition=t.definition,
                    flagged=False,
                )
            )
            accepted = int(result.rowcount or 0) == 1
            if accepted:  # the last report no longer names it (pml status reads both)
                await self._unreport(conn, server, tool)
        return accepted

    @staticmethod
    async def _unreport(conn: AsyncConnection, server: str, tool: str) -> None:
        s = upstream_servers.c
        row = (await conn.execute(sa.select(s.flagged_tools).where(s.name == server))).first()
        reported: object = row.flagged_tools if row is not None else None
        if not isinstance(reported, list) or tool not in reported:
            return
        kept = [name for name in cast(list[object], reported) if name != tool]
        await conn.execute(
            sa.update(upstream_servers).where(s.name == server).values(flagged_tools=kept)
        )

    async def tool_counts(self) -> dict[str, int]:
        """How many tools are stored per server."""
        t = tool_schema.c
        async with self._db.read() as conn:
            rows = await conn.execute(sa.select(t.server_id, sa.func.count()).group_by(t.server_id))
            return {str(server): int(count) for server, count in rows}

    async def record_status(self, statuses: Sequence[ServerStatus], reported_by: str) -> None:
        """Upsert the state of each server as ``reported_by`` (a gateway) sees it."""
        if not statuses:
            return
        now = utc_now()
        async with self._db.transaction() as conn:
            for status in statuses:
                values = {
                    "state": status.state,
                    "transport": status.transport,
                    "tool_count": status.tool_count,
                    "last_latency_ms": status.last_latency_ms,
                    "last_error": status.last_error,
                    "flagged_tools": list(status.flagged_tools),
                    "reported_by": reported_by,
                    "updated_at": status.updated_at or now,
                }
                insert = self._insert(upstream_servers).values(name=status.name, **values)
                await conn.execute(
                    insert.on_conflict_do_update(index_elements=["name"], set_=values)
                )

    async def load_status(self) -> list[ServerStatus]:
        """The last reported state of every server, by name."""
        s = upstream_servers.c
        async with self._db.read() as conn:
            rows = list(await conn.execute(sa.select(upstream_servers).order_by(s.name)))
        return [
            ServerStatus(
                name=row.name,
                state=row.state if row.state in STATES else "failed",
                transport="http" if row.transport == "http" else "stdio",
                tool_count=row.tool_count,
                last_latency_ms=row.last_latency_ms,
                last_error=row.last_error,
                flagged_tools=tuple(row.flagged_tools or ()),
                updated_at=row.updated_at,
                extra={"reported_by": row.reported_by},
            )
            for row in rows
        ]


def _stored(row: sa.Row[Any]) -> StoredTool:
    return StoredTool(
        server=row.server_id,
        name=row.tool_name,
        definition=_as_definition(row.definition) or {},
        definition_hash=row.definition_hash,
        pinned_hash=row.pinned_hash,
        pinned_definition=_as_definition(row.pinned_definition),
        flagged=bool(row.flagged),
        first_seen_at=row.first_seen_at,
        updated_at=row.updated_at,
    )
