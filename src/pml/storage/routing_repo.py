"""The queries behind re-deriving stored routing (``pml.registry.routing_sync``).

    async with db.read() as conn:
        page = await routing_page(conn, after=None, limit=500)      # keyset, by FQDN
        states = await routing_states(conn, ["acme.web.fs.read.ab12"])
    async with db.transaction() as conn:
        done = await set_routing(conn, ["acme.web.fs.read.ab12"], "local", now)

Only *derivable* records take part: capabilities without an explicit routing override that
are not archived (:func:`derivable`, the one place that says so). Routing is metadata: the
record row changes in place, ``updated_at`` moves (so watermark readers such as discovery
and the SQLite change poll notice), and no version row is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pml.registry.scope import Scope
from pml.storage.capability_queries import ACTIVE, visible_to
from pml.storage.tables import capability_records as records

# Keeps every IN list far below SQLite's and PostgreSQL's parameter limits.
CHUNK: Final = 500

_c = records.c


def derivable() -> sa.ColumnElement[bool]:
    """The records whose routing follows ``[routing]``: capabilities with no override,
    not archived."""
    return sa.and_(
        _c.record_type == "capability",
        _c.routing_override.is_(None),
        ACTIVE,
    )


@dataclass(frozen=True, slots=True)
class RoutingRow:
    """What deriving one capability's routing needs (no code, no schema)."""

    fqdn: str
    org: str
    project: str
    created_by: str
    display_name: str
    tools_used: tuple[object, ...] | None  # None: the stored value is not a list (damaged)
    routing: str


@dataclass(frozen=True, slots=True)
class RoutingState:
    """A record's stored routing, and whether it is derived (else fixed for this run)."""

    routing: str
    derivable: bool


_ROW_COLUMNS = (
    _c.fqdn,
    _c.org,
    _c.project,
    _c.created_by,
    _c.display_name,
    _c.tools_used,
    _c.routing,
)


def _tools(value: object) -> tuple[object, ...] | None:
    if not isinstance(value, list):
        return None
    return tuple(cast("list[object]", value))


def _row(row: Any) -> RoutingRow:
    return RoutingRow(
        fqdn=row.fqdn,
        org=row.org,
        project=row.project,
        created_by=row.created_by,
        display_name=row.display_name,
        tools_used=_tools(row.tools_used),
        routing=row.routing,
    )


async def routing_page(conn: AsyncConnection, *, after: str | None, limit: int) -> list[RoutingRow]:
    """The next ``limit`` derivable capabilities of every tenant, in FQDN order after
    ``after`` (keyset paging: rows updated meanwhile are neither skipped nor repeated)."""
    query = sa.select(*_ROW_COLUMNS).where(derivable()).order_by(_c.fqdn).limit(limit)
    if after is not None:
        query = query.where(_c.fqdn > after)
    return [_row(row) for row in await conn.execute(query)]


async def routing_rows(conn: AsyncConnection, fqdns: Sequence[str]) -> list[RoutingRow]:
    """The derivable capabilities among ``fqdns``."""
    found: list[RoutingRow] = []
    for start in range(0, len(fqdns), CHUNK):
        chunk = list(fqdns[start : start + CHUNK])
        query = sa.select(*_ROW_COLUMNS).where(derivable(), _c.fqdn.in_(chunk))
        found.extend(_row(row) for row in await conn.execute(query))
    return found


async def routing_states(conn: AsyncConnection, fqdns: Sequence[str]) -> dict[str, RoutingState]:
    """The stored routing of each existing record among ``fqdns``, and if it is derived."""
    states: dict[str, RoutingState] = {}
    flag = sa.case((derivable(), sa.true()), else_=sa.false()).label("derivable")
    for start in range(0, len(fqdns), CHUNK):
        chunk = list(fqdns[start : start + CHUNK])
        query = sa.select(_c.fqdn, _c.routing, flag).where(_c.fqdn.in_(chunk))
        for row in await conn.execute(query):
            states[row.fqdn] = RoutingState(routing=row.routing, derivable=bool(row.derivable))
    return states


async def visible_fqdns(conn: AsyncConnection, scope: Scope, fqdns: Sequence[str]) -> set[str]:
    """Those of ``fqdns`` naming an active record ``scope`` may see (what resolving each
    by FQDN would find)."""
    found: set[str] = set()
    for start in range(0, len(fqdns), CHUNK):
        chunk = list(fqdns[start : start + CHUNK])
        query = sa.select(_c.fqdn).where(_c.fqdn.in_(chunk), ACTIVE, visible_to(scope))
        found.update(row.fqdn for row in await conn.execute(query))
    return found


async def set_routing(
    conn: AsyncConnection, fqdns: Sequence[str], routing: str, now: datetime
) -> list[str]:
    """Store ``routing`` on those of ``fqdns`` still derivable and not already there; the
    FQDNs actually changed (an override set meanwhile wins)."""
    changed: list[str] = []
    for start in range(0, len(fqdns), CHUNK):
        chunk = list(fqdns[start : start + CHUNK])
        statement = (
            records.update()
            .where(_c.fqdn.in_(chunk), _c.routing != routing, derivable())
            .values(routing=routing, updated_at=now)
            .returning(_c.fqdn)
        )
        changed.extend(row.fqdn for row in await conn.execute(statement))
    return changed
