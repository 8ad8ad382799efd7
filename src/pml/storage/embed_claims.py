"""Which replica embeds a batch of texts: a lock per batch, held while it is embedded.

    async with embed_claim(db, model_id, keys, wait=False) as mine:
        if mine:
            ...  # embed the batch and store its vectors before leaving
        # else another process is embedding these very keys right now

Processes of one database that start together (replicas on PostgreSQL, the local gateways
of one user on their SQLite file) would each embed the same texts. A batch (the same keys in
every process: ``pml.discovery.filling`` sorts them) is embedded by the process holding its
lock, from the claim until the batch's vectors are stored:

- on PostgreSQL, a transaction-level advisory lock on a hash of the model and the keys,
  released when the transaction ends — and so when the session ends, if the replica dies;
- on a SQLite file, a POSIX record lock on one byte (at that hash) of the file
  ``<database>-embed-claims`` beside it, released when the process closes it or dies (such
  locks are per process: two claims of one process never exclude each other).

``wait=True`` waits for the holder (at most ``WAIT_S``), after which the batch is read back
from the store. A claim that cannot be taken or ended (a database or file error, a wait past
``WAIT_S``, an in-memory database) never stops the embedding: it counts as this process's,
and the worst that can happen is the work done twice, as without claims.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import os
import time
from collections.abc import AsyncGenerator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Final

import anyio
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from pml.errors import PmlError
from pml.storage.database import Database

logger = logging.getLogger(__name__)

WAIT_S: Final = 10  # a batch takes well under a second to embed and store
_POLL_S: Final = 0.05  # a file lock is waited for by polling (a blocking one would block the loop)
_OFFSETS: Final = 2**62 - 1  # the byte locked: a non-negative file offset


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
        async with _file_claim(_claims_file(db), claim_key(model, keys), wait=wait) as mine:
            yield mine
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


def _claims_file(db: Database) -> Path | None:
    """The lock file beside a SQLite database file (None in memory)."""
    name = db.engine.url.database
    if not name or name == ":memory:" or name.startswith("file:"):
        return None
    path = Path(name)
    return path.with_name(f"{path.name}-embed-claims")


@asynccontextmanager
async def _file_claim(path: Path | None, lock: int, *, wait: bool) -> AsyncGenerator[bool]:
    """One byte of ``path`` locked for this process (see module)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600) if path is not None else None
    except OSError as error:  # a read-only folder: no claims, the work is done here
        logger.debug("no claims file %s: %s", path, error)
        fd = None
    if fd is None:
        yield True
        return
    try:
        yield await _locked(fd, lock & _OFFSETS, wait=wait)
    finally:
        os.close(fd)  # releases the lock


async def _locked(fd: int, offset: int, *, wait: bool) -> bool:
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, offset)
            return True
        except OSError as error:
            if error.errno not in (errno.EACCES, errno.EAGAIN):
                logger.debug("claim not taken: %s", error)
                return True
        if not wait:
            return False
        if time.monotonic() >= deadline:
            return True
        await anyio.sleep(_POLL_S)
