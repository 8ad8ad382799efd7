"""One async database for both backends: an embedded SQLite file or a shared PostgreSQL.

    db = await Database.open("sqlite:///tmp/pml.db")      # migrations applied on open
    async with db.transaction() as conn:                   # one atomic unit of work
        await conn.execute(...)
    async with db.read() as conn:                          # a read-only round trip
        ...
    await db.close()

URLs are given the way users write them (``sqlite:///path``, ``postgresql://...``); the
async driver is chosen here. SQLite connections get foreign keys, WAL, a busy timeout and
case-sensitive ``LIKE`` so both backends match the same rows.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import AsyncGenerator, Sequence
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from pml.errors import ConfigError, StorageError
from pml.storage import sqlite_driver
from pml.storage.point_reads import PostgresPointReads
from pml.storage.types import stored_json

if TYPE_CHECKING:
    from alembic.config import Config

logger = logging.getLogger(__name__)

# Serialises concurrent migrations of replicas sharing one PostgreSQL database.
MIGRATION_LOCK_KEY = 0x504D4C  # "PML"
# The newest migration shipped (tests check it is alembic's head): a database already there
# opens without loading alembic and its scripts, which would cost a start ~0.2 s.
SHIPPED_HEAD = "0016"


def async_url(url: str) -> sa.URL:
    """The SQLAlchemy URL with the async driver for a user-written database URL."""
    try:
        parsed = make_url(url)
    except ArgumentError as error:
        raise ConfigError(f"Invalid database_url: {url!r}") from error
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return parsed.set(drivername="sqlite+aiosqlite")
    if backend in {"postgresql", "postgres"}:
        return parsed.set(drivername="postgresql+asyncpg")
    raise ConfigError(
        f"Unsupported database_url scheme {parsed.drivername!r}: use sqlite:/// or postgresql://"
    )


SECRET_QUERY_KEYS = re.compile(r"pass|secret|token|key", re.IGNORECASE)


def describe_url(url: str) -> str:
    """The database URL with every password hidden (user info and query), for output and logs."""
    parsed = async_url(url).set(drivername=make_url(url).drivername)
    query = {
        key: ("***" if SECRET_QUERY_KEYS.search(key) else value)
        for key, value in parsed.query.items()
    }
    return parsed.set(query=query).render_as_string(hide_password=True)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    for pragma in (
        "PRAGMA foreign_keys = ON",
        "PRAGMA journal_mode = WAL",
        "PRAGMA synchronous = NORMAL",
        "PRAGMA busy_timeout = 30000",
        "PRAGMA case_sensitive_like = ON",
    ):
        cursor.execute(pragma)
    cursor.close()


WRITE_OPTION = "pml_write"


def _sqlite_explicit_transactions(dbapi_connection: Any, _record: Any) -> None:
    # The driver's implicit BEGIN is deferred; PML issues its own (see _sqlite_begin).
    dbapi_connection.isolation_level = None


def _sqlite_begin(conn: sa.Connection) -> None:
    # Write transactions take SQLite's write lock up front (BEGIN IMMEDIATE): a writer that
    # read first and then upgraded could fail at once with "database is locked", and two
    # writers could both decide from a stale read. busy_timeout queues them instead.
    immediate = conn.get_execution_options().get(WRITE_OPTION, False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def create_engine(url: str) -> AsyncEngine:
    """An async engine for a user-written database URL (the SQLite folder is created)."""
    target = async_url(url)
    if target.get_backend_name() == "sqlite":
        database = target.database or ""
        if database not in {"", ":memory:"} and not database.startswith("file:"):
            create_private_file(Path(database).expanduser())
        engine = create_async_engine(
            target, connect_args={"timeout": 30}, json_deserializer=stored_json
        )
        sqlite_driver.attach(engine)  # a query cancelled mid-way never hangs its connection
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        event.listen(engine.sync_engine, "connect", _sqlite_explicit_transactions)
        event.listen(engine.sync_engine, "begin", _sqlite_begin)
        return engine
    # No pre-ping: it costs a round trip per checkout; a dropped connection is invalidated on
    # its first error and the pool reconnects, and recycling bounds a connection's age. Up to
    # 30 connections, all kept once opened: overflow connections were closed as soon as they
    # were returned (50 busy sessions reopened one every ~50 checkouts, each a new login and
    # every statement prepared again); past 30 a checkout waits for one (``pool_timeout``).
    return create_async_engine(
        target,
        pool_size=30,
        max_overflow=0,
        pool_recycle=1800,
        json_deserializer=stored_json,
    )


def create_private_file(path: Path) -> None:
    """Create the SQLite file ``path`` readable by its owner only (0600), and the folders
    PML creates for it 0700: the database holds audit details, grants and API key hashes.
    SQLite gives its ``-wal`` and ``-shm`` files the database file's mode. An existing file
    or folder keeps the mode its owner gave it."""
    try:
        missing = [folder for folder in [path.parent, *path.parent.parents] if not folder.exists()]
        for folder in reversed(missing):
            with contextlib.suppress(FileExistsError):  # another process made it meanwhile
                folder.mkdir(mode=0o700)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    except OSError as error:
        raise StorageError(f"cannot create {path}: {error.strerror or error}") from None
    os.close(descriptor)


def _alembic_config(connection: sa.Connection | None) -> Config:
    from alembic.config import Config  # alembic loads only when a migration may run

    config = Config()
    config.set_main_option(
        "script_location", str(resources.files("pml.storage").joinpath("migrations"))
    )
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest migration revision shipped with this version of PML."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(_alembic_config(None))
    head = script.get_current_head()
    assert head is not None
    return head


def _upgrade(connection: sa.Connection, revision: str) -> None:
    from alembic import command

    if connection.dialect.name == "postgresql":
        connection.execute(
            sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY}
        )
    command.upgrade(_alembic_config(connection), revision)


def _current_revision(connection: sa.Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(connection).get_current_revision()


def _stored_revision(connection: sa.Connection) -> str | None:
    """The revision in ``alembic_version`` read with plain SQL (None: no such table yet)."""
    if not sa.inspect(connection).has_table("alembic_version"):
        return None
    rows = connection.execute(sa.text("SELECT version_num FROM alembic_version")).all()
    return str(rows[0][0]) if len(rows) == 1 else None


def _inline_engine(engine: AsyncEngine) -> sa.Engine | None:
    """A synchronous engine on the same SQLite file for inline point lookups (None otherwise)."""
    url = engine.url
    if url.get_backend_name() != "sqlite" or (url.database or ":memory:") == ":memory:":
        return None
    inline = sa.create_engine(
        url.set(drivername="sqlite+pysqlite"),
        poolclass=sa.pool.QueuePool,
        json_deserializer=stored_json,
    )
    event.listen(inline, "connect", _sqlite_pragmas)
    return inline


class Database:
    """An async engine plus the ways code uses it: transactions, reads and point lookups."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._inline = _inline_engine(engine)
        # Point reads need no transaction: autocommit saves the BEGIN/ROLLBACK round trips.
        self._point_reads = engine.execution_options(isolation_level="AUTOCOMMIT")
        self._driver_reads = (
            PostgresPointReads(engine) if engine.dialect.name == "postgresql" else None
        )

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self.engine.dialect.name

    @classmethod
    async def open(cls, url: str, *, migrate: bool = True) -> Database:
        """Connect, and apply pending migrations unless ``migrate`` is false."""
        database = cls(create_engine(url))
        if migrate:
            try:
                await database.upgrade()
            except BaseException:
                await database.close()
                raise
        return database

    async def upgrade(self, revision: str = "head") -> None:
        """Apply migrations up to ``revision`` (concurrent replicas wait for each other)."""
        try:
            if revision == "head":
                async with self.engine.connect() as conn:
                    if await conn.run_sync(_stored_revision) == SHIPPED_HEAD:
                        return  # already there: no lock, no alembic
            async with self.engine.begin() as conn:
                await conn.run_sync(_upgrade, revision)
        except (OSError, SQLAlchemyError) as error:
            raise StorageError(f"Database migration failed: {_reason(error)}") from error

    async def current_revision(self) -> str | None:
        """The migration revision the database is at (None when blank)."""
        async with self.read() as conn:
            return await conn.run_sync(_current_revision)

    @asynccontextmanager
    async def transaction(self) -> AsyncGenerator[AsyncConnection]:
        """A connection in a transaction, committed on success and rolled back on error."""
        try:
            async with self.engine.connect() as conn:
                await conn.execution_options(**{WRITE_OPTION: True})
                async with conn.begin():
                    yield conn
        except IntegrityError:
            raise  # a constraint the caller's rules translate (e.g. a name race → NAME_TAKEN)
        except (OSError, DBAPIError) as error:
            raise StorageError(f"Database error: {_reason(error)}") from error

    @asynccontextmanager
    async def read(self) -> AsyncGenerator[AsyncConnection]:
        """A connection for reads; nothing it does is committed."""
        try:
            async with self.engine.connect() as conn:
                yield conn
        except (OSError, DBAPIError) as error:
            raise StorageError(f"Database error: {_reason(error)}") from error

    async def first(self, statement: sa.Executable, params: dict[str, Any]) -> sa.Row[Any] | None:
        """The first row of a read-only, indexed point query (the name-resolution hot path).

        On SQLite the query runs inline on the event loop: it takes tens of microseconds,
        while the async driver would hand it to its thread about six times. WAL readers never
        wait for writers, so this does not stall the loop. On PostgreSQL it runs in
        autocommit mode: one round trip instead of three, straight through the driver when
        it can (``point_reads``).
        """
        if self._driver_reads is not None and self._driver_reads.accepts(statement):
            done, row = await self._driver_reads.read(statement, params)
            if done:
                return row
        if self._inline is None:
            try:
                async with self._point_reads.connect() as conn:
                    return (await conn.execute(statement, params)).first()
            except (OSError, DBAPIError) as error:
                raise StorageError(f"Database error: {_reason(error)}") from error
        try:
            with self._inline.connect() as conn:
                return conn.execute(statement, params).first()
        except DBAPIError as error:
            raise StorageError(f"Database error: {_reason(error)}") from error

    async def notify(self, channel: str, payload: str) -> None:
        """``NOTIFY channel, payload`` on PostgreSQL (every listening process hears it).

        Nothing on SQLite: an embedded database has no other server processes to tell.
        """
        await self.notify_all(channel, [payload])

    async def notify_all(self, channel: str, payloads: Sequence[str]) -> None:
        """``notify`` of each payload in order, in one statement (one round trip)."""
        if self.dialect != "postgresql" or not payloads:
            return
        statement = sa.text(  # unnest's rows come in order: so do the notifications
            "SELECT pg_notify(:channel, payload) FROM unnest(:payloads) AS payload"
        ).bindparams(sa.bindparam("payloads", type_=postgresql.ARRAY(sa.Text)))
        try:
            async with self._point_reads.connect() as conn:
                await conn.execute(statement, {"channel": channel, "payloads": list(payloads)})
        except (OSError, DBAPIError) as error:
            raise StorageError(f"Database error: {_reason(error)}") from error

    def listen_dsn(self) -> str:
        """A plain ``postgresql://`` DSN for a dedicated listening connection (asyncpg)."""
        return self.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)

    async def close(self) -> None:
        """Close every pooled connection."""
        if self._driver_reads is not None:
            await self._driver_reads.close()
        await self.engine.dispose()
        if self._inline is not None:
            self._inline.dispose()


def _reason(error: BaseException) -> str:
    if isinstance(error, DBAPIError) and error.orig is not None:
        return " ".join(str(error.orig).split())
    return " ".join(str(error).split()) or type(error).__name__
