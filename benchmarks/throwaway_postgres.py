"""A throwaway PostgreSQL database for a benchmark run (created, then dropped).

    async with throwaway_database() as url:     # postgresql://.../pml_bench_1a2b3c4d
        ...

The server is ``$PML_TEST_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``),
as for the test suite.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager

import asyncpg  # pyright: ignore[reportMissingTypeStubs]
import sqlalchemy as sa

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


@asynccontextmanager
async def throwaway_database() -> AsyncGenerator[str]:
    """The URL of a new, empty database; dropped (connections forced out) at the end."""
    admin = sa.make_url(os.environ.get("PML_TEST_POSTGRES_URL", DEFAULT_URL))
    name = f"pml_bench_{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(
        host=admin.host, port=admin.port or 5432, user=admin.username, database=admin.database
    )  # pyright: ignore[reportUnknownMemberType]
    await conn.execute(f'CREATE DATABASE "{name}"')  # pyright: ignore[reportUnknownMemberType]
    try:
        yield admin.set(drivername="postgresql", database=name).render_as_string(
            hide_password=False
        )
    finally:
        await conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')  # pyright: ignore[reportUnknownMemberType]
        await conn.close()  # pyright: ignore[reportUnknownMemberType]
