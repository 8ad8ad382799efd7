"""Capability creation in as few round trips as the backend allows, and one-statement checks.

    hits = await probe_names(conn, org, project, ["fs:read", "mcp__fs__read"])
    created = await insert_if_free(db, NewCapability(record, version, quota=50_000, ...))

A capture of new code is one guarded insert: the record is written only if, in the same
statement, its FQDN is unused, no active capability of the project has its code hash, its
display name and tool name are nobody's display name, tool name or alias, and the project
holds fewer capabilities than its quota (its row of ``capability_counts``). On PostgreSQL
the version row, tag rows and the change notification ride in the same statement
(data-modifying CTEs, autocommit: one round trip, atomic); on SQLite the version and tags
follow in the same transaction. When the guard refuses (a name or FQDN in use, a quota
reached, the code captured meanwhile) nothing is written and the caller takes the careful
path, which says exactly why.

A name probe (``probe_names``) answers "who holds any of these names, in any of the four
columns that share the namespace" in one statement.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from pml.errors import StorageError
from pml.registry.models import CapabilityRecord, VersionRecord
from pml.storage.capability_counts import active_in_project
from pml.storage.capability_queries import ACTIVE, RECORD_FIELDS
from pml.storage.database import Database
from pml.storage.tables import capability_aliases as aliases
from pml.storage.tables import capability_records as records
from pml.storage.tables import capability_tags as tags_table
from pml.storage.tables import capability_version_tags as version_tags
from pml.storage.tables import capability_versions as versions

NameColumn = Literal["display_name", "alias", "tool_name", "alias_tool_name"]
VERSION_FIELDS: tuple[str, ...] = VersionRecord.__slots__  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class NameHit:
    """``name`` is held by ``owner`` (an FQDN) in ``column``."""

    column: NameColumn
    name: str
    owner: str


@dataclass(frozen=True, slots=True)
class NewCapability:
    """Everything one guarded creation writes, and what it must check first."""

    record: CapabilityRecord
    version: VersionRecord
    quota: int = 0  # active capabilities per project; 0: none
    notify: tuple[str, str] | None = None  # (channel, payload), PostgreSQL only


def _owners(org: str, project: str, names: Sequence[str]) -> list[sa.Select[tuple[str, str, str]]]:
    r, a = records.c, aliases.c
    unique = list(dict.fromkeys(names))

    def branch(column: NameColumn, source: Any, owner: Any, *where: Any) -> Any:
        return sa.select(sa.literal(column).label("kind"), source.label("name"), owner).where(
            *where, source.in_(unique)
        )

    own = (ACTIVE, r.org == org, r.project == project)
    in_scope = (a.org == org, a.project == project)
    return [
        branch("display_name", r.display_name, r.fqdn.label("owner"), *own),
        branch("tool_name", r.tool_name, r.fqdn.label("owner"), *own),
        branch("alias", a.alias, a.target_fqdn.label("owner"), *in_scope),
        branch("alias_tool_name", a.tool_name, a.target_fqdn.label("owner"), *in_scope),
    ]


def probe_statement(
    org: str,
    project: str,
    names: Sequence[str],
    *,
    code_hash: str | None = None,
    quota: int = 0,
) -> sa.CompoundSelect[Any]:
    """One statement: who holds any of ``names``; with ``code_hash``, the active capability
    of that code (kind ``code``); with ``quota``, how many the project holds (kind ``size``)."""
    r = records.c
    parts: list[Any] = _owners(org, project, names)
    if code_hash is not None:
        parts.append(
            sa.select(sa.literal("code"), r.code_hash, r.fqdn).where(
                ACTIVE, r.org == org, r.project == project, r.code_hash == code_hash
            )
        )
    if quota > 0:
        size = sa.cast(active_in_project(org, project), sa.String())
        parts.append(sa.select(sa.literal("size"), size, sa.literal("")))
    return sa.union_all(*parts)


async def probe_names(
    conn: AsyncConnection | AsyncEngine,
    org: str,
    project: str,
    names: Sequence[str],
    *,
    code_hash: str | None = None,
    quota: int = 0,
) -> list[NameHit | tuple[str, str]]:
    """The rows of ``probe_statement``: a ``NameHit`` per name held, and ``("code", fqdn)`` /
    ``("size", count)`` rows when asked for."""
    statement = probe_statement(org, project, names, code_hash=code_hash, quota=quota)
    if isinstance(conn, AsyncEngine):
        async with conn.connect() as connection:
            rows = (await connection.execute(statement)).all()
    else:
        rows = (await conn.execute(statement)).all()
    found: list[NameHit | tuple[str, str]] = []
    for row in rows:
        kind, name, owner = (str(value) for value in cast("tuple[object, ...]", tuple(row)))
        if kind == "code":
            found.append(("code", owner))
        elif kind == "size":
            found.append(("size", name))
        else:
            found.append(NameHit(cast(NameColumn, kind), name, owner))
    return found


_AUTOCOMMIT: weakref.WeakKeyDictionary[Database, AsyncEngine] = weakref.WeakKeyDictionary()


def single_statements(db: Database) -> AsyncEngine:
    """``db``'s engine for statements that are their own transaction: autocommit on
    PostgreSQL (no ``BEGIN``/``COMMIT`` round trips); SQLite's own engine otherwise."""
    if db.dialect != "postgresql":
        return db.engine
    engine = _AUTOCOMMIT.get(db)
    if engine is None:
        engine = _AUTOCOMMIT[db] = db.engine.execution_options(isolation_level="AUTOCOMMIT")
    return engine


async def existing_fqdns(conn: AsyncConnection, candidates: Sequence[str]) -> set[str]:
    """Which of ``candidates`` some record already uses (one statement)."""
    query = sa.select(records.c.fqdn).where(records.c.fqdn.in_(list(candidates)))
    return {str(fqdn) for fqdn in (await conn.execute(query)).scalars()}


async def count_capabilities(conn: AsyncConnection, org: str, project: str) -> int:
    """The project's active capabilities."""
    return int((await conn.execute(sa.select(active_in_project(org, project)))).scalar_one())


def _param(prefix: str, table: sa.Table, name: str) -> sa.BindParameter[Any]:
    return sa.bindparam(f"{prefix}{name}", type_=table.c[name].type)


def _guard(quota: bool) -> list[sa.ColumnElement[bool]]:
    """The conditions under which a new record may be written (parameters ``r_*``)."""
    r, a = records.c, aliases.c
    org, project = _param("r_", records, "org"), _param("r_", records, "project")
    names = [_param("r_", records, "display_name"), _param("r_", records, "tool_name")]
    own = (ACTIVE, r.org == org, r.project == project)
    in_scope = (a.org == org, a.project == project)
    where = [
        ~sa.exists().where(r.fqdn == _param("r_", records, "fqdn")),
        ~sa.exists().where(*own, r.code_hash == _param("r_", records, "code_hash")),
        ~sa.exists().where(*own, r.display_name.in_(names)),
        ~sa.exists().where(*own, r.tool_name.in_(names)),
        ~sa.exists().where(*in_scope, a.alias.in_(names)),
        ~sa.exists().where(*in_scope, a.tool_name.in_(names)),
    ]
    if quota:
        limit = sa.bindparam("quota", type_=sa.Integer())
        where.append(active_in_project(org, project) < limit)
    return where


def _columns(prefix: str, table: sa.Table, names: Sequence[str]) -> list[sa.ColumnElement[Any]]:
    return [_param(prefix, table, name).label(name) for name in names]


@functools.cache
def _guarded_record_insert(quota: bool) -> sa.Insert:
    chosen = sa.select(*_columns("r_", records, RECORD_FIELDS)).where(*_guard(quota))
    return records.insert().from_select(list(RECORD_FIELDS), chosen)


_VERSION_REST = tuple(name for name in VERSION_FIELDS if name != "capability_fqdn")
_VERSION_TAG_REST = ("version", "tag", "created_by", "created_at")


@functools.cache
def postgres_statement(
    tags: int, version_tag: bool, notify: bool, quota: bool
) -> sa.Select[Any, *tuple[Any, ...]]:
    """The whole creation as one PostgreSQL statement, built once per shape (parameters
    ``r_*``, ``v_*``, ``t<i>_tag``, ``vt_*``, ``quota``, ``channel``/``payload``); a row comes
    back iff it was written."""
    created = _guarded_record_insert(quota).returning(records.c.fqdn).cte("created")
    follow: list[Any] = []

    def rows_after(table: sa.Table, key: str, prefix: str, names: Sequence[str], cte: str) -> None:
        chosen = sa.select(created.c.fqdn.label(key), *_columns(prefix, table, names))
        follow.append(table.insert().from_select([key, *names], chosen).cte(cte))

    rows_after(versions, "capability_fqdn", "v_", _VERSION_REST, "created_version")
    for index in range(tags):
        rows_after(tags_table, "fqdn", f"t{index}_", ["tag"], f"created_tag_{index}")
    if version_tag:
        rows_after(version_tags, "capability_fqdn", "vt_", _VERSION_TAG_REST, "created_version_tag")
    columns: list[Any] = [created.c.fqdn]
    if notify:
        channel = sa.bindparam("channel", type_=sa.String())
        payload = sa.bindparam("payload", type_=sa.String())
        columns.append(sa.func.pg_notify(channel, payload).label("notified"))
    return sa.select(*columns).select_from(created).add_cte(*follow)


def _parameters(new: NewCapability) -> dict[str, Any]:
    record = new.record
    values = {f"r_{name}": getattr(record, name) for name in RECORD_FIELDS}
    values |= {f"v_{name}": getattr(new.version, name) for name in _VERSION_REST}
    values |= {f"t{index}_tag": row["tag"] for index, row in enumerate(_tag_rows(record))}
    tag_row = _version_tag_row(record)
    if tag_row is not None:
        values |= {f"vt_{name}": tag_row[name] for name in _VERSION_TAG_REST}
    if new.quota > 0:
        values["quota"] = new.quota
    if new.notify is not None:
        values["channel"], values["payload"] = new.notify
    return values


def _version_values(version: VersionRecord) -> dict[str, Any]:
    return {name: getattr(version, name) for name in VERSION_FIELDS}


def _tag_rows(record: CapabilityRecord) -> list[dict[str, Any]]:
    return [{"fqdn": record.fqdn, "tag": tag} for tag in dict.fromkeys(record.tags)]


def _version_tag_row(record: CapabilityRecord) -> dict[str, Any] | None:
    if record.version_tag is None:
        return None
    return {
        "capability_fqdn": record.fqdn,
        "version": record.version,
        "tag": record.version_tag,
        "created_by": record.updated_by,
        "created_at": record.updated_at,
    }


async def insert_if_free(db: Database, new: NewCapability) -> bool:
    """Create ``new`` if its guard holds (see the module); ``False``: nothing was written.

    A unique index tripped by a concurrent writer is a ``False`` too.
    """
    try:
        params = _parameters(new)
        if db.dialect == "postgresql":
            shape = (len(_tag_rows(new.record)), new.record.version_tag is not None)
            statement = postgres_statement(*shape, new.notify is not None, new.quota > 0)
            async with single_statements(db).connect() as conn:
                row = (await conn.execute(statement, params)).first()
            return row is not None
        async with db.transaction() as conn:
            record_params = {k: v for k, v in params.items() if k.startswith("r_") or k == "quota"}
            written = await conn.execute(_guarded_record_insert(new.quota > 0), record_params)
            if written.rowcount != 1:
                return False
            await conn.execute(versions.insert().values(_version_values(new.version)))
            tag_rows = _tag_rows(new.record)
            if tag_rows:
                await conn.execute(tags_table.insert(), tag_rows)
            tag_row = _version_tag_row(new.record)
            if tag_row is not None:
                await conn.execute(version_tags.insert().values(tag_row))
            return True
    except IntegrityError:
        return False
    except (OSError, DBAPIError) as error:
        reason = " ".join(str(getattr(error, "orig", None) or error).split())
        raise StorageError(f"Database error: {reason}") from error
