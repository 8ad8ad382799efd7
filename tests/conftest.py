"""Fixtures shared by the whole suite: one database per test, on SQLite and on PostgreSQL.

The PostgreSQL half needs a server (``PML_TEST_POSTGRES_URL``, default the local one). Under
``CI=true`` an unreachable server fails the run; elsewhere those tests skip and say why.
Each PostgreSQL test gets its own database, cloned from a template migrated once per run.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncGenerator
from pathlib import Path

import asyncpg  # pyright: ignore[reportMissingTypeStubs]
import pytest
import sqlalchemy as sa

from pml.registry.scope import Scope
from pml.registry.service import CapabilityRegistry
from pml.registry.tools import CapTools
from pml.storage.database import Database

POSTGRES_URL = os.environ.get(
    "PML_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


def _database_url(name: str) -> str:
    return sa.make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)


async def _admin(*statements: str) -> None:
    admin = sa.make_url(POSTGRES_URL)
    conn = await asyncpg.connect(  # pyright: ignore[reportUnknownMemberType]
        host=admin.host,
        port=admin.port or 5432,
        user=admin.username,
        password=admin.password,
        database=admin.database,
        timeout=5,
    )
    try:
        for statement in statements:
            await conn.execute(statement)  # pyright: ignore[reportUnknownMemberType]
    finally:
        await conn.close()  # pyright: ignore[reportUnknownMemberType]


@pytest.fixture(scope="session")
async def postgres_template() -> AsyncGenerator[str]:
    """A migrated template database; skipped (or failed under CI) without a server."""
    name = f"pml_template_{uuid.uuid4().hex[:10]}"
    try:
        await _admin(f'CREATE DATABASE "{name}"')
    except (OSError, asyncpg.PostgresError, TimeoutError) as error:  # pyright: ignore[reportUnknownMemberType]
        message = f"PostgreSQL not reachable at {POSTGRES_URL}: {error}"
        if IN_CI:
            pytest.fail(f"{message} (CI=true requires the PostgreSQL suite)")
        pytest.skip(f"{message}; set PML_TEST_POSTGRES_URL or run .ci/ensure-postgres")
    db = await Database.open(_database_url(name))
    await db.close()
    yield name
    await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
async def postgres_url(postgres_template: str) -> AsyncGenerator[str]:
    """A fresh, migrated PostgreSQL database for one test."""
    name = f"pml_test_{uuid.uuid4().hex[:12]}"
    await _admin(f'CREATE DATABASE "{name}" TEMPLATE "{postgres_template}"')
    yield _database_url(name)
    await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
async def blank_postgres_url(postgres_template: str) -> AsyncGenerator[str]:
    """An empty PostgreSQL database (no migrations applied)."""
    name = f"pml_blank_{uuid.uuid4().hex[:12]}"
    await _admin(f'CREATE DATABASE "{name}"')
    yield _database_url(name)
    await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A fresh SQLite file for one test."""
    return f"sqlite:///{tmp_path / 'pml.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest) -> str:
    """The same test on an SQLite file and on a PostgreSQL database."""
    fixture = "sqlite_url" if request.param == "sqlite" else "postgres_url"
    return request.getfixturevalue(fixture)


@pytest.fixture
async def db(database_url: str) -> AsyncGenerator[Database]:
    """An open, migrated database on each backend."""
    database = await Database.open(database_url)
    yield database
    await database.close()


@pytest.fixture
def registry(db: Database) -> CapabilityRegistry:
    return CapabilityRegistry(db)


@pytest.fixture
def tools(registry: CapabilityRegistry) -> CapTools:
    return CapTools(registry)


@pytest.fixture
def scope() -> Scope:
    return Scope("acme", "webapp", "erwan")
