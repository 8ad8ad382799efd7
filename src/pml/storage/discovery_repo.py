"""SQL for discovery: stored vectors, and the capabilities changed since a moment.

    async with db.read() as conn:
        repo = SqlDiscoveryRepository(conn)
        stored = await repo.vectors("minilm-l6-v2/onnx-int8/2")      # key -> (text hash, bytes)
        rows = await repo.capabilities_since(watermark)          # CapabilityRow, oldest first
        keys = await repo.keys("text:")                          # every view's key
    async with db.transaction() as conn:
        repo = SqlDiscoveryRepository(conn)
        await repo.save_vectors(model, [(key, text_hash, blob)], now)
        removed = await repo.delete_vectors(unused, before=cutoff)  # of keys, unless saved since

Vectors are stored as raw little-endian float32 bytes with the embedder that made them and
a hash of the text, so a restart (or another replica) reuses them and only new or changed
texts are embedded again. Which ones no item uses any more is discovery's decision
(``pml.discovery.pruning``); here are the two queries it needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final, NamedTuple, cast

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from pml.registry.intents import MAX_KEPT
from pml.storage.intent_repo import capability_intents as intents
from pml.storage.tables import capability_records as records
from pml.storage.tables import discovery_vectors as vectors

SAVE_BATCH: Final = 500
INTENT_BATCH: Final = 500

_CAPABILITY_COLUMNS = (
    records.c.fqdn,
    records.c.org,
    records.c.project,
    records.c.display_name,
    records.c.named,
    records.c.namespace,
    records.c.action,
    records.c.tool_name,
    records.c.intent,
    records.c.description,
    records.c.parameters_schema,
    records.c.tools_used,
    records.c.routing,
    records.c.visibility,
    records.c.created_by,
    records.c.usage_count,
    records.c.success_count,
    records.c.recent_outcomes,
    records.c.recent_runs,
    records.c.recent_latency_ms,
    records.c.updated_at,
    records.c.archived_at,
    records.c.deprecated_at,
    records.c.deprecation_message,
    records.c.replaced_by,
)


@dataclass(frozen=True, slots=True)
class CapabilityRow:
    """What discovery indexes and returns of one capability."""

    fqdn: str
    org: str
    project: str
    display_name: str
    named: bool
    namespace: str
    action: str
    tool_name: str
    intent: str | None
    description: str | None
    parameters_schema: dict[str, Any]
    tools_used: list[str]
    routing: str
    visibility: str
    created_by: str
    usage_count: int
    success_count: int
    updated_at: datetime
    archived: bool = False
    # The ``deprecated``/``replacedBy`` warning of a deprecated capability.
    deprecation: dict[str, str] | None = None
    # How its last runs went (``pml.registry.reliability``)
    recent_outcomes: int = 0
    recent_runs: int = 0
    recent_latency_ms: float = 0.0
    # The distinct intents it was asked for with (``capability_intents``), most recently
    # seen first, at most ``pml.registry.intents.MAX_KEPT``; ``updated_at`` is then the
    # later of the record's change and its newest intent's arrival (discovery's watermark)
    intents: tuple[str, ...] = ()


class CapabilityStats(NamedTuple):
    """What changes on every run: totals and the recent runs."""

    usage: int
    success: int
    recent_outcomes: int
    recent_runs: int
    recent_latency_ms: float


class SqlDiscoveryRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn

    async def vectors(self, model: str) -> dict[str, tuple[str, bytes]]:
        """Every stored vector made by ``model``: key → (text hash, float32 bytes)."""
        v = vectors.c
        result = await self.conn.execute(
            sa.select(v.item_key, v.text_hash, v.vector).where(v.model == model)
        )
        return {key: (text_hash, bytes(blob)) for key, text_hash, blob in result}

    async def vectors_of(self, model: str, keys: Sequence[str]) -> dict[str, tuple[str, bytes]]:
        """The stored vectors of ``keys`` made by ``model`` (as ``vectors``; a few keys)."""
        if not keys:
            return {}
        v = vectors.c
        result = await self.conn.execute(
            sa.select(v.item_key, v.text_hash, v.vector).where(
                v.model == model, v.item_key.in_(list(keys))
            )
        )
        return {key: (text_hash, bytes(blob)) for key, text_hash, blob in result}

    async def save_vectors(
        self, model: str, rows: Sequence[tuple[str, str, bytes]], now: datetime
    ) -> None:
        """Store (replace) vectors: one upsert per batch of keys. Replicas of one database
        index the same texts at the same time, so a key written meanwhile by another is
        replaced, never a unique-key violation."""
        for start in range(0, len(rows), SAVE_BATCH):
            batch = rows[start : start + SAVE_BATCH]
            await self.conn.execute(
                self._upsert(),
                [
                    {
                        "item_key": key,
                        "model": model,
                        "text_hash": text_hash,
                        "vector": blob,
                        "updated_at": now,
                    }
                    for key, text_hash, blob in batch
                ],
            )

    def _upsert(self) -> Any:
        postgres = self.conn.dialect.name == "postgresql"
        insert: Any = postgresql_insert(vectors) if postgres else sqlite_insert(vectors)
        replaced = ("model", "text_hash", "vector", "updated_at")
        return insert.on_conflict_do_update(
            index_elements=["item_key"],
            set_={name: getattr(insert.excluded, name) for name in replaced},
        )

    async def keys(self, prefix: str) -> list[str]:
        """Every stored key starting with ``prefix`` (no ``LIKE`` wildcard in it), whatever
        its model: one query that reads keys only (on SQLite, whose ``LIKE`` is
        case-sensitive here, a range of the primary key's index)."""
        if any(char in prefix for char in "%_\\"):
            raise ValueError(f"a key prefix without LIKE wildcards, not {prefix!r}")
        v = vectors.c
        result = await self.conn.execute(sa.select(v.item_key).where(v.item_key.like(f"{prefix}%")))
        return [key for (key,) in result if key.startswith(prefix)]

    async def delete_vectors(self, keys: Sequence[str], *, before: datetime) -> int:
        """Delete the vectors of ``keys`` stored before ``before`` (one saved again since
        stays): one statement per ``SAVE_BATCH`` keys. How many rows went."""
        removed = 0
        v = vectors.c
        for start in range(0, len(keys), SAVE_BATCH):
            batch = list(keys[start : start + SAVE_BATCH])
            result = await self.conn.execute(
                sa.delete(vectors).where(v.item_key.in_(batch), v.updated_at < before)
            )
            removed += max(result.rowcount, 0)
        return removed

    async def capabilities_since(self, since: datetime | None) -> list[CapabilityRow]:
        """Capabilities changed after ``since`` (all when None), oldest change first: their
        record, or their remembered intents (a new one since then)."""
        r = records.c
        query = sa.select(*_CAPABILITY_COLUMNS).where(r.record_type == "capability")
        if since is not None:
            # first_seen <= last_seen: the index on last_seen_at finds the new ones
            i = intents.c
            new_intents = sa.select(i.fqdn).where(i.last_seen_at > since, i.first_seen_at > since)
            query = query.where(sa.or_(r.updated_at > since, r.fqdn.in_(new_intents)))
        result = await self.conn.execute(query)
        rows = [_capability(row) for row in result.mappings()]
        return await self._with_intents(rows, everything=since is None)

    async def capabilities(self, fqdns: Sequence[str]) -> list[CapabilityRow]:
        """These capabilities (the ones that exist), oldest change first."""
        if not fqdns:
            return []
        r = records.c
        query = sa.select(*_CAPABILITY_COLUMNS).where(
            r.record_type == "capability", r.fqdn.in_(list(fqdns))
        )
        result = await self.conn.execute(query)
        return await self._with_intents([_capability(row) for row in result.mappings()])

    async def _with_intents(
        self, rows: list[CapabilityRow], *, everything: bool = False
    ) -> list[CapabilityRow]:
        """``rows`` with their remembered intents (newest first, at most ``MAX_KEPT``) and
        ``updated_at`` moved to their newest intent's arrival when later, ordered by it.
        One query per ``INTENT_BATCH`` rows (``everything``: one query for all)."""
        if not rows:
            return rows
        i = intents.c
        columns = (i.fqdn, i.text, i.first_seen_at)
        found: dict[str, list[str]] = {row.fqdn: [] for row in rows}
        if everything:
            kinds = sa.select(records.c.fqdn).where(records.c.record_type == "capability")
            queries = [sa.select(*columns).where(i.fqdn.in_(kinds))]
        else:
            fqdns = list(found)
            queries = [
                sa.select(*columns).where(i.fqdn.in_(fqdns[start : start + INTENT_BATCH]))
                for start in range(0, len(fqdns), INTENT_BATCH)
            ]
        newest: dict[str, datetime] = {}
        for query in queries:
            ordered = query.order_by(i.fqdn, i.last_seen_at.desc(), i.text_hash)
            for fqdn, text, first_seen_at in await self.conn.execute(ordered):
                kept = found.get(fqdn)
                if kept is None:
                    continue
                if len(kept) < MAX_KEPT:
                    kept.append(text)
                if fqdn not in newest or first_seen_at > newest[fqdn]:
                    newest[fqdn] = first_seen_at
        complete = [
            replace(
                row,
                intents=tuple(found[row.fqdn]),
                updated_at=max(row.updated_at, newest.get(row.fqdn, row.updated_at)),
            )
            for row in rows
        ]
        return sorted(complete, key=lambda row: (row.updated_at, row.fqdn))

    async def capability_stats(self) -> dict[str, CapabilityStats]:
        """Usage, success and recent runs of every capability (``CapabilityStats``)."""
        r = records.c
        columns = (r.usage_count, r.success_count, r.recent_outcomes, r.recent_runs)
        result = await self.conn.execute(
            sa.select(r.fqdn, *columns, r.recent_latency_ms).where(r.record_type == "capability")
        )
        return {
            fqdn: CapabilityStats(int(usage), int(success), int(bits), int(runs), float(latency))
            for fqdn, usage, success, bits, runs, latency in result
        }


def _capability(data: sa.RowMapping) -> CapabilityRow:
    schema: object = data["parameters_schema"]
    tools: object = data["tools_used"]
    return CapabilityRow(
        fqdn=data["fqdn"],
        org=data["org"],
        project=data["project"],
        display_name=data["display_name"],
        named=bool(data["named"]),
        namespace=data["namespace"],
        action=data["action"],
        tool_name=data["tool_name"],
        intent=data["intent"],
        description=data["description"],
        parameters_schema=cast("dict[str, Any]", schema)
        if isinstance(schema, dict)
        else {"type": "object"},
        tools_used=[str(t) for t in cast("list[Any]", tools)] if isinstance(tools, list) else [],
        routing=data["routing"],
        visibility=data["visibility"],
        created_by=data["created_by"],
        usage_count=int(data["usage_count"]),
        success_count=int(data["success_count"]),
        recent_outcomes=int(data["recent_outcomes"]),
        recent_runs=int(data["recent_runs"]),
        recent_latency_ms=float(data["recent_latency_ms"]),
        archived=data["archived_at"] is not None,
        deprecation=_deprecation(data),
        updated_at=data["updated_at"],
    )


def _deprecation(data: sa.RowMapping) -> dict[str, str] | None:
    if data["deprecated_at"] is None:
        return None
    fields = {"deprecated": str(data["deprecation_message"] or "deprecated")}
    if data["replaced_by"] is not None:
        fields["replacedBy"] = str(data["replaced_by"])
    return fields
