"""Small facts a deployment remembers between starts (``deployment_state``).

await remember(db, "routing_rules", fingerprint)
if await recalled(db, "routing_rules") == fingerprint: ...
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from pml.storage.database import Database
from pml.storage.tables import deployment_state as state
from pml.storage.types import utc_now


async def recalled(db: Database, key: str) -> str | None:
    """The value last remembered under ``key``, if any."""
    row = await db.first(sa.select(state.c.value).where(state.c.key == key), {})
    return None if row is None else str(row[0])


async def remember(db: Database, key: str, value: str) -> None:
    """Remember ``value`` under ``key`` (replacing what was there)."""
    try:
        async with db.transaction() as conn:
            await conn.execute(state.delete().where(state.c.key == key))
            await conn.execute(state.insert().values(key=key, value=value, updated_at=utc_now()))
    except IntegrityError:
        pass  # another process remembered it at the same moment: one of the two stays
