"""``pml_discover``: the tools and capabilities that fit an intent, ranked, ready to call.

    discovery = DiscoveryService(db, pool, load_embedder("auto"), routing=RoutingRules())
    async with discovery.running():                  # loads the index, keeps stats fresh
        results = await discovery.discover(scope, "read a json file", limit=5)
    registry.on_change(discovery.capability_changed)  # this process's changes: at once

The index is built from the upstream pool's tools and the database's capabilities; their
vectors are stored (``discovery_vectors``), so a restart or another replica embeds only what
is new, and replicas that start together share the embedding (``pml.discovery.filling``).
Before a search (at most every ``refresh_interval_s``, and at once after a change was
announced) the index reads the capabilities changed since its last look (one indexed
query) and those announced as changed, here or — through PostgreSQL ``NOTIFY`` — by another
replica. Usage and success counts, which change on every run, are re-read every
``STATS_INTERVAL_S``; a full reconciliation every ``RECONCILE_INTERVAL_S`` catches a change
written with a clock behind this one's. Each full load or reconciliation also deletes the
stored vectors of texts no item shows any more (``pml.discovery.pruning``). A query's own
embedding takes its tenant's turn in the process's lane (``pml.discovery.embed_lane``).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

import anyio
import numpy as np
from sqlalchemy.ext.asyncio import AsyncConnection

from pml.discovery import embed_lane
from pml.discovery.background import embed_in_background
from pml.discovery.base import KindFilter
from pml.discovery.embedder import Embedder
from pml.discovery.filling import Filler, Place, Wanted, decoded
from pml.discovery.index import Hit, HybridIndex, Vector
from pml.discovery.items import (
    Item,
    below_replacements,
    capability_item,
    capability_key,
    hidden,
    render,
    text_hash,
    tool_item,
)
from pml.discovery.pruning import live_views, prune_stored_views, view_key
from pml.discovery.text import terms
from pml.errors import PmlError
from pml.registry.changes import CapabilityChange
from pml.registry.models import RoutingRules
from pml.registry.reliability import Reliability
from pml.registry.routing import server_routing
from pml.registry.scope import Scope
from pml.storage.database import Database
from pml.storage.discovery_repo import SqlDiscoveryRepository
from pml.storage.embed_claims import embed_claim
from pml.storage.types import utc_now
from pml.upstream.base import ToolSource

if TYPE_CHECKING:
    from pml.policy.enforcer import PolicyEnforcer

logger = logging.getLogger(__name__)

REFRESH_INTERVAL_S: Final = 0.5
STATS_INTERVAL_S: Final = 30.0
RECONCILE_INTERVAL_S: Final = 300.0
EMBED_BATCH: Final = 64
QUERY_CACHE_SIZE: Final = 512
# With a policy, this many times the limit are ranked, so hiding some still fills the page.
POLICY_OVERFETCH: Final = 4
MAX_POLICY_FETCH: Final = 200


class DiscoveryService:
    """Keeps the hybrid index in step with tools and capabilities, and searches it."""

    def __init__(
        self,
        db: Database,
        pool: ToolSource,
        embedder: Embedder,
        *,
        routing: RoutingRules,
        clock: Callable[[], datetime] = utc_now,
        refresh_interval_s: float = REFRESH_INTERVAL_S,
        query_cache_size: int = QUERY_CACHE_SIZE,
        lane: embed_lane.EmbedLane | None = None,
    ) -> None:
        self._db = db
        self._pool = pool
        self._embedder = embedder
        self.routing = routing  # [routing]; a reload replaces it
        self._clock = clock
        self._refresh_interval_s = refresh_interval_s
        self._query_vectors = embed_lane.QueryVectors(
            embedder.embed, cache_size=query_cache_size, lane=lane
        )
        self._index = HybridIndex(embedder.dim)
        self._lock = anyio.Lock()
        self._loaded = False
        self._dirty = True
        self._last_refresh = 0.0
        self._watermark: datetime | None = None
        self._stored: dict[str, tuple[str, bytes]] | None = None
        self._changed: set[str] = set()  # FQDNs announced as changed, read at the next sync
        self._indexed: dict[str, str] = {}  # key -> the text its terms were taken from
        self._view_hashes: dict[str, tuple[str, ...]] = {}  # key -> its views' text hashes
        self._view_vectors: dict[str, Vector] = {}  # text hash -> vector, shared by rows
        # The enforcement point: results the request's policy forbids are hidden (SPEC §7).
        self.policy: PolicyEnforcer | None = None

    @property
    def model_id(self) -> str:
        """The embedder the index was built with."""
        return self._embedder.model_id

    @property
    def model_process(self) -> str:
        """Where the embedder runs (a ``SharedModel`` tells; any other runs here)."""
        return str(getattr(self._embedder, "process", "this process"))

    def __len__(self) -> int:
        return len(self._index)

    async def capability_changed(self, change: CapabilityChange) -> None:
        """A capability changed (here or in another process): the next search reads it."""
        self._changed.add(change.fqdn)
        self._dirty = True

    async def discover(
        self,
        scope: Scope,
        intent: str,
        *,
        kind: KindFilter = "all",
        limit: int = 5,
        min_score: float = 0.0,
    ) -> list[dict[str, Any]]:
        """The ``pml_discover`` results for ``intent`` (SPEC §7), best first."""
        hits = await self.search(scope, intent, kind=kind, limit=limit, min_score=min_score)
        return [render(hit, routing=self._tool_routing(hit)) for hit in hits]

    async def rank(
        self, scope: Scope, intent: str, *, kind: KindFilter = "all", limit: int = 5
    ) -> list[dict[str, Any]]:
        """``pml_discover``'s ranking of what ``scope`` may see, without an agent request's
        policy: a person's search (the dashboard) is not an agent's request, so it is neither
        routed, filtered by that request's policy nor audited as one."""
        hits = await self.search(scope, intent, kind=kind, limit=limit, policed=False)
        return [render(hit, routing=self._tool_routing(hit)) for hit in hits]

    async def search(
        self,
        scope: Scope,
        intent: str,
        *,
        kind: KindFilter = "all",
        limit: int = 5,
        min_score: float = 0.0,
        policed: bool = True,
    ) -> list[Hit]:
        """The ranked index rows for ``intent`` that ``scope`` may see and may call."""
        await self.refresh()
        query = intent[: embed_lane.MAX_INTENT_CHARS]
        vector: Vector = await self._query_vectors.vector(scope, query)
        policy = self.policy if policed else None
        wanted = limit if policy is None else min(limit * POLICY_OVERFETCH, MAX_POLICY_FETCH)
        hits = self._index.search(
            vector, terms(query), scope, kind=kind, limit=wanted, min_score=min_score
        )
        if policy is None:
            return below_replacements(hits)
        request = await policy.begin(scope, intent, source="pml_discover")
        return below_replacements([hit for hit in hits if not hidden(policy, request, hit)][:limit])

    async def refresh(self, *, force: bool = False) -> None:
        """Bring the index up to date if it may be stale (see module)."""
        due = time.monotonic() - self._last_refresh >= self._refresh_interval_s
        if not (force or self._dirty or due or not self._loaded):
            return
        async with self._lock:
            due = time.monotonic() - self._last_refresh >= self._refresh_interval_s
            if not (force or self._dirty or due or not self._loaded):
                return
            self._dirty = False
            try:
                await self._sync(full=not self._loaded or force)
            except PmlError as error:
                if not self._loaded:
                    raise
                logger.warning("discovery index not refreshed (serving the last one): %s", error)
            self._last_refresh = time.monotonic()

    async def refresh_stats(self) -> None:
        """Re-read every capability's usage and success counts and its last runs (its
        prior, and the reliability fields of its results)."""
        async with self._step(write=False) as conn:
            stats = await SqlDiscoveryRepository(conn).capability_stats()
        for fqdn, counts in stats.items():
            recent = Reliability.of(
                counts.recent_outcomes, counts.recent_runs, counts.recent_latency_ms
            )
            self._index.set_stats(capability_key(fqdn), counts.usage, counts.success, recent)

    @asynccontextmanager
    async def running(self) -> AsyncGenerator[None]:
        """Load the index in the background and keep it fresh while the block runs."""
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._maintain)
            try:
                yield
            finally:
                tasks.cancel_scope.cancel()

    # -- internals -----------------------------------------------------------------------

    async def _maintain(self) -> None:
        # Any failure is logged and the next round tries again: the gateway goes on serving.
        try:
            await self.refresh()
        except Exception as error:  # noqa: BLE001 - a background task must not end the gateway
            logger.warning("discovery index not loaded at start: %.300s", error)
        next_reconcile = time.monotonic() + RECONCILE_INTERVAL_S
        while True:
            await anyio.sleep(STATS_INTERVAL_S)
            try:
                if time.monotonic() >= next_reconcile:
                    next_reconcile = time.monotonic() + RECONCILE_INTERVAL_S
                    await self.refresh(force=True)
                else:
                    await self.refresh_stats()
            except Exception as error:  # noqa: BLE001 - as above
                logger.warning("discovery index maintenance failed: %.300s", error)

    async def _sync(self, *, full: bool) -> None:
        if self._stored is None:
            async with self._step(write=False) as conn:
                self._stored = await SqlDiscoveryRepository(conn).vectors(self.model_id)
        items = [tool_item(tool) for tool in await self._pool.list_tools()]
        tool_keys = {item.entry.key for item in items}
        for key in list(self._index.keys()):
            if key.startswith("tool:") and key not in tool_keys:
                self._forget(key)
        since = None if full else self._watermark
        changed, self._changed = self._changed, set()
        try:
            async with self._step(write=False) as conn:
                repo = SqlDiscoveryRepository(conn)
                rows = await repo.capabilities_since(since)
                if since is not None and changed:
                    rows.extend(await repo.capabilities(sorted(changed - {r.fqdn for r in rows})))
        except BaseException:
            self._changed |= changed  # read them next time
            raise
        if full:
            present = {capability_key(row.fqdn) for row in rows if not row.archived}
            for key in list(self._index.keys()):
                if key.startswith("capability:") and key not in present:
                    self._forget(key)
        # archived (or purged: changed, and no row any more) capabilities leave the index
        for fqdn in {row.fqdn for row in rows if row.archived} | (changed - {r.fqdn for r in rows}):
            self._forget(capability_key(fqdn))
        items.extend(capability_item(row) for row in rows if not row.archived)
        if rows:
            latest = max(row.updated_at for row in rows)
            self._watermark = latest if self._watermark is None else max(latest, self._watermark)
        await self._put(items)
        if full:  # the view vectors no row uses any more, held and stored (see pruning)
            live = live_views(self._view_hashes.values())
            self._view_vectors = {d: v for d, v in self._view_vectors.items() if d in live}
            await prune_stored_views(self._step, live, self._clock())
        self._loaded = True
        self._stored = {}  # what was stored is in the index now

    async def _put(self, items: Sequence[Item]) -> None:
        """Index ``items``, reusing the vectors already indexed or stored for the same text."""
        await self._embed_views(items)
        stored = self._stored or {}
        missing: dict[str, Item] = {}
        for item in items:
            key = item.entry.key
            current = self._index.get(key)
            if current is not None and current.text_hash == item.entry.text_hash:
                self._place(item, None)
                continue
            vector = decoded(stored.get(key), item.entry.text_hash, self._embedder.dim)
            if vector is not None:
                self._place(item, vector)
            else:
                missing[key] = item
        wanted = [
            Wanted(key, item.entry.text_hash, item.embed_text) for key, item in missing.items()
        ]
        await self._fill(wanted, lambda done, vector: self._place(missing[done.key], vector))

    def _place(self, item: Item, vector: Vector | None) -> None:
        """Put ``item`` in the index: its terms when its text changed, its views when they
        changed (their vectors are in ``_view_vectors`` by then)."""
        key = item.entry.key
        new = self._index.get(key) is None
        changed = new or self._indexed.get(key) != item.index_text
        row_terms = terms(item.index_text) if changed else None
        digests = tuple(text_hash(view) for view in item.views)
        views = None
        if new or self._view_hashes.get(key, ()) != digests:
            known = [self._view_vectors[d] for d in digests if d in self._view_vectors]
            views = np.stack(known) if known else np.zeros((0, self._embedder.dim), np.float32)
        self._index.put(item.entry, vector, row_terms, views)
        self._indexed[key] = item.index_text
        self._view_hashes[key] = digests

    async def _embed_views(self, items: Sequence[Item]) -> None:
        """Have the vector of every view of ``items`` in ``_view_vectors``: one already held,
        stored (``text:<hash>``) or embedded now (each distinct text once)."""
        stored, dim = self._stored or {}, self._embedder.dim
        missing: dict[str, Wanted] = {}
        for item in items:
            for view in item.views:
                digest = text_hash(view)
                if digest in self._view_vectors or digest in missing:
                    continue
                vector = decoded(stored.get(view_key(digest)), digest, dim)
                if vector is not None:
                    self._view_vectors[digest] = vector
                else:
                    missing[digest] = Wanted(view_key(digest), digest, view)
        views = self._view_vectors
        await self._fill(
            list(missing.values()), lambda done, vector: views.update({done.digest: vector})
        )

    async def _fill(self, wanted: Sequence[Wanted], place: Place) -> None:
        """Embed ``wanted`` on the background thread, storing each batch, using what another
        replica stored meanwhile (``pml.discovery.filling``)."""
        model, embedder = self.model_id, self._embedder
        await Filler(
            embed=functools.partial(embed_in_background, embedder.embed),
            stored=self._stored_of,
            save=self._save,
            dim=embedder.dim,
            batch=EMBED_BATCH,
            claim=lambda keys, wait: embed_claim(self._db, model, keys, wait=wait),
        ).fill(wanted, place)

    async def _stored_of(self, keys: list[str]) -> dict[str, tuple[str, bytes]]:
        async with self._step(write=False) as conn:
            return await SqlDiscoveryRepository(conn).vectors_of(self.model_id, keys)

    async def _save(self, keys: Sequence[tuple[str, str]], vectors: Vector) -> None:
        """Store vectors under ``(item key, text hash)``."""
        rows = [
            (key, digest, vector.astype("<f4").tobytes())
            for (key, digest), vector in zip(keys, vectors, strict=True)
        ]
        try:
            async with self._step(write=True) as conn:
                await SqlDiscoveryRepository(conn).save_vectors(self.model_id, rows, self._clock())
        except PmlError as error:  # the index has them; only a restart pays for this
            logger.warning("discovery vectors not stored: %s", error)

    @asynccontextmanager
    async def _step(self, *, write: bool) -> AsyncGenerator[AsyncConnection]:
        """One short database step, shielded: a shutdown that cancels the background load
        waits for the query in flight instead of abandoning its connection mid-statement
        (which would cost the connection: it is closed rather than returned to the pool)."""
        with anyio.CancelScope(shield=True):
            async with self._db.transaction() if write else self._db.read() as conn:
                yield conn

    def _forget(self, key: str) -> None:
        self._index.remove(key)
        self._indexed.pop(key, None)
        self._view_hashes.pop(key, None)

    def _tool_routing(self, hit: Hit) -> str:
        if hit.entry.kind != "tool":
            return ""
        server = hit.entry.key.split(":", 2)[1]
        return server_routing(server, self.routing.cloud, self.routing.local)
