"""SQL queries over the capability tables; no rules here (those live in the registry service).

A repository is bound to one connection, so a service composes several calls into one
transaction::

    async with db.transaction() as conn:
        repo = SqlCapabilityRepository(conn)
        found = await repo.resolve_name(scope, "fs:read_json")
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pml.errors import InvalidInput
from pml.registry.models import AliasRecord, CapabilityRecord, ListQuery, Page, VersionRecord
from pml.registry.patterns import LIKE_ESCAPE
from pml.registry.routing import Routing
from pml.registry.scope import Scope
from pml.storage.capability_queries import (
    ACTIVE,
    RECORD_FIELDS,
    RESOLVE_STATEMENT,
    record_of,
    visible_to,
)
from pml.storage.capability_usage import RunCounts, add_usage
from pml.storage.capability_writes import single_statements
from pml.storage.database import Database
from pml.storage.tables import (
    capability_aliases as aliases,
)
from pml.storage.tables import (
    capability_records as records,
)
from pml.storage.tables import (
    capability_tags as tags_table,
)
from pml.storage.tables import (
    capability_version_tags as version_tags,
)
from pml.storage.tables import (
    capability_versions as versions,
)

MAX_VISIBLE_FQDNS = 500
# A version's tag is the tag table's (set with the version or later, ``pml cap tag``; 0011
# copied the older ones in), never the version row's column, which may repeat a tag.
VERSION_COLUMNS = [
    version_tags.c.tag.label(name) if name == "version_tag" else versions.c[name]
    for name in VersionRecord.__slots__  # type: ignore[attr-defined]
]
SORT_COLUMNS = {
    "usage": records.c.usage_count,
    "name": records.c.display_name,
    "created": records.c.created_at,
}


def _version(row: sa.Row[Any]) -> VersionRecord:
    return VersionRecord(**dict(row._mapping))  # pyright: ignore[reportPrivateUsage]


@dataclass(frozen=True, slots=True)
class CodeOwner:
    """The few fields a reused capability's answer needs (``pml_execute``'s hot path)."""

    fqdn: str
    id: str
    display_name: str
    named: bool
    routing: Routing


_OWNER_COLUMNS = [records.c[name] for name in ("fqdn", "id", "display_name", "named", "routing")]
BY_CODE_HASH_STATEMENT = sa.select(*_OWNER_COLUMNS).where(
    ACTIVE,
    records.c.org == sa.bindparam("org", type_=sa.String()),
    records.c.project == sa.bindparam("project", type_=sa.String()),
    records.c.code_hash == sa.bindparam("code_hash", type_=sa.String()),
)


async def find_visible(
    db: Database, scope: Scope, fqdns: Sequence[str]
) -> dict[str, CapabilityRecord]:
    """The records among ``fqdns`` (at most ``MAX_VISIBLE_FQDNS``) that ``scope`` may see,
    by FQDN, in one read; unknown and hidden ones are left out."""
    if len(fqdns) > MAX_VISIBLE_FQDNS:
        raise InvalidInput(f"Ask for at most {MAX_VISIBLE_FQDNS} capabilities at once")
    query = sa.select(records).where(visible_to(scope), records.c.fqdn.in_(list(fqdns)))
    async with db.read() as conn:
        return {record.fqdn: record for record in map(record_of, await conn.execute(query))}


async def find_code_owner(db: Database, org: str, project: str, code_hash: str) -> CodeOwner | None:
    """The capability of this org/project whose current code has this hash (hot path: one
    indexed read of five columns, outside any transaction)."""
    params = {"org": org, "project": project, "code_hash": code_hash}
    row = await db.first(BY_CODE_HASH_STATEMENT, params)
    if row is None:
        return None
    data = row._mapping  # pyright: ignore[reportPrivateUsage]
    return CodeOwner(
        fqdn=str(data["fqdn"]),
        id=str(data["id"]),
        display_name=str(data["display_name"]),
        named=bool(data["named"]),
        routing=cast("Routing", data["routing"]),
    )


async def find_code_owners(
    db: Database, org: str, project: str, code_hashes: Sequence[str]
) -> dict[str, CodeOwner]:
    """``find_code_owner`` for many code hashes at once (one read), by code hash."""
    r = records.c
    query = sa.select(*_OWNER_COLUMNS, r.code_hash).where(
        ACTIVE, r.org == org, r.project == project, r.code_hash.in_(list(code_hashes))
    )
    async with single_statements(db).connect() as conn:  # autocommit: no BEGIN/ROLLBACK
        rows = (await conn.execute(query)).all()
    return {
        str(row.code_hash): CodeOwner(
            fqdn=str(row.fqdn),
            id=str(row.id),
            display_name=str(row.display_name),
            named=bool(row.named),
            routing=cast("Routing", row.routing),
        )
        for row in rows
    }


async def resolve_reference(
    db: Database, scope: Scope, name: str
) -> tuple[CapabilityRecord, str | None] | None:
    """Like ``SqlCapabilityRepository.resolve_name``, outside any transaction (hot path)."""
    params = {"org": scope.org, "project": scope.project, "user": scope.user, "name": name}
    row = await db.first(RESOLVE_STATEMENT, params)
    if row is None:
        return None
    return record_of(row), row._mapping["via_alias"]  # pyright: ignore[reportPrivateUsage]


class SqlCapabilityRepository:
    """Queries over ``capability_*`` tables on one connection (SQLite or PostgreSQL)."""

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn

    async def lock_scope(self, org: str, project: str) -> None:
        """Serialise name changes in one scope until the transaction ends (PostgreSQL)."""
        if self.conn.dialect.name == "postgresql":
            await self.conn.execute(
                sa.text("SELECT pg_advisory_xact_lock(hashtext(:key))"),
                {"key": f"pml-names:{org}.{project}"},
            )

    async def resolve_name(
        self, scope: Scope, name: str
    ) -> tuple[CapabilityRecord, str | None] | None:
        """The record a name designates for ``scope``, and the alias used (if any).

        Order: display name in scope, alias in scope, tool name in scope, tool-name alias in
        scope, FQDN, public display name of another scope. One prepared round trip.
        """
        params = {"org": scope.org, "project": scope.project, "user": scope.user, "name": name}
        row = (await self.conn.execute(RESOLVE_STATEMENT, params)).first()
        if row is None:
            return None
        return record_of(row), row._mapping["via_alias"]  # pyright: ignore[reportPrivateUsage]

    async def get_visible(self, scope: Scope, fqdn: str) -> CapabilityRecord | None:
        """The record with this FQDN if ``scope`` may see it."""
        query = sa.select(records).where(records.c.fqdn == fqdn, visible_to(scope))
        row = (await self.conn.execute(query)).first()
        return record_of(row) if row else None

    async def get(self, fqdn: str) -> CapabilityRecord | None:
        """The record with this FQDN, whoever owns it (for services, after their checks)."""
        row = (await self.conn.execute(sa.select(records).where(records.c.fqdn == fqdn))).first()
        return record_of(row) if row else None

    async def find_by_code_hash(
        self, org: str, project: str, code_hash: str
    ) -> CapabilityRecord | None:
        """The capability of this org/project whose current code has this hash."""
        query = sa.select(records).where(
            ACTIVE,
            records.c.org == org,
            records.c.project == project,
            records.c.code_hash == code_hash,
        )
        row = (await self.conn.execute(query)).first()
        return record_of(row) if row else None

    async def fqdn_exists(self, fqdn: str) -> bool:
        """Whether any record already uses this FQDN."""
        query = sa.select(sa.literal(1)).where(records.c.fqdn == fqdn)
        return (await self.conn.execute(query)).first() is not None

    async def name_owner(self, org: str, project: str, name: str) -> str | None:
        """FQDN of the record using ``name`` as display name or alias in this org/project."""
        r, a = records.c, aliases.c
        query = sa.union_all(
            sa.select(r.fqdn).where(
                ACTIVE, r.org == org, r.project == project, r.display_name == name
            ),
            sa.select(a.target_fqdn).where(a.org == org, a.project == project, a.alias == name),
        )
        return (await self.conn.execute(query)).scalars().first()

    async def tool_name_owner(self, org: str, project: str, tool_name: str) -> str | None:
        """FQDN of the record whose MCP tool name (current or aliased) is ``tool_name``."""
        r, a = records.c, aliases.c
        query = sa.union_all(
            sa.select(r.fqdn).where(
                ACTIVE, r.org == org, r.project == project, r.tool_name == tool_name
            ),
            sa.select(a.target_fqdn).where(
                a.org == org, a.project == project, a.tool_name == tool_name
            ),
        )
        return (await self.conn.execute(query)).scalars().first()

    async def insert_record(self, record: CapabilityRecord) -> None:
        """Insert a new record and its tag rows."""
        values = {name: getattr(record, name) for name in RECORD_FIELDS}
        await self.conn.execute(records.insert().values(values))
        await self.replace_tags(record.fqdn, record.tags)

    async def update_record(self, fqdn: str, **values: Any) -> None:
        """Change some columns of one record (tags also update the tag index)."""
        await self.conn.execute(records.update().where(records.c.fqdn == fqdn).values(values))
        if "tags" in values:
            await self.replace_tags(fqdn, values["tags"])

    async def replace_tags(self, fqdn: str, tags: Sequence[str]) -> None:
        """Make the tag index rows of ``fqdn`` equal to ``tags``."""
        await self.conn.execute(tags_table.delete().where(tags_table.c.fqdn == fqdn))
        if tags:
            await self.conn.execute(
                tags_table.insert(), [{"fqdn": fqdn, "tag": tag} for tag in dict.fromkeys(tags)]
            )

    async def insert_version(self, version: VersionRecord) -> None:
        """Append one version row."""
        values = {name: getattr(version, name) for name in VersionRecord.__slots__}  # type: ignore[attr-defined]
        await self.conn.execute(versions.insert().values(values))

    async def insert_version_tag(self, record: CapabilityRecord, tag: str) -> None:
        """Record the tag given with ``record``'s current version (immutable once set)."""
        await self.conn.execute(
            version_tags.insert().values(
                capability_fqdn=record.fqdn,
                version=record.version,
                tag=tag,
                created_by=record.updated_by,
                created_at=record.updated_at,
            )
        )

    async def versions_of(
        self, fqdn: str, newest: int | None = None, before: int | None = None
    ) -> list[VersionRecord]:
        """Every version of a record (or only the ``newest`` ones, or those older than
        version ``before``), oldest first."""
        tagged = sa.and_(
            version_tags.c.capability_fqdn == versions.c.capability_fqdn,
            version_tags.c.version == versions.c.version,
        )
        query = (
            sa.select(*VERSION_COLUMNS)
            .select_from(versions.outerjoin(version_tags, tagged))
            .where(versions.c.capability_fqdn == fqdn)
            .order_by(versions.c.version.desc())
            .limit(newest)
        )
        if before is not None:
            query = query.where(versions.c.version < before)
        return [_version(row) for row in await self.conn.execute(query)][::-1]

    async def count_versions(self, fqdn: str) -> int:
        """How many versions a record has."""
        query = sa.select(sa.func.count()).where(versions.c.capability_fqdn == fqdn)
        return int((await self.conn.execute(query)).scalar_one())

    async def insert_alias(
        self, org: str, project: str, alias: str, tool_name: str, fqdn: str, at: datetime
    ) -> None:
        """Make ``alias`` (an old display name) resolve to ``fqdn``."""
        await self.conn.execute(
            aliases.insert().values(
                org=org,
                project=project,
                alias=alias,
                tool_name=tool_name,
                target_fqdn=fqdn,
                created_at=at,
            )
        )

    async def delete_alias(self, org: str, project: str, alias: str) -> None:
        """Forget one alias (used when a record takes its old name back)."""
        a = aliases.c
        await self.conn.execute(
            aliases.delete().where(a.org == org, a.project == project, a.alias == alias)
        )

    async def aliases_of(self, fqdn: str) -> list[AliasRecord]:
        """Every alias pointing at ``fqdn``, oldest first."""
        a = aliases.c
        query = (
            sa.select(a.alias, a.target_fqdn, a.created_at)
            .where(a.target_fqdn == fqdn)
            .order_by(a.created_at, a.alias)
        )
        return [AliasRecord(**dict(row._mapping)) for row in await self.conn.execute(query)]  # pyright: ignore[reportPrivateUsage]

    async def record_usage(
        self, fqdn: str, *, success: bool, latency_ms: float, at: datetime
    ) -> None:
        """Count one run: usage, success and latency are incremented in the database."""
        counts = RunCounts(runs=1, successes=int(success), latency_ms=latency_ms, at=at,
                           outcomes=(success,))  # fmt: skip
        await add_usage(self.conn, fqdn, counts)

    async def list_visible(self, scope: Scope, query: ListQuery) -> Page:
        """One page of the records ``scope`` may see, filtered and ordered."""
        r = records.c
        where: list[sa.ColumnElement[bool]] = [
            visible_to(scope),
            r.record_type == query.record_type,
            r.archived_at.is_not(None) if query.archived else ACTIVE,
        ]
        if query.like_pattern is not None:
            where.append(r.display_name.like(query.like_pattern, escape=LIKE_ESCAPE))
        if query.named_only:
            where.append(r.named.is_(True))
        if query.unnamed_only:
            where.append(r.named.is_(False))
        if query.created_by is not None:
            where.append(r.created_by == query.created_by)
        if query.visibility is not None:
            where.append(r.visibility == query.visibility)
        for tag in query.tags:
            where.append(sa.exists().where(tags_table.c.fqdn == r.fqdn, tags_table.c.tag == tag))
        total_query = sa.select(sa.func.count()).select_from(records).where(*where)
        total = int((await self.conn.execute(total_query)).scalar_one())
        sort: sa.ColumnElement[Any] = SORT_COLUMNS[query.sort_by]
        if query.sort_by == "name" and self.conn.dialect.name == "postgresql":
            sort = sort.collate("C")  # byte order, as SQLite sorts, whatever the locale
        order = [sort.desc() if query.descending else sort.asc(), r.fqdn.asc()]
        page_query = (
            sa.select(records)
            .where(*where)
            .order_by(*order)
            .limit(query.limit)
            .offset(query.offset)
        )
        items = [record_of(row) for row in await self.conn.execute(page_query)]
        return Page(items=items, total=total)

    async def count_by_type(self, scope: Scope) -> dict[str, int]:
        """How many visible records of each kind (named/unnamed capabilities, servers)."""
        r = records.c
        kind = sa.case(
            (r.record_type == "mcp-server", "mcp_servers"),
            (r.named.is_(True), "named"),
            else_="unnamed",
        ).label("kind")
        query = sa.select(kind, sa.func.count()).where(visible_to(scope), ACTIVE).group_by(kind)
        counts = {"named": 0, "unnamed": 0, "mcp_servers": 0}
        for row in await self.conn.execute(query):
            counts[str(row[0])] = int(row[1])
        return counts
