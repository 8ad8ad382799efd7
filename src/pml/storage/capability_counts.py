"""How many active capabilities each project holds, kept by the database itself.

    sa.select(active_in_project(org, project))   # one row read by its key, not a count

The capabilities-per-project quota is checked on every creation. Counting the project's
rows made that check cost a read of every active capability of the project (3.5 ms at
5 000 on PostgreSQL, and growing with the project up to the quota). ``capability_counts``
holds the count instead, one row per (org, project): triggers on ``capability_records``
(migration 0016, PostgreSQL and SQLite alike) add one when an active capability is written
and take one away when it is archived, moved or deleted, in the same transaction as the
change, whatever code path makes it. MCP server records and archived capabilities do not
count, as before.
"""

from __future__ import annotations

import sqlalchemy as sa

from pml.storage.tables import SCOPE_PART, metadata

capability_counts = sa.Table(
    "capability_counts",
    metadata,
    sa.Column("org", SCOPE_PART, primary_key=True),
    sa.Column("project", SCOPE_PART, primary_key=True),
    sa.Column("active", sa.Integer(), nullable=False, server_default="0"),
)


def active_in_project(org: object, project: object) -> sa.ScalarSelect[int]:
    """The project's active capabilities (0 when it has none)."""
    c = capability_counts.c
    held = sa.select(c.active).where(c.org == org, c.project == project).scalar_subquery()
    return sa.select(sa.func.coalesce(held, 0)).scalar_subquery()
