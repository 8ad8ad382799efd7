"""Which replica embeds a batch of texts: a PostgreSQL advisory lock per batch.

    async with embed_claim(db, model_id, keys, wait=False) as mine:
        if mine:
            ...  # embed the batch and store its vectors before leaving
        # else another replica is embedding these very keys right now

Replicas of one database that start together would each embed the same texts. A batch
(the same keys in every replica: ``pml.discovery.filling`` sorts them) is embedded by the
replica holding its lock: a transaction-level advisory lock on a hash of the model and the
keys, held from the claim until the batch's vectors are stored, released when the
transaction ends — and so when its session ends, if the replica dies. ``wait=True`` waits
for the holder (at most ``WAIT_S``), after which the batch is read back from the store.

Only PostgreSQL has these locks; on SQLite (one machine, usually one process) every claim is
this process's. A claim that cannot be taken or ended (a database error, a wait past
``WAIT_S``) never stops the embedding: it counts as this process's, and the worst that can
happen is the work done twice, as without claims.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import AsyncGenerator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Final

import anyio
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from pml.errors import PmlError
from pml.storage.database import Database

logger = logging.getLogger(__name__)

WAIT_S: Final = 10  # a batch takes well under a second to embed and store


def claim_key(model: str, keys: Sequence[str]) -> int:
    """The advisory lock's 64-bit key for a batch (the same in every replica)."""
    text = json.dumps([model, *keys])  # unambiguous, and ASCII whatever the keys hold
    digest = hashlib.sha256(text.encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


@asynccontextmanager
async def embed_claim(
    db: Database, model: str, keys: Sequence[str], *, wait: bool
) -> AsyncGenerator[bool]:
    """Whether this process embeds ``keys`` now (see module)."""
    if db.dialect != "postgresql":
        yield True
        return
    async with AsyncExitStack() as stack:
        mine = await _claim(stack, db, claim_key(model, keys), wait=wait)
        try:
            yield mine
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await stack.aclose()  # ends the transaction: the lock is released
                except PmlError as error:  # it only held the lock: nothing is lost
                    logger.debug("claim not ended cleanly: %s", error)


async def _claim(stack: AsyncExitStack, db: Database, lock: int, *, wait: bool) -> bool:
    """Take the lock in a transaction that ``stack`` ends; True when it cannot be taken."""
    try:
        conn = await stack.enter_async_context(db.transaction())
        if not wait:
            return bool(await conn.scalar(sa.select(sa.func.pg_try_advisory_xact_lock(lock))))
        await conn.execute(sa.text(f"SET LOCAL lock_timeout = '{WAIT_S}s'"))
        await conn.execute(sa.select(sa.func.pg_advisory_xact_lock(lock)))
    except (PmlError, DBAPIError) as error:  # a database error, a wait past WAIT_S
        logger.debug("no claim (%s): the batch is embedded here", error)
    return True
