"""PostgreSQL's statistics of the capability table kept fresh while it grows fast.

    await table_grew(db)          # after each capability this process creates

PostgreSQL picks an index from its statistics of the table. A project's capabilities are
found through partial unique indexes that all begin with ``(org, project)``; while the
statistics still describe a nearly empty table (a new database, or one that was small a
minute ago), every index looks alike and the planner may check a name through the
``code_hash`` index, reading the whole project for each new capability: creation slows as
the project grows. Autovacuum fixes the statistics, but only at its next round (a minute by
default), and a burst of learning (an import, a team's first traces) fits in that minute.

So a process that created 200 capabilities since it started analyses the table once, then
again at 400, 800, 1 600… (doubling: the work stays a small share of the writes, and
autovacuum takes over as the table grows). ``ANALYZE`` reads a bounded sample; it runs
after the creation that crossed the mark, in that request, one at a time per database, and
never waits for the table: when another analysis holds it (autovacuum's, another
replica's) this one is skipped after ``LOCK_WAIT_MS``, and it gives up after
``STATEMENT_LIMIT_MS``. A failure is logged and changes nothing (a role that does not own
the table is told so by PostgreSQL and skipped). SQLite needs none of this: without
statistics its planner prefers the index that matches the most columns.
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass

import sqlalchemy as sa

from pml.errors import StorageError
from pml.storage.database import Database

logger = logging.getLogger(__name__)

FIRST_MARK = 200
LOCK_WAIT_MS = 200
STATEMENT_LIMIT_MS = 10_000
_LIMITS = sa.text(
    f"SELECT set_config('lock_timeout', '{LOCK_WAIT_MS}ms', true),"
    f" set_config('statement_timeout', '{STATEMENT_LIMIT_MS}ms', true)"
)
_ANALYZE = sa.text(
    "ANALYZE capability_records (org, project, display_name, tool_name, code_hash, archived_at)"
)


@dataclass(slots=True)
class _Growth:
    created: int = 0
    next_mark: int = FIRST_MARK
    running: bool = False


_GROWTH: weakref.WeakKeyDictionary[Database, _Growth] = weakref.WeakKeyDictionary()


async def table_grew(db: Database, rows: int = 1) -> bool:
    """Count ``rows`` new capabilities; analyse the table when a mark is crossed (see the
    module). ``True``: this call analysed it."""
    if db.dialect != "postgresql":
        return False
    growth = _GROWTH.get(db)
    if growth is None:
        growth = _GROWTH[db] = _Growth()
    growth.created += rows
    if growth.created < growth.next_mark or growth.running:
        return False
    growth.running = True
    growth.next_mark = 2 * growth.created
    try:
        async with db.transaction() as conn:  # the limits hold for this transaction only
            await conn.execute(_LIMITS)
            await conn.execute(_ANALYZE)
        return True
    except StorageError as error:  # the database's errors, as ``transaction`` gives them
        logger.warning("capability statistics not refreshed: %s", error.message)
        return False
    finally:
        growth.running = False
