"""``GET /ready``: may a load balancer send this replica traffic? (SPEC §11)

    ready, checks = await readiness(db, pool)   # (True, {"database": "ok", ...})

Three checks, each ``"ok"`` or what is wrong, never a name, a URL or a message from the
configuration (the route needs no key):

- ``database``: a read answers within ``DATABASE_TIMEOUT_S``;
- ``migrations``: the database is at the head revision this PML was built with;
- ``servers``: every enabled, non-lazy upstream server has been attempted (none is still
  ``starting``; a failed one was attempted; states are in ``/metrics`` and ``pml status``).

``/health`` says the process is alive; ``/ready`` whether it can serve.
"""

from __future__ import annotations

import logging
from typing import Final

import anyio
from sqlalchemy.exc import SQLAlchemyError

from pml.errors import PmlError
from pml.storage.database import Database, head_revision
from pml.upstream.base import UpstreamPool

logger = logging.getLogger(__name__)

DATABASE_TIMEOUT_S: Final = 2.0


async def readiness(db: Database, pool: UpstreamPool) -> tuple[bool, dict[str, str]]:
    """Whether this process is ready to serve, and each check's outcome."""
    checks = {"database": "ok", "migrations": "ok", "servers": "ok"}
    try:
        with anyio.fail_after(DATABASE_TIMEOUT_S):
            revision = await db.current_revision()
    except (TimeoutError, PmlError, SQLAlchemyError, OSError) as error:
        logger.warning("not ready: the database does not answer (%s)", type(error).__name__)
        checks["database"] = "unreachable"
        checks["migrations"] = "unknown"
    else:
        if revision != head_revision():
            checks["migrations"] = "behind"
    if any(status.state == "starting" for status in pool.status()):
        checks["servers"] = "starting"
    return all(value == "ok" for value in checks.values()), checks
