"""SQL for remembered intents: the distinct intents each capability was asked for with.

    async with db.transaction() as conn:
        changed = await SqlIntentRepository(conn, meaning).remember([IntentSighting(...), ...])
    async with db.read() as conn:
        by_fqdn = await SqlIntentRepository(conn).of(["acme.web.fs.read.a7f3"])

The rules are ``pml.registry.intents``'s. ``remember`` settles each sighting (scrubbed,
bounded, normalised: none is stored as it was queued), reads the intents already kept for
the sighted capabilities (one query per 500), counts a use of the same normalised text or —
with a ``MeaningCheck`` — of a kept one that means the same, writes everything with one
upsert (``ON CONFLICT (fqdn, text_hash)`` adds the uses: another replica writing the same
text at once loses nothing), then trims each capability that gained a row to
``MAX_KEPT``, as it reads it now. Two replicas adding at the same instant may leave one
row too many until the next write; readers take at most ``MAX_KEPT``, newest first.
A sighting of a capability that no longer exists is skipped. ``remember`` answers the
capabilities whose set of intents changed (discovery re-reads those).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from pml.registry.intents import (
    MAX_KEPT,
    IntentRecord,
    IntentSighting,
    Kept,
    MeaningCheck,
    lexical_similarities,
    same_meaning,
    settled,
    sighted,
    to_drop,
)
from pml.storage.tables import capability_records as records
from pml.storage.tables import metadata
from pml.storage.types import UtcDateTime

__all__ = [
    "IntentRecord",
    "IntentSighting",
    "SqlIntentRepository",
    "capability_intents",
    "remember_now",
]

logger = logging.getLogger(__name__)

# The distinct intents a capability was asked for with (bounded per capability).
capability_intents = sa.Table(
    "capability_intents",
    metadata,
    sa.Column(
        "fqdn",
        sa.String(400),
        sa.ForeignKey("capability_records.fqdn", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("text_hash", sa.String(64), primary_key=True),  # of the normalised text
    sa.Column("text", sa.Text(), nullable=False),
    sa.Column("source", sa.String(16), nullable=False),
    sa.Column("created_by", sa.String(128), nullable=False),
    sa.Column("first_seen_at", UtcDateTime(), nullable=False),
    sa.Column("last_seen_at", UtcDateTime(), nullable=False),
    sa.Column("uses", sa.Integer(), nullable=False, server_default="1"),
    sa.Index(None, "last_seen_at"),
)
intents = capability_intents

BATCH: Final = 500


@dataclass(slots=True)
class _Write:
    """One row to upsert: a new text, or uses of a kept one."""

    sighting: IntentSighting
    text_hash: str
    text: str
    uses: int = 1
    new: bool = True


@dataclass(slots=True)
class _Capability:
    kept: list[Kept] = field(default_factory=list[Kept])
    writes: dict[str, _Write] = field(default_factory=dict[str, _Write])


class SqlIntentRepository:
    """Reads and writes ``capability_intents`` on one connection."""

    def __init__(self, conn: AsyncConnection, meaning: MeaningCheck | None = None) -> None:
        self.conn = conn
        self.meaning = meaning

    async def remember(self, sightings: Sequence[IntentSighting]) -> set[str]:
        """Record ``sightings``; the FQDNs whose set of intents changed."""
        by_fqdn: dict[str, list[IntentSighting]] = defaultdict(list)
        for sighting in filter(None, map(settled, sightings)):
            by_fqdn[sighting.fqdn].append(sighting)
        if not by_fqdn:
            return set()
        existing = await self._existing(sorted(by_fqdn))
        plans: dict[str, _Capability] = {}
        for fqdn in sorted(by_fqdn):
            if fqdn in existing:
                plans[fqdn] = await self._plan(existing[fqdn], by_fqdn[fqdn])
        rows = [write for plan in plans.values() for write in plan.writes.values()]
        if rows:  # one statement, cached, run over every row (multi-row VALUES are not)
            await self.conn.execute(self._upsert(), _row_values(rows))
        grown = sorted(
            fqdn for fqdn, plan in plans.items() if any(w.new for w in plan.writes.values())
        )
        await self._trim(grown)
        return set(grown)

    async def of(
        self, fqdns: Iterable[str], *, limit: int = MAX_KEPT
    ) -> dict[str, list[IntentRecord]]:
        """The remembered intents of each of ``fqdns``, most recently seen first (at most
        ``limit`` each)."""
        wanted = list(dict.fromkeys(fqdns))
        found: dict[str, list[IntentRecord]] = {fqdn: [] for fqdn in wanted}
        i = intents.c
        columns = (i.fqdn, i.text, i.source, i.created_by, i.first_seen_at, i.last_seen_at)
        for start in range(0, len(wanted), BATCH):
            query = (
                sa.select(*columns, i.uses)
                .where(i.fqdn.in_(wanted[start : start + BATCH]))
                .order_by(i.fqdn, i.last_seen_at.desc(), i.text_hash)
            )
            for row in await self.conn.execute(query):
                kept = found[row.fqdn]
                if len(kept) < limit:
                    kept.append(IntentRecord(*row[1:]))
        return found

    # -- helpers ---------------------------------------------------------------------------

    async def _existing(self, fqdns: list[str]) -> dict[str, list[Kept]]:
        """The kept intents of each of ``fqdns`` that is still a capability (oldest first)."""
        found: dict[str, list[Kept]] = {}
        r, i = records.c, intents.c
        for start in range(0, len(fqdns), BATCH):
            chunk = fqdns[start : start + BATCH]
            present = await self.conn.execute(sa.select(r.fqdn).where(r.fqdn.in_(chunk)))
            for (fqdn,) in present:
                found[fqdn] = []
            query = (
                sa.select(i.fqdn, i.text_hash, i.text, i.last_seen_at)
                .where(i.fqdn.in_(chunk))
                .order_by(i.fqdn, i.last_seen_at, i.text_hash)
            )
            for fqdn, text_hash, text, last_seen_at in await self.conn.execute(query):
                if fqdn in found:
                    found[fqdn].append(Kept(text_hash, text, last_seen_at))
        return found

    async def _plan(self, kept: list[Kept], sightings: list[IntentSighting]) -> _Capability:
        """What to write for one capability: uses of kept texts, new texts."""
        plan = _Capability(kept=list(kept))
        known = {k.text_hash: k.text for k in kept}
        fresh: list[IntentSighting] = []
        for sighting in sorted(sightings, key=lambda s: s.seen_at):
            if sighting.text_hash in known:
                self._count(plan, sighting, sighting.text_hash, known[sighting.text_hash])
            else:
                fresh.append(sighting)
        if not fresh:
            return plan
        texts = [k.text for k in kept] + [s.text for s in fresh]
        hashes = [k.text_hash for k in kept] + [s.text_hash for s in fresh]
        matrix = await self._similarities(texts) if kept or len(fresh) > 1 else None
        chosen: list[int] = list(range(len(kept)))  # indexes of the texts kept or added
        for offset, sighting in enumerate(fresh):
            index = len(kept) + offset
            if sighting.text_hash in plan.writes:  # the same text twice in this batch
                self._count(plan, sighting, sighting.text_hash, sighting.text)
                continue
            match = same_meaning(matrix[index], chosen) if matrix is not None else None
            if match is not None:  # means what a kept (or just added) one means: a use
                self._count(plan, sighting, hashes[match], texts[match])
                continue
            chosen.append(index)
            plan.writes[sighting.text_hash] = _Write(
                sighting, sighting.text_hash, sighting.text, sighting.uses
            )
        return plan

    @staticmethod
    def _count(plan: _Capability, sighting: IntentSighting, text_hash: str, text: str) -> None:
        write = plan.writes.get(text_hash)
        if write is None:
            plan.writes[text_hash] = _Write(sighting, text_hash, text, sighting.uses, new=False)
            return
        write.uses += sighting.uses
        if sighting.seen_at > write.sighting.seen_at:
            write.sighting = sighting

    async def _similarities(self, texts: list[str]) -> list[list[float]] | None:
        """The meaning check's matrix; None without one, or when it fails (exact
        duplicates still count, and nothing queued is lost)."""
        if self.meaning is None:
            return None
        try:
            matrix = await self.meaning.similarities(texts)
        except Exception:  # the model's failure must not fail the batched write
            logger.warning("intents compared by their words only", exc_info=True)
            return None
        size = len(texts)
        if len(matrix) != size or any(len(row) != size for row in matrix):
            logger.warning("meaning check answered %d rows for %d intents", len(matrix), size)
            return None
        return matrix

    def _upsert(self) -> Any:
        postgres = self.conn.dialect.name == "postgresql"
        insert: Any = postgresql_insert(intents) if postgres else sqlite_insert(intents)
        latest = sa.func.greatest if postgres else sa.func.max
        table = intents.c
        return insert.on_conflict_do_update(
            index_elements=["fqdn", "text_hash"],
            set_={
                "uses": table.uses + insert.excluded.uses,
                "last_seen_at": latest(table.last_seen_at, insert.excluded.last_seen_at),
            },
        )

    async def _trim(self, fqdns: list[str]) -> None:
        """Drop what is past the bound for each of ``fqdns``, as they are now."""
        if not fqdns:
            return
        current = await self._existing(fqdns)
        i = intents.c
        for fqdn in fqdns:
            kept = current.get(fqdn, [])
            if len(kept) <= MAX_KEPT:
                continue
            texts = [k.text for k in kept]
            matrix = await self._similarities(texts) or lexical_similarities(texts)
            gone = to_drop(kept, matrix)
            await self.conn.execute(sa.delete(intents).where(i.fqdn == fqdn, i.text_hash.in_(gone)))


def _row_values(rows: list[_Write]) -> list[dict[str, Any]]:
    """The rows to upsert, in key order (concurrent writers lock rows in the same order)."""
    return [
        {
            "fqdn": row.sighting.fqdn,
            "text_hash": row.text_hash,
            "text": row.text,
            "source": row.sighting.source[:16],
            "created_by": row.sighting.user[:128],
            "first_seen_at": row.sighting.seen_at,
            "last_seen_at": row.sighting.seen_at,
            "uses": row.uses,
        }
        for row in sorted(rows, key=lambda w: (w.sighting.fqdn, w.text_hash))
    ]


async def remember_now(
    conn: AsyncConnection,
    fqdn: str,
    text: object,
    user: str,
    at: datetime,
    *,
    source: str = "rename",
) -> bool:
    """Remember one intent in the caller's transaction (a rename's description): whether
    the capability's set of intents changed."""
    sighting = sighted(fqdn, text, source, user, at)
    if sighting is None:
        return False
    return bool(await SqlIntentRepository(conn).remember([sighting]))
