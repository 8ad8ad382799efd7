"""Counting runs of a capability: totals and the recent-runs signal, in one UPDATE.

    await add_usage(conn, fqdn, runs=3, successes=2, latency_ms=9.0, at=now,
                    outcomes=(True, False, True))

Increments only, never a read-modify-write, so concurrent writers (batches of several
replicas) never lose a run. The recent runs (``pml.registry.reliability``) shift in as
bits: ``outcomes`` oldest first; without them the failures are taken as the older runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pml.registry.reliability import LATENCY_WEIGHT, MASK, WINDOW, outcome_bits
from pml.storage.tables import capability_records as records


async def add_usage(
    conn: AsyncConnection,
    fqdn: str,
    *,
    runs: int,
    successes: int,
    latency_ms: float,
    at: datetime,
    outcomes: Sequence[bool] = (),
) -> None:
    """Count ``runs`` runs of ``fqdn`` (see module)."""
    r = records.c
    if not outcomes:
        outcomes = [False] * max(runs - successes, 0) + [True] * successes
    bits, count = outcome_bits(outcomes)
    mean = latency_ms / runs if runs > 0 else 0.0
    keep = (1 - LATENCY_WEIGHT) ** count
    await conn.execute(
        records.update()
        .where(r.fqdn == fqdn)
        .values(
            usage_count=r.usage_count + runs,
            success_count=r.success_count + successes,
            total_latency_ms=r.total_latency_ms + latency_ms,
            last_used_at=at,
            recent_outcomes=(r.recent_outcomes * (1 << count) + bits) % (MASK + 1),
            recent_runs=sa.case(
                (r.recent_runs + count > WINDOW, WINDOW), else_=r.recent_runs + count
            ),
            recent_latency_ms=sa.case(
                (r.recent_runs == 0, mean),
                else_=r.recent_latency_ms * keep + mean * (1 - keep),
            ),
        )
    )
