"""SQL of a capability's life after creation: archive, restore, purge, tags, dependants.

    repo = SqlLifecycleRepository(conn)
    record = await repo.archived_named(scope, "fs:read_json")   # newest archived of that name
    await repo.purge(fqdn)                                       # every row of an archived one

Rules live in ``pml.registry.lifecycle``; this module only reads and writes rows.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pml.registry.models import CapabilityRecord
from pml.registry.patterns import LIKE_ESCAPE
from pml.registry.scope import Scope
from pml.storage.capability_queries import ACTIVE, record_of, visible_to
from pml.storage.tables import capability_aliases as aliases
from pml.storage.tables import capability_records as records
from pml.storage.tables import capability_tags as tags_table
from pml.storage.tables import capability_version_tags as version_tags
from pml.storage.tables import capability_versions as versions
from pml.storage.tables import discovery_vectors, execution_traces

MAX_DEPENDANTS = 50


def _like_literal(text: str) -> str:
    """``text`` as a LIKE pattern that matches only itself."""
    for special in (LIKE_ESCAPE, "%", "_"):
        text = text.replace(special, LIKE_ESCAPE + special)
    return text


class SqlLifecycleRepository:
    """Queries of archive, restore, purge and version tags on one connection."""

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn

    async def archived_named(self, scope: Scope, ref: str) -> CapabilityRecord | None:
        """The archived record of the caller's org/project that ``ref`` names (FQDN, id or
        the display name it had; the most recently archived one when several had it)."""
        r = records.c
        query = (
            sa.select(records)
            .where(
                r.org == scope.org,
                r.project == scope.project,
                r.archived_at.is_not(None),
                sa.or_(r.fqdn == ref, r.id == ref, r.display_name == ref),
            )
            .order_by(r.archived_at.desc(), r.fqdn)
            .limit(1)
        )
        row = (await self.conn.execute(query)).first()
        return record_of(row) if row else None

    async def dependants(self, fqdn: str, scope: Scope) -> tuple[list[CapabilityRecord], int]:
        """Active capabilities (any scope) whose recorded tools include ``fqdn``: those
        ``scope`` may see (at most ``MAX_DEPENDANTS``), and how many others there are."""
        r = records.c
        needle = f'%"{_like_literal(fqdn)}"%'
        using = (
            ACTIVE,
            r.record_type == "capability",
            r.fqdn != fqdn,
            sa.cast(r.tools_used, sa.Text()).like(needle, escape=LIKE_ESCAPE),
        )
        query = (
            sa.select(records)
            .where(*using, visible_to(scope))
            .order_by(r.display_name, r.fqdn)
            .limit(MAX_DEPENDANTS)
        )
        shown = [record_of(row) for row in await self.conn.execute(query)]
        total = sa.select(sa.func.count()).select_from(records).where(*using)
        return shown, int((await self.conn.execute(total)).scalar_one()) - len(shown)

    async def take_aliases(self, fqdn: str) -> list[dict[str, str]]:
        """Remove the aliases of ``fqdn`` and return them (to keep with the archived record)."""
        a = aliases.c
        query = sa.select(a.alias, a.tool_name, a.created_at).where(a.target_fqdn == fqdn)
        held = [
            {
                "alias": row.alias,
                "tool_name": row.tool_name,
                "created_at": row.created_at.isoformat(),
            }
            for row in await self.conn.execute(query.order_by(a.created_at, a.alias))
        ]
        await self.conn.execute(aliases.delete().where(a.target_fqdn == fqdn))
        return held

    async def archive(
        self, fqdn: str, *, by: str, at: datetime, held: list[dict[str, str]]
    ) -> None:
        """Mark a record archived, keeping the aliases it held."""
        values = {"archived_at": at, "archived_by": by, "archived_aliases": held, "updated_at": at}
        await self.conn.execute(records.update().where(records.c.fqdn == fqdn).values(values))

    async def unarchive(self, fqdn: str, **values: Any) -> None:
        """Make an archived record active again, with ``values`` (its name) in the same
        statement (the unique names of a scope are checked against the active records)."""
        cleared = {"archived_at": None, "archived_by": None, "archived_aliases": sa.null()}
        await self.conn.execute(
            records.update().where(records.c.fqdn == fqdn).values(cleared | values)
        )

    async def purge(self, fqdn: str) -> None:
        """Delete every row of an archived record: traces, vectors, tags, versions, record.

        The database refuses to delete history of a record that is not archived."""
        await self.conn.execute(
            execution_traces.delete().where(execution_traces.c.capability_fqdn == fqdn)
        )
        await self.conn.execute(
            discovery_vectors.delete().where(discovery_vectors.c.item_key == f"capability:{fqdn}")
        )
        await self.conn.execute(tags_table.delete().where(tags_table.c.fqdn == fqdn))
        await self.conn.execute(version_tags.delete().where(version_tags.c.capability_fqdn == fqdn))
        await self.conn.execute(versions.delete().where(versions.c.capability_fqdn == fqdn))
        await self.conn.execute(records.delete().where(records.c.fqdn == fqdn))

    async def insert_version_tag(
        self, fqdn: str, version: int, tag: str, *, by: str, at: datetime
    ) -> None:
        """Give one version its tag (the unique constraints refuse a second one)."""
        await self.conn.execute(
            version_tags.insert().values(
                capability_fqdn=fqdn, version=version, tag=tag, created_by=by, created_at=at
            )
        )

    async def tag_owner(self, fqdn: str, tag: str) -> int | None:
        """The version of ``fqdn`` that carries ``tag``, if any."""
        vt = version_tags.c
        query = sa.select(vt.version).where(vt.capability_fqdn == fqdn, vt.tag == tag)
        return (await self.conn.execute(query)).scalars().first()
