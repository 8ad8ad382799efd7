"""Picking one version of a capability without reading every version's code.

    head = select_version(await version_heads(conn, fqdn), spec, name)  # numbers, tags, dates
    version = await version_at(conn, fqdn, head.version)               # the one full row

A specifier (``name@v1``, ``@2025-12-22``...) chooses by number, tag and date only, and
versions accumulate without end: reading every row's code for it held ~100 MB per lookup of
a capability with 1 000 versions of 100 KB code.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pml.errors import NotFound
from pml.registry.models import VersionRecord
from pml.storage.capability_repo import VERSION_COLUMNS
from pml.storage.tables import capability_version_tags as version_tags
from pml.storage.tables import capability_versions as versions

_TAGGED = sa.and_(
    version_tags.c.capability_fqdn == versions.c.capability_fqdn,
    version_tags.c.version == versions.c.version,
)


@dataclass(frozen=True, slots=True)
class VersionHead:
    """What a specifier selects by (``pml.registry.versions.VersionLike``)."""

    version: int
    version_tag: str | None
    updated_at: datetime


async def version_heads(conn: AsyncConnection, fqdn: str) -> list[VersionHead]:
    """The number, tag and date of every version of ``fqdn``, oldest first."""
    query = (
        sa.select(versions.c.version, version_tags.c.tag, versions.c.updated_at)
        .select_from(versions.outerjoin(version_tags, _TAGGED))
        .where(versions.c.capability_fqdn == fqdn)
        .order_by(versions.c.version)
    )
    return [VersionHead(row[0], row[1], row[2]) for row in await conn.execute(query)]


async def version_at(conn: AsyncConnection, fqdn: str, number: int) -> VersionRecord:
    """Version ``number`` of ``fqdn`` in full, or ``NOT_FOUND`` (purged meanwhile)."""
    query = (
        sa.select(*VERSION_COLUMNS)
        .select_from(versions.outerjoin(version_tags, _TAGGED))
        .where(versions.c.capability_fqdn == fqdn, versions.c.version == number)
    )
    row = (await conn.execute(query)).first()
    if row is None:
        raise NotFound(f"Capability not found: {fqdn}")
    return VersionRecord(**dict(row._mapping))  # pyright: ignore[reportPrivateUsage]
