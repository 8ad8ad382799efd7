"""The database layer: URLs, opening, SQLite pragmas, point reads, and storage errors."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa
from sqlalchemy import event
from typer.testing import CliRunner

from pml.cli.app import app
from pml.errors import ConfigError, StorageError
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry, RenameChanges
from pml.storage.database import Database, async_url, describe_url, head_revision
from pml.storage.tables import capability_aliases, capability_records, capability_versions

pytestmark = pytest.mark.anyio

UNREACHABLE = "postgresql://postgres@127.0.0.1:1/x"  # port 1: refused at once


@pytest.mark.parametrize(
    ("url", "driver"),
    [
        ("sqlite:///x.db", "sqlite+aiosqlite"),
        ("postgresql://u@h/db", "postgresql+asyncpg"),
        ("postgres://u@h/db", "postgresql+asyncpg"),
    ],
)
def test_async_url_picks_the_async_driver(url: str, driver: str) -> None:
    target = async_url(url)

    assert target.drivername == driver
    assert target.database == sa.make_url(url).database


@pytest.mark.parametrize(
    ("url", "mentions"),
    [("mysql://u@h/db", "'mysql'"), ("not a url", "'not a url'"), ("", "''")],
)
def test_async_url_refuses_other_urls_with_a_one_line_config_error(url: str, mentions: str) -> None:
    with pytest.raises(ConfigError) as caught:
        async_url(url)

    message = caught.value.message
    assert caught.value.code == "CONFIG_ERROR"
    assert "database_url" in message
    assert mentions in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:secret@h/db", "postgresql://u:***@h/db"),
        ("postgres://u:secret@h:5433/db", "postgres://u:***@h:5433/db"),
        ("sqlite:///tmp/pml.db", "sqlite:///tmp/pml.db"),
    ],
)
def test_describe_url_hides_the_password(url: str, shown: str) -> None:
    described = describe_url(url)

    assert described == shown
    assert "secret" not in described


def test_describe_url_hides_a_password_given_as_a_query_parameter() -> None:
    # The asyncpg dialect passes URL query parameters to asyncpg.connect, so this one
    # authenticates exactly like the userinfo password does.
    assert "secret" not in describe_url("postgresql://u@h/db?password=secret")


async def test_open_creates_the_missing_folder_of_an_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "nested" / "pml.db"

    db = await Database.open(f"sqlite:///{path}")
    try:
        assert await db.current_revision() == head_revision()
    finally:
        await db.close()
    assert path.is_file()


async def test_an_unreachable_postgres_server_is_a_storage_error() -> None:
    with anyio.fail_after(20), pytest.raises(StorageError) as caught:
        await Database.open(UNREACHABLE)

    assert caught.value.code == "STORAGE_ERROR"
    assert "\n" not in caught.value.message


async def test_every_access_path_turns_an_unreachable_server_into_a_storage_error() -> None:
    db = await Database.open(UNREACHABLE, migrate=False)
    try:
        with anyio.fail_after(20):
            with pytest.raises(StorageError):
                async with db.read() as conn:
                    await conn.execute(sa.text("SELECT 1"))
            with pytest.raises(StorageError):
                async with db.transaction() as conn:
                    await conn.execute(sa.text("SELECT 1"))
            with pytest.raises(StorageError):
                await db.first(sa.select(sa.literal(1)), {})
    finally:
        await db.close()


def test_cli_reports_an_unreachable_database_in_one_line_without_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in [key for key in os.environ if key.startswith("PML_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)

    result = CliRunner().invoke(app, ["cap", "list"], env={"PML_DATABASE_URL": UNREACHABLE})

    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: STORAGE_ERROR: ")
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stdout == ""


async def test_sqlite_connections_have_foreign_keys_wal_and_case_sensitive_like(
    sqlite_url: str,
) -> None:
    db = await Database.open(sqlite_url)
    try:
        # Two connections at once: the second is a fresh one, not the migration's.
        async with db.read() as first, db.read() as second:
            for conn in (first, second):
                assert (await conn.exec_driver_sql("PRAGMA foreign_keys")).scalar_one() == 1
                assert (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar_one() == "wal"
                like = sa.select(sa.literal("abc").like("ABC"))
                assert not (await conn.execute(like)).scalar_one()
        # The inline engine behind Database.first gets the same pragmas.
        assert await db.first(sa.text("PRAGMA foreign_keys"), {}) == (1,)
        like_row = await db.first(sa.text("SELECT 'abc' LIKE 'ABC'"), {})
        assert like_row is not None
        assert not like_row[0]
    finally:
        await db.close()


async def test_deleting_a_record_cascades_to_its_versions_and_aliases(
    db: Database, scope: Scope
) -> None:
    registry = CapabilityRegistry(db)
    draft = CapabilityDraft(code="return 1", name="calc")
    fqdn = (await registry.capture(scope, draft, latency_ms=1)).record.fqdn
    await registry.update_code(scope, "calc", CapabilityDraft(code="return 2"))
    await registry.rename(scope, "calc", RenameChanges(new_name="calculator"))
    versions = sa.select(sa.func.count()).where(capability_versions.c.capability_fqdn == fqdn)
    aliases = sa.select(sa.func.count()).where(capability_aliases.c.target_fqdn == fqdn)
    async with db.read() as conn:
        before = (
            (await conn.execute(versions)).scalar_one(),
            (await conn.execute(aliases)).scalar_one(),
        )
    assert before == (2, 1)

    async with db.transaction() as conn:
        await conn.execute(capability_records.delete().where(capability_records.c.fqdn == fqdn))

    async with db.read() as conn:
        after = (
            (await conn.execute(versions)).scalar_one(),
            (await conn.execute(aliases)).scalar_one(),
        )
    assert after == (0, 0)


async def test_first_returns_the_same_row_as_a_normal_read(db: Database, scope: Scope) -> None:
    registry = CapabilityRegistry(db)
    draft = CapabilityDraft(
        code="return args['x']", name="echo", tags=["demo"], intent="echo a value"
    )
    fqdn = (await registry.capture(scope, draft, latency_ms=2.5)).record.fqdn
    query = sa.select(capability_records).where(capability_records.c.fqdn == sa.bindparam("fqdn"))

    point = await db.first(query, {"fqdn": fqdn})
    async with db.read() as conn:
        normal = (await conn.execute(query, {"fqdn": fqdn})).first()

    assert point is not None
    assert normal is not None
    assert point._asdict() == normal._asdict()
    assert (point.fqdn, point.tags, point.intent) == (fqdn, ["demo"], "echo a value")


async def test_first_returns_none_when_nothing_matches(db: Database) -> None:
    query = sa.select(capability_records).where(capability_records.c.fqdn == sa.bindparam("fqdn"))

    assert await db.first(query, {"fqdn": "acme.webapp.fs.nothing.0000"}) is None


@pytest.mark.postgres
async def test_notify_all_sends_every_payload_in_order_in_one_statement(postgres_url: str) -> None:
    from pml.storage.listen import listen_forever

    db = await Database.open(postgres_url)
    heard: list[str] = []
    payloads = ["first", "", "ünïcødé ✓ 🔔", "'; DROP TABLE capability_records; --", "x" * 7000]
    statements: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        statements.append(statement)

    all_heard = anyio.Event()

    async def on_payload(payload: str) -> None:
        heard.append(payload)
        if len(heard) == len(payloads):
            all_heard.set()

    async def on_reconnect() -> None:
        return None

    try:
        async with anyio.create_task_group() as tasks:
            ready = anyio.Event()
            tasks.start_soon(
                lambda: listen_forever(
                    db.listen_dsn(), "pml_test_many", on_payload, on_reconnect, ready=ready
                )
            )
            with anyio.fail_after(10):
                await ready.wait()
                event.listen(db.engine.sync_engine, "before_cursor_execute", count)
                await db.notify_all("pml_test_many", payloads)
                await db.notify_all("pml_test_many", [])  # nothing to send: no statement
                event.remove(db.engine.sync_engine, "before_cursor_execute", count)
                await all_heard.wait()
            tasks.cancel_scope.cancel()
        assert heard == payloads
        assert len([s for s in statements if "pg_notify" in s]) == 1
        with pytest.raises(StorageError):  # PostgreSQL's own limit: 8 000 bytes a payload
            await db.notify_all("pml_test_many", ["y" * 9000])
    finally:
        await db.close()


async def test_notify_all_does_nothing_on_sqlite(sqlite_url: str) -> None:
    db = await Database.open(sqlite_url)
    try:
        await db.notify_all("channel", ["a", "b"])  # no other server process to tell
        await db.notify("channel", "c")
    finally:
        await db.close()


async def test_postgres_keeps_every_connection_it_opens_and_opens_at_most_30(
    postgres_url: str,
) -> None:
    db = await Database.open(postgres_url)
    opened: list[object] = []

    def count(*_: object) -> None:
        opened.append(object())

    event.listen(db.engine.sync_engine.pool, "connect", count)
    try:

        async def busy() -> None:
            async with db.read() as conn:
                await conn.execute(sa.text("SELECT pg_sleep(0.05)"))

        for _ in range(3):  # bursts beyond the pool: later bursts open nothing new
            async with anyio.create_task_group() as group:
                for _ in range(40):
                    group.start_soon(busy)
        assert len(opened) <= 30
        first_bursts = len(opened)
        async with anyio.create_task_group() as group:
            for _ in range(25):
                group.start_soon(busy)
        assert len(opened) == first_bursts
    finally:
        event.remove(db.engine.sync_engine.pool, "connect", count)
        await db.close()
