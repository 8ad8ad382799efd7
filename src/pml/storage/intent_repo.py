"""SQL for remembered intents: the distinct intents each capability was asked for with.

    async with db.transaction() as conn:
        changed = await SqlIntentRepository(conn).remember([IntentSighting(...), ...])
    async with db.read() as conn:
        by_fqdn = await SqlIntentRepository(conn).of(["acme.web.fs.read.a7f3"])

A sighting of a text already remembered for that capability (same normalised text hash)
counts a use and refreshes ``last_seen_at``; a new text adds a row. ``remember`` answers
the capabilities whose set of intents changed (discovery re-reads those).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pml.storage.tables import capability_intents as intents


@dataclass(frozen=True, slots=True)
class IntentSighting:
    """One intent a capability was reached with: its text (already scrubbed and bounded),
    the SHA-256 of its normalised form, how (``capture``, ``reuse``, ``call``, ``rename``,
    ``curate``), by whom and when."""

    fqdn: str
    text: str
    text_hash: str
    source: str
    user: str
    seen_at: datetime


@dataclass(frozen=True, slots=True)
class IntentRecord:
    """One remembered intent of a capability."""

    text: str
    source: str
    created_by: str
    first_seen_at: datetime
    last_seen_at: datetime
    uses: int


class SqlIntentRepository:
    """Reads and writes ``capability_intents`` on one connection."""

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn

    async def remember(self, sightings: Sequence[IntentSighting]) -> set[str]:
        """Record ``sightings``; the FQDNs whose set of intents changed."""
        changed: set[str] = set()
        i = intents.c
        for sighting in sightings:
            key = (i.fqdn == sighting.fqdn) & (i.text_hash == sighting.text_hash)
            result = await self.conn.execute(
                intents.update().where(key).values(uses=i.uses + 1, last_seen_at=sighting.seen_at)
            )
            if result.rowcount:
                continue
            await self.conn.execute(
                intents.insert().values(
                    fqdn=sighting.fqdn,
                    text_hash=sighting.text_hash,
                    text=sighting.text,
                    source=sighting.source,
                    created_by=sighting.user,
                    first_seen_at=sighting.seen_at,
                    last_seen_at=sighting.seen_at,
                    uses=1,
                )
            )
            changed.add(sighting.fqdn)
        return changed

    async def of(self, fqdns: Iterable[str]) -> dict[str, list[IntentRecord]]:
        """The remembered intents of each of ``fqdns``, most recently seen first."""
        wanted = list(dict.fromkeys(fqdns))
        found: dict[str, list[IntentRecord]] = {fqdn: [] for fqdn in wanted}
        i = intents.c
        columns = (i.fqdn, i.text, i.source, i.created_by, i.first_seen_at, i.last_seen_at)
        for start in range(0, len(wanted), 500):
            query = (
                sa.select(*columns, i.uses)
                .where(i.fqdn.in_(wanted[start : start + 500]))
                .order_by(i.fqdn, i.last_seen_at.desc(), i.text_hash)
            )
            for row in await self.conn.execute(query):
                found[row.fqdn].append(IntentRecord(*row[1:]))
        return found
