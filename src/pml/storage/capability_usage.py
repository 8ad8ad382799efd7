"""Counting runs of a capability: totals and the recent-runs signal, in one UPDATE; and
which capabilities keep failing (``failing_in_project``, SQL over the same columns).

    await add_usage(conn, fqdn, RunCounts(runs=3, successes=2, latency_ms=9.0, at=now,
                                          outcomes=(True, False, True)))
    await add_code_usage(conn, "acme", "web", code_hash, RunCounts(runs=1, successes=0, ...))

Increments only, never a read-modify-write, so concurrent writers (batches of several
replicas) never lose a run: every SET expression reads the row as it was before this
statement, and PostgreSQL re-reads a row another transaction updated meanwhile. The recent
runs (``pml.registry.reliability``) shift in as bits: ``outcomes`` oldest first; without
them (None) the failures are taken as the older runs; an empty ``outcomes`` counts the runs
in the totals only (runs that say nothing about the capability, e.g. refused arguments).
``recent_latency_ms`` is the mean latency of the runs in ``outcomes`` (default: of all).

Values are made safe before they reach the database: counts are clamped to
``[0, MAX_RUNS]`` (successes to the runs), latencies to finite ``[0, MAX_LATENCY_MS]``
per run, so a hostile or broken caller cannot store a NaN, a negative count or an overflow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pml.registry.reliability import (
    FAILING_BELOW,
    LATENCY_WEIGHT,
    MASK,
    MAX_LATENCY_MS,
    MIN_RUNS,
    WINDOW,
    clean_latency,
    outcome_bits,
)
from pml.registry.scope import Scope
from pml.storage.capability_queries import ACTIVE
from pml.storage.tables import capability_records as records

MAX_RUNS: Final = 1_000_000_000  # runs one batch may count (far above any real batch)
FAILING_SHOWN: Final = 10  # failing capabilities ``pml status`` names


def _count(value: object) -> int:
    try:
        number = int(value)  # pyright: ignore[reportArgumentType]
    except (TypeError, ValueError, OverflowError):
        return 0
    return min(max(number, 0), MAX_RUNS)


@dataclass(frozen=True, slots=True)
class RunCounts:
    """Runs of one capability to count at once (see module for ``outcomes`` and
    ``recent_latency_ms``)."""

    runs: int
    successes: int
    latency_ms: float  # their total
    at: datetime  # the last one
    outcomes: Sequence[bool] | None = None
    recent_latency_ms: float | None = None


def usage_values(counts: RunCounts) -> dict[str, Any]:
    """The SET clause of a usage update (see module)."""
    r = records.c
    runs = _count(counts.runs)
    successes = min(_count(counts.successes), runs)
    total_ms = min(clean_latency(counts.latency_ms), MAX_LATENCY_MS * max(runs, 1))
    outcomes, recent_latency_ms = counts.outcomes, counts.recent_latency_ms
    if outcomes is None:
        outcomes = [False] * min(runs - successes, WINDOW) + [True] * min(successes, WINDOW)
        mean = total_ms / runs if runs else 0.0
    else:
        mean = clean_latency(recent_latency_ms if recent_latency_ms is not None else 0.0)
    bits, count = outcome_bits([bool(success) for success in outcomes])
    values: dict[str, Any] = {
        "usage_count": r.usage_count + runs,
        "success_count": r.success_count + successes,
        "total_latency_ms": r.total_latency_ms + total_ms,
        "last_used_at": counts.at,
    }
    if count:
        keep = (1 - LATENCY_WEIGHT) ** count
        values |= {
            "recent_outcomes": (r.recent_outcomes * (1 << count) + bits) % (MASK + 1),
            "recent_runs": sa.case(
                (r.recent_runs + count > WINDOW, WINDOW), else_=r.recent_runs + count
            ),
            "recent_latency_ms": sa.case(
                (r.recent_runs == 0, mean),
                else_=r.recent_latency_ms * keep + mean * (1 - keep),
            ),
        }
    return values


async def add_usage(conn: AsyncConnection, fqdn: str, counts: RunCounts) -> None:
    """Count runs of ``fqdn`` (see module)."""
    values = usage_values(counts)
    await conn.execute(records.update().where(records.c.fqdn == fqdn).values(values))


async def add_code_usage(
    conn: AsyncConnection, org: str, project: str, code_hash: str, counts: RunCounts
) -> None:
    """Count runs of the active capability of ``org``/``project`` whose current code has
    ``code_hash`` (a snippet run in direct mode; none: nothing is counted). No read: the
    unique index on the active code hashes finds the row."""
    r = records.c
    values = usage_values(counts)
    await conn.execute(
        records.update()
        .where(ACTIVE, r.org == org, r.project == project, r.code_hash == code_hash)
        .values(values)
    )


def recent_successes() -> sa.ColumnElement[int]:
    """SQL: how many of the recent runs succeeded (the set bits below ``recent_runs``),
    portable to SQLite and PostgreSQL (integer division, no bit functions)."""
    r = records.c
    bits = [
        sa.case((r.recent_runs > bit, (r.recent_outcomes // (1 << bit)) % 2), else_=0)
        for bit in range(WINDOW)
    ]
    total: sa.ColumnElement[int] = bits[0]
    for bit in bits[1:]:
        total = total + bit
    return total


def failing_condition() -> sa.ColumnElement[bool]:
    """SQL: the capability keeps failing (``Reliability.failing``)."""
    r = records.c
    return sa.and_(r.recent_runs >= MIN_RUNS, recent_successes() < FAILING_BELOW * r.recent_runs)


async def failing_in_project(
    conn: AsyncConnection, scope: Scope, *, limit: int = FAILING_SHOWN
) -> tuple[int, list[str]]:
    """How many of the project's capabilities ``scope`` may see keep failing, and the display
    names of up to ``limit`` of them, the most recently used first (``pml status``). Only the
    caller's own org/project: never another tenant's, public or not."""
    r = records.c
    own = sa.and_(
        ACTIVE,
        r.org == scope.org,
        r.project == scope.project,
        r.record_type == "capability",
        sa.or_(r.visibility != "private", r.created_by == scope.user),
        failing_condition(),
    )
    total = sa.func.count().over().label("total")
    query = (
        sa.select(r.display_name, total)
        .where(own)
        .order_by(r.last_used_at.desc(), r.display_name)
        .limit(max(1, min(limit, 1000)))
    )
    rows = (await conn.execute(query)).all()
    return (int(rows[0].total) if rows else 0), [str(row.display_name) for row in rows]
