"""Forgetting the view vectors no item uses any more, in memory and in ``discovery_vectors``.

    live = live_views(view_hashes.values())               # the text hashes rows use now
    held = {digest: v for digest, v in held.items() if digest in live}
    removed = await prune_stored_views(step, live, now)   # rows deleted

A view's vector is stored once per distinct text, under ``text:<hash>`` (``view_key``).
When texts change — a capability's remembered intents are trimmed to the newest ones, a
description is edited, a capability is archived or purged, an upstream tool disappears —
nothing points at the old rows any more. At each full sync (the first load, the
reconciliation every ``RECONCILE_INTERVAL_S``, a forced refresh), once every current item
is in the index, the service drops the vectors no row uses from memory and deletes their
stored rows: one query that reads the ``text:`` keys (an index range on SQLite; 50 000
keys in about 40 ms), then one ``DELETE`` per ``SAVE_BATCH`` stale keys (one statement in
practice, none when nothing is stale). No statement carries the live set, so SQLite's
bound-parameter limit never matters however many views there are, and the same SQL runs
on SQLite and PostgreSQL.

The rules:

- *Current* is what this process indexes: its upstream pool's tools and every capability
  in the database (every scope; archived ones are not current). A text one of them shows
  is never deleted, whatever else holds.
- *Every embedder.* A ``text:`` row no current item uses is deleted whatever model made it
  (no model needs a text nobody shows); a row for a text still used stays whatever its
  model — the embedder that needs it replaces it (``save_vectors``: one row per key).
- *A grace period.* The ``DELETE`` spares rows stored less than ``PRUNE_GRACE`` before
  the sync: a row another replica or process saved meanwhile, for a text this one has not
  read yet, stays (clocks a few minutes apart are fine).
- *What it costs when wrong.* A server that is down or still starting at a full sync has
  its tools' views deleted, and a replica whose pool lists other servers deletes theirs:
  the cost is embedding those texts again — which a running process does anyway for tools
  that arrive after its first load, and another process at its next start. Likewise a
  text that becomes used again elsewhere between this process's read and its delete
  loses its row; the process using it keeps the vector in memory.
- Item rows (``tool:``, ``capability:``) are replaced in place when their text changes —
  one per item, not one per text — and are not pruned here (a purge deletes its
  capability's).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Set
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import Final, Protocol

from sqlalchemy.ext.asyncio import AsyncConnection

from pml.errors import PmlError
from pml.storage.discovery_repo import SqlDiscoveryRepository

logger = logging.getLogger(__name__)

VIEW_PREFIX: Final = "text:"
PRUNE_GRACE: Final = timedelta(minutes=10)


class Step(Protocol):
    """One short database step (the service's, shielded from cancellation)."""

    def __call__(self, *, write: bool) -> AbstractAsyncContextManager[AsyncConnection]: ...


def view_key(digest: str) -> str:
    """The ``discovery_vectors`` key of a view's vector (shared by every row with it)."""
    return f"{VIEW_PREFIX}{digest}"


def live_views(view_hashes: Iterable[Iterable[str]]) -> set[str]:
    """The text hashes of the views the index's rows use (each row's hashes given)."""
    return {digest for digests in view_hashes for digest in digests}


async def prune_stored_views(step: Step, live: Set[str], now: datetime) -> int:
    """Delete the stored view vectors whose text hash is not in ``live``, stored before
    ``now - PRUNE_GRACE``; how many rows went. A database error is logged, not raised:
    the rows wait for the next full sync."""
    before = now - PRUNE_GRACE
    try:
        async with step(write=False) as conn:
            keys = await SqlDiscoveryRepository(conn).keys(VIEW_PREFIX)
        stale = [key for key in keys if key.removeprefix(VIEW_PREFIX) not in live]
        if not stale:
            return 0
        async with step(write=True) as conn:
            removed = await SqlDiscoveryRepository(conn).delete_vectors(stale, before=before)
    except PmlError as error:
        logger.warning("unused discovery vectors not deleted: %s", error)
        return 0
    logger.info("discovery: %d stored vectors of texts no item shows any more deleted", removed)
    return removed
