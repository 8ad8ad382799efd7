"""Migrations: a blank database reaches head, an older one keeps its data, schema == tables."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from pml.registry.models import ListQuery
from pml.registry.names import tool_name_for
from pml.registry.scope import Scope
from pml.registry.service import CapabilityRegistry
from pml.storage.capability_counts import capability_counts
from pml.storage.database import Database, head_revision
from pml.storage.intent_repo import capability_intents
from pml.storage.memory_repo import memories
from pml.storage.session_repo import McpSessionStore, SessionRecord, mcp_sessions
from pml.storage.tables import capability_records, metadata
from samples import early_record

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def blank_url(request: pytest.FixtureRequest) -> str:
    fixture = "sqlite_url" if request.param == "sqlite" else "blank_postgres_url"
    return request.getfixturevalue(fixture)


def _differences(conn: sa.Connection) -> list[object]:
    context = MigrationContext.configure(conn, opts={"compare_type": True})
    return list(compare_metadata(context, metadata))


async def test_a_blank_database_is_migrated_to_head_on_open(blank_url: str) -> None:
    db = await Database.open(blank_url)
    try:
        assert await db.current_revision() == head_revision() == "0016"
        async with db.read() as conn:
            differences = await conn.run_sync(_differences)
        assert differences == []
        # compared above with the migrated schema
        added = {memories.name, capability_intents.name, capability_counts.name}
        assert added <= set(metadata.tables)
    finally:
        await db.close()


async def test_upgrading_twice_changes_nothing(blank_url: str) -> None:
    db = await Database.open(blank_url)
    try:
        await db.upgrade()
        async with db.read() as conn:
            count = (
                await conn.execute(sa.select(sa.func.count()).select_from(capability_records))
            ).scalar_one()
        assert count == 3  # the seeded MCP servers, once
    finally:
        await db.close()


@pytest.mark.parametrize("previous", ["0002", "0003", "0004", "0005", "0006", "0007"])
async def test_upgrade_from_an_earlier_revision_keeps_existing_data(
    blank_url: str, previous: str
) -> None:
    db = await Database.open(blank_url, migrate=False)
    try:
        await db.upgrade(previous)
        now = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
        row = {
            "fqdn": "acme.webapp.fs.read_json.a7f3",
            "id": "00000000-0000-0000-0000-000000000001",
            "record_type": "capability",
            "org": "acme",
            "project": "webapp",
            "display_name": "fs:read_json",
            "named": True,
            "namespace": "fs",
            "action": "read_json",
            "tool_name": "mcp__fs__read_json",
            "hash": "a7f3",
            "code": "return 1",
            "code_hash": "a7f3" + "0" * 60,
            "parameters_schema": {"type": "object"},
            "tools_used": ["filesystem:read_file"],
            "routing": "local",
            "tags": ["json"],
            "created_by": "erwan",
            "created_at": now,
            "updated_by": "erwan",
            "updated_at": now,
            "usage_count": 7,
        }
        async with db.transaction() as conn:
            await conn.execute(capability_records.insert().values(row))
        await db.upgrade()
        assert await db.current_revision() == head_revision()
        registry = CapabilityRegistry(db)
        found = (await registry.resolve(Scope("acme", "webapp", "erwan"), "fs:read_json")).record
        assert (found.usage_count, found.created_at, found.tools_used) == (
            7,
            now,
            ["filesystem:read_file"],
        )
        assert (
            await registry.resolve(Scope("acme", "webapp", "erwan"), "mcp:sqlite")
        ).record.record_type == "mcp-server"
    finally:
        await db.close()


async def test_downgrade_to_base_and_back_works(blank_url: str) -> None:
    from alembic import command

    from pml.storage.database import _alembic_config  # pyright: ignore[reportPrivateUsage]

    db = await Database.open(blank_url)
    try:
        async with db.transaction() as conn:
            await conn.run_sync(lambda sync: command.downgrade(_alembic_config(sync), "base"))
        assert await db.current_revision() is None
        await db.upgrade()
        assert await db.current_revision() == head_revision()
    finally:
        await db.close()


async def test_upgrading_to_0005_shortens_tool_names_that_are_not_valid_mcp_names(
    blank_url: str,
) -> None:
    db = await Database.open(blank_url, migrate=False)
    try:
        await db.upgrade("0004")
        now = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
        long_action = "read_" + "x" * 59  # the longest action: its tool name has 73 characters
        row = {
            "fqdn": f"acme.webapp.fs.{long_action}.a7f3",
            "id": "00000000-0000-0000-0000-000000000002",
            "record_type": "capability",
            "org": "acme",
            "project": "webapp",
            "display_name": "fs:read_it",
            "named": True,
            "namespace": "fs",
            "action": long_action,
            "tool_name": f"mcp__fs__{long_action}",
            "hash": "a7f3",
            "code": "return 1",
            "code_hash": "a7f3" + "0" * 60,
            "parameters_schema": {"type": "object"},
            "tools_used": [],
            "routing": "cloud",
            "tags": [],
            "created_by": "erwan",
            "created_at": now,
            "updated_by": "erwan",
            "updated_at": now,
        }
        async with db.transaction() as conn:
            await conn.execute(capability_records.insert().values(row))
        await db.upgrade()
        expected = tool_name_for("fs", long_action)
        registry = CapabilityRegistry(db)
        found = (await registry.resolve(Scope("acme", "webapp", "erwan"), expected)).record
        assert found.tool_name == expected
        assert len(expected) == 64
        assert found.display_name == "fs:read_it"
    finally:
        await db.close()


async def test_upgrading_to_0007_keeps_audit_events_and_widens_decided_by(
    blank_url: str,
) -> None:
    from pml.storage.tables import audit_events

    db = await Database.open(blank_url, migrate=False)
    try:
        await db.upgrade("0006")
        now = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
        row = {
            "ts": now,
            "event": "POLICY_DENIED",
            "actor": "erwan",
            "org": "acme",
            "project": "webapp",
            "request_id": "r1",
            "details": {"tool": "fs:write", "ü": "ünïcode"},
            "decided_by": "policy:file_task",
        }
        async with db.transaction() as conn:
            await conn.execute(audit_events.insert().values(row))
        await db.upgrade()
        long_rule = "config:permissions.deny[3]:" + "x" * 173
        async with db.transaction() as conn:
            await conn.execute(audit_events.insert().values({**row, "decided_by": long_rule}))
        async with db.read() as conn:
            found = (
                await conn.execute(
                    sa.select(audit_events.c.details, audit_events.c.decided_by).order_by(
                        audit_events.c.id
                    )
                )
            ).all()
        assert [tuple(item) for item in found] == [
            ({"tool": "fs:write", "ü": "ünïcode"}, "policy:file_task"),
            ({"tool": "fs:write", "ü": "ünïcode"}, long_rule),
        ]
    finally:
        await db.close()


async def test_upgrading_to_0008_keeps_workflow_states_unclaimed(blank_url: str) -> None:
    from pml.storage.tables import workflow_state

    db = await Database.open(blank_url, migrate=False)
    try:
        await db.upgrade("0007")
        now = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
        row = {
            "workflow_id": "wf_0001",
            "kind": "client_run",
            "org": "acme",
            "project": "webapp",
            "user_id": "erwan",
            "state": {"json": '{"code": "return 1"}'},
            "created_at": now,
            "expires_at": now,
        }
        async with db.transaction() as conn:  # the columns 0007 has, no more
            await conn.execute(workflow_state.insert().values(row))
        await db.upgrade()
        async with db.read() as conn:
            found = (await conn.execute(sa.select(workflow_state))).one()
        assert (found.workflow_id, found.kind, found.claimed_at) == ("wf_0001", "client_run", None)
        assert found.state == {"json": '{"code": "return 1"}'}
        assert found.expires_at == now
    finally:
        await db.close()


async def test_upgrading_to_0009_makes_existing_keys_agents_and_approvals_undecided(
    blank_url: str,
) -> None:
    from pml.storage.tables import api_keys, workflow_state

    db = await Database.open(blank_url, migrate=False)
    try:
        await db.upgrade("0008")
        now = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
        async with db.transaction() as conn:  # the columns 0008 has, no more
            await conn.execute(
                api_keys.insert().values(
                    id="k1",
                    key_hash="a" * 64,
                    prefix="pml_abcdefgh",
                    org="acme",
                    project="webapp",
                    user_id="erwan",
                    created_at=now,
                )
            )
            await conn.execute(
                workflow_state.insert().values(
                    workflow_id="wf_0002",
                    kind="approval",
                    org="acme",
                    project="webapp",
                    user_id="erwan",
                    state={"json": "{}"},
                    created_at=now,
                    expires_at=now,
                )
            )
        await db.upgrade()
        async with db.read() as conn:
            key = (await conn.execute(sa.select(api_keys))).one()
            state = (await conn.execute(sa.select(workflow_state))).one()
        assert (key.id, key.role) == ("k1", "agent")
        assert (state.workflow_id, state.decision) == ("wf_0002", None)
    finally:
        await db.close()


async def test_upgrading_to_0010_backfills_audit_targets_and_pins_unflagged_definitions(
    blank_url: str,
) -> None:
    from pml.storage.tables import audit_events, tool_schema

    db = await Database.open(blank_url, migrate=False)
    try:
        await db.upgrade("0009")
        now = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
        fqdn = "acme.webapp.fs.read_json.a7f3"
        async with db.transaction() as conn:  # the columns 0009 has, no more
            for index, details in enumerate(
                (
                    {"tool": "fs:read_file", "capability": "file_read"},
                    {"capability": fqdn},
                    {"fqdn": fqdn, "tool": "x" * 500},
                    {"value": "100%"},
                )
            ):
                await conn.execute(
                    audit_events.insert().values(
                        id=index + 1,
                        ts=now,
                        event="TOOL_CALL_END",
                        org="acme",
                        project="webapp",
                        details=details,
                    )
                )
            for name, current, pinned, flagged in (
                ("same", "h1", "h1", False),
                ("changed", "h2", "h0", True),
            ):
                await conn.execute(
                    tool_schema.insert().values(
                        server_id="fs",
                        tool_name=name,
                        definition={"name": name},
                        definition_hash=current,
                        pinned_hash=pinned,
                        flagged=flagged,
                        first_seen_at=now,
                        updated_at=now,
                    )
                )
        await db.upgrade()
        async with db.read() as conn:
            events = (await conn.execute(sa.select(audit_events).order_by("id"))).all()
            tools = {
                row.tool_name: row.pinned_definition
                for row in await conn.execute(sa.select(tool_schema))
            }
        assert [(row.tool, row.capability) for row in events] == [
            ("fs:read_file", None),  # a permission capability is not a capability's FQDN
            (None, fqdn),
            ("x" * 400, fqdn),
            (None, None),
        ]
        assert tools == {"same": {"name": "same"}, "changed": None}
    finally:
        await db.close()


async def test_upgrading_to_0010_rolls_existing_tool_usage_up_per_day(blank_url: str) -> None:
    from pml.storage.tables import tool_usage, tool_usage_daily

    db = await Database.open(blank_url, migrate=False)
    try:
        await db.upgrade("0009")
        day = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
        async with db.transaction() as conn:
            for latency, success, when in (
                (0.5, True, day),
                (30.0, False, day),
                (20_000.0, True, day),
                (3.0, True, day.replace(day=3)),
            ):
                await conn.execute(
                    tool_usage.insert().values(
                        server_id="fs",
                        tool_name="read",
                        latency_ms=latency,
                        success=success,
                        org="acme",
                        project="webapp",
                        called_at=when,
                    )
                )
        await db.upgrade()
        async with db.read() as conn:
            rows = {row.day: row for row in await conn.execute(sa.select(tool_usage_daily))}
        assert set(rows) == {"2025-01-02", "2025-01-03"}
        first = rows["2025-01-02"]
        assert (first.calls, first.errors, first.latency_max_ms) == (3, 1, 20_000.0)
        assert first.latency_sum_ms == pytest.approx(20_030.5)
        assert (first.lat_le_1, first.lat_le_50, first.lat_over) == (1, 1, 1)
        assert (rows["2025-01-03"].calls, rows["2025-01-03"].lat_le_5) == (1, 1)
    finally:
        await db.close()


async def test_upgrading_to_0011_copies_version_tags_and_keeps_records_active(
    blank_url: str,
) -> None:
    from pml.storage.tables import capability_version_tags, capability_versions

    db = await Database.open(blank_url, migrate=False)
    try:
        await db.upgrade("0010")
        now = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
        fqdn = "acme.webapp.fs.reader.a7f3"
        common = {"parameters_schema": {}, "tools_used": [], "routing": "cloud"}
        async with db.transaction() as conn:  # the columns 0010 has, no more
            await conn.execute(
                capability_records.insert().values(
                    fqdn=fqdn,
                    id="5f0c6f8e-0000-4000-8000-000000000001",
                    org="acme",
                    project="webapp",
                    display_name="reader",
                    named=True,
                    namespace="fs",
                    action="reader",
                    tool_name="mcp__fs__reader",
                    hash="a7f3",
                    code="return 3",
                    code_hash="c" * 64,
                    tags=[],
                    version=3,
                    created_by="erwan",
                    created_at=now,
                    updated_by="erwan",
                    updated_at=now,
                    **common,
                )
            )
            for version, tag in ((1, "v1.0.0"), (2, None), (3, "v1.0.0")):  # a repeated tag
                await conn.execute(
                    capability_versions.insert().values(
                        capability_fqdn=fqdn,
                        version=version,
                        version_tag=tag,
                        code=f"return {version}",
                        updated_by="erwan",
                        updated_at=now,
                        **common,
                    )
                )
        await db.upgrade()
        async with db.read() as conn:
            tags = (await conn.execute(sa.select(capability_version_tags))).all()
        assert [(row.capability_fqdn, row.tag, row.version) for row in tags] == [
            (fqdn, "v1.0.0", 1)  # the lowest version keeps a repeated tag
        ]
        registry = CapabilityRegistry(db)
        scope = Scope("acme", "webapp", "erwan")
        assert (await registry.resolve(scope, "reader@v1.0.0")).version.code == "return 1"
        assert (await registry.resolve(scope, "reader")).record.archived is False
    finally:
        await db.close()


async def test_upgrading_to_0012_adds_shared_mcp_sessions_and_keeps_capabilities(
    blank_url: str,
) -> None:
    scope = Scope("acme", "webapp", "erwan")
    db = await Database.open(blank_url, migrate=False)
    try:
        await db.upgrade("0011")
        async with db.read() as conn:
            tables_before = await conn.run_sync(lambda sync: sa.inspect(sync).get_table_names())
        registry = CapabilityRegistry(db)
        # the record as a 0011 gateway wrote it (today's code writes later columns too)
        async with db.transaction() as conn:
            await conn.execute(capability_records.insert().values(early_record("return 12")))
        await db.upgrade()
        store = McpSessionStore(db)
        record = SessionRecord("a" * 64, "b" * 64, scope, "2025-11-25", {"capabilities": {}})
        await store.record(record)
        async with db.read() as conn:
            count = await conn.execute(sa.select(sa.func.count()).select_from(mcp_sessions))
            sessions = count.scalar_one()
        assert "mcp_sessions" not in tables_before
        assert await db.current_revision() == "0016"
        assert sessions == 1
        assert await store.find("a" * 64, idle_s=60) == record
        assert (await registry.list(scope, ListQuery())).total == 1
    finally:
        await db.close()


async def test_upgrading_to_0016_counts_each_projects_active_capabilities(
    blank_url: str,
) -> None:
    db = await Database.open(blank_url, migrate=False)
    try:
        await db.upgrade("0015")
        async with db.transaction() as conn:
            for code in ("return 1", "return 2", "return 3"):
                await conn.execute(capability_records.insert().values(early_record(code, code)))
            await conn.execute(
                capability_records.update()
                .where(capability_records.c.code == "return 3")
                .values(archived_at=datetime.now(UTC), archived_by="erwan")
            )
        await db.upgrade()
        async with db.read() as conn:
            rows = (await conn.execute(sa.select(capability_counts))).all()
        counts = {(row.org, row.project): row.active for row in rows}
        assert counts[("acme", "webapp")] == 2  # the archived one does not count
    finally:
        await db.close()
