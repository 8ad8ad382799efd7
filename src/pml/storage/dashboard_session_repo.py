"""Dashboard sessions' upkeep that needs no part of the dashboard.

    removed = await purge_expired_dashboard_sessions(db)   # how many expired sessions went

The gateway purges expired dashboard sessions on a timer (``pml.gateway.policy_services``)
even when it serves stdio only; the dashboard's ``SessionStore`` does the same on demand.
Both call this, so a gateway never loads the dashboard's pages (and jinja2) for it.
"""

from __future__ import annotations

import sqlalchemy as sa

from pml.storage.database import Database
from pml.storage.tables import dashboard_sessions
from pml.storage.types import utc_now


async def purge_expired_dashboard_sessions(db: Database) -> int:
    """Delete expired dashboard sessions; how many."""
    expired = dashboard_sessions.c.expires_at <= utc_now()
    async with db.transaction() as conn:
        result = await conn.execute(sa.delete(dashboard_sessions).where(expired))
    return int(result.rowcount or 0)
