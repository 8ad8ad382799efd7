"""Stored routing follows ``[routing]`` after a change (SPEC §8, §14): ``sync_routing``."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
import sqlalchemy as sa

from pml.config import Settings
from pml.registry.models import CapabilityRecord, RoutingRules
from pml.registry.routing_start import routing_at_start
from pml.registry.routing_sync import (
    ANNOUNCED_PER_SCOPE,
    AUDIT_EVENT,
    ROUTING_CHANGED,
    RoutingChange,
    sync_routing,
)
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry, RenameChanges
from pml.registry.tools import CapTools
from pml.storage.database import Database
from pml.storage.tables import audit_events, capability_records

pytestmark = pytest.mark.anyio

SEARCH_IS_CLOUD = RoutingRules(cloud=("search*",))
NOTHING_IS_CLOUD = RoutingRules()


class Heard:
    """An ``announce`` callable that remembers what it was told."""

    def __init__(self) -> None:
        self.changes: list[tuple[str, str, str, str]] = []

    async def __call__(self, org: str, project: str, fqdn: str, kind: str) -> None:
        self.changes.append((org, project, fqdn, kind))


async def _capture(
    registry: CapabilityRegistry, scope: Scope, code: str, tools: list[str], **extra: Any
) -> CapabilityRecord:
    draft = CapabilityDraft(code=code, tools_used=tools, **extra)
    return (await registry.capture(scope, draft, latency_ms=1.0)).record


async def _routing(db: Database, fqdn: str) -> str:
    row = await db.first(
        sa.select(capability_records.c.routing).where(capability_records.c.fqdn == fqdn), {}
    )
    assert row is not None
    return row.routing


async def test_a_cloud_capability_becomes_local_when_its_server_is_no_longer_cloud(
    db: Database, scope: Scope
) -> None:
    registry = CapabilityRegistry(db, routing=SEARCH_IS_CLOUD)
    record = await _capture(
        registry, scope, "mcp.search.query(q='x')", ["search:query"], name="web:find"
    )
    assert record.routing == "cloud"
    heard = Heard()

    changes = await sync_routing(db, NOTHING_IS_CLOUD, announce=heard)

    assert changes == [RoutingChange("acme", "webapp", record.fqdn, "web:find", "cloud", "local")]
    looked_up = await CapTools(registry).call("cap_lookup", scope, {"name": "web:find"})
    assert looked_up["routing"] == "local"
    whois = await registry.whois(scope, record.fqdn)
    assert (whois.version_count, whois.record.version) == (1, 1)
    assert whois.record.routing_override is None
    assert heard.changes == [("acme", "webapp", record.fqdn, ROUTING_CHANGED)]


async def test_a_second_run_under_the_same_rules_changes_nothing(
    db: Database, scope: Scope
) -> None:
    registry = CapabilityRegistry(db, routing=SEARCH_IS_CLOUD)
    await _capture(registry, scope, "mcp.search.query(q='x')", ["search:query"])
    assert len(await sync_routing(db, NOTHING_IS_CLOUD)) == 1
    heard = Heard()

    assert await sync_routing(db, NOTHING_IS_CLOUD, announce=heard) == []
    assert heard.changes == []


async def test_an_explicit_override_is_left_alone(db: Database, scope: Scope) -> None:
    registry = CapabilityRegistry(db, routing=SEARCH_IS_CLOUD)
    pinned = await _capture(
        registry, scope, "mcp.search.query(q='p')", ["search:query"], routing="cloud"
    )
    renamed = await _capture(registry, scope, "mcp.search.query(q='r')", ["search:query"])
    await registry.rename(scope, renamed.fqdn, RenameChanges(routing="cloud"))

    changes = await sync_routing(db, NOTHING_IS_CLOUD)

    assert changes == []
    assert await _routing(db, pinned.fqdn) == "cloud"
    assert await _routing(db, renamed.fqdn) == "cloud"


async def test_a_check_reports_the_change_but_stores_and_announces_nothing(
    db: Database, scope: Scope
) -> None:
    registry = CapabilityRegistry(db, routing=SEARCH_IS_CLOUD)
    record = await _capture(registry, scope, "mcp.search.query(q='x')", ["search:query"])
    heard = Heard()

    changes = await sync_routing(db, NOTHING_IS_CLOUD, apply=False, announce=heard)

    assert [(c.fqdn, c.stored, c.derived) for c in changes] == [(record.fqdn, "cloud", "local")]
    assert await _routing(db, record.fqdn) == "cloud"
    assert heard.changes == []


async def test_an_archived_capability_keeps_its_stored_routing(db: Database, scope: Scope) -> None:
    registry = CapabilityRegistry(db, routing=SEARCH_IS_CLOUD)
    archived = await _capture(registry, scope, "mcp.search.query(q='a')", ["search:query"])
    active = await _capture(registry, scope, "mcp.search.query(q='b')", ["search:query"])
    async with db.transaction() as conn:
        await conn.execute(
            capability_records.update()
            .where(capability_records.c.fqdn == archived.fqdn)
            .values(archived_at=datetime.now(UTC))
        )

    changes = await sync_routing(db, NOTHING_IS_CLOUD)

    assert [c.fqdn for c in changes] == [active.fqdn]
    assert await _routing(db, archived.fqdn) == "cloud"


async def test_mcp_server_records_are_not_capabilities_and_keep_their_routing(
    db: Database, scope: Scope
) -> None:
    registry = CapabilityRegistry(db, routing=SEARCH_IS_CLOUD)
    server = await registry.register_mcp_server(scope, "search", code_url="x", routing="cloud")

    assert await sync_routing(db, NOTHING_IS_CLOUD) == []
    assert await _routing(db, server.record.fqdn) == "cloud"


async def test_every_tenant_is_covered_whatever_the_batch_size(db: Database) -> None:
    registry = CapabilityRegistry(db, routing=SEARCH_IS_CLOUD)
    created: set[str] = set()
    for org in ("acme", "globex"):
        for project in ("web", "ops"):
            scope = Scope(org, project, "u")
            for n in range(3):
                code = f"mcp.search.query(q='{org}{project}{n}')"
                created.add((await _capture(registry, scope, code, ["search:query"])).fqdn)
    heard = Heard()

    changes = await sync_routing(db, NOTHING_IS_CLOUD, announce=heard, batch_size=2)

    assert {c.fqdn for c in changes} == created
    assert {(org, project) for org, project, _, _ in heard.changes} == {
        ("acme", "web"),
        ("acme", "ops"),
        ("globex", "web"),
        ("globex", "ops"),
    }
    assert sorted(fqdn for _, _, fqdn, _ in heard.changes) == sorted(created)


async def _chain(registry: CapabilityRegistry, scope: Scope) -> list[CapabilityRecord]:
    """``a:outer`` uses ``m:middle`` (by tool name), which uses ``z:inner`` (by FQDN), which
    uses a search tool: dependants sort both before and after what they use."""
    inner = await _capture(registry, scope, "mcp.search.q(q=1)", ["search:q"], name="z:inner")
    middle = await _capture(registry, scope, "x = 2", [inner.fqdn, "search:q"], name="m:middle")
    outer = await _capture(registry, scope, "x = 3", ["mcp__m__middle"], name="a:outer")
    last = await _capture(registry, scope, "x = 4", [outer.fqdn], name="zz:last")
    return [inner, middle, outer, last]


@pytest.mark.parametrize("batch_size", [1, 2, 500])
async def test_nested_capabilities_follow_what_they_use_in_one_run_in_any_order(
    db: Database, scope: Scope, batch_size: int
) -> None:
    chain = await _chain(CapabilityRegistry(db, routing=SEARCH_IS_CLOUD), scope)
    assert {c.routing for c in chain} == {"cloud"}

    down = await sync_routing(db, NOTHING_IS_CLOUD, batch_size=batch_size)

    assert {c.fqdn for c in down} == {c.fqdn for c in chain}
    assert {await _routing(db, c.fqdn) for c in chain} == {"local"}

    up = await sync_routing(db, SEARCH_IS_CLOUD, batch_size=batch_size)

    assert {(c.fqdn, c.derived) for c in up} == {(c.fqdn, "cloud") for c in chain}
    assert {await _routing(db, c.fqdn) for c in chain} == {"cloud"}
    assert await sync_routing(db, SEARCH_IS_CLOUD, batch_size=batch_size) == []


async def test_a_capability_using_a_pinned_local_one_stays_local(
    db: Database, scope: Scope
) -> None:
    registry = CapabilityRegistry(db, routing=SEARCH_IS_CLOUD)
    chain = await _chain(registry, scope)
    await registry.rename(scope, "m:middle", RenameChanges(routing="local"))
    await sync_routing(db, SEARCH_IS_CLOUD)

    routings = [await _routing(db, c.fqdn) for c in chain]

    assert routings == ["cloud", "local", "local", "local"]


async def test_a_capability_using_an_unknown_one_is_local(db: Database, scope: Scope) -> None:
    registry = CapabilityRegistry(db)
    unknown = "acme.webapp.gone.away.ab12"
    record = await _capture(registry, scope, "x = 1", [unknown, "search:q"])
    assert record.routing == "local"

    assert await sync_routing(db, SEARCH_IS_CLOUD) == []


async def test_references_resolve_as_their_creator_sees_them_across_tenants(
    db: Database,
) -> None:
    registry = CapabilityRegistry(db, routing=SEARCH_IS_CLOUD)
    owner, other = Scope("acme", "web", "ann"), Scope("acme", "web", "bob")
    public = await _capture(registry, owner, "mcp.search.q(q=1)", ["search:q"], visibility="public")
    private = await _capture(
        registry, owner, "mcp.search.q(q=2)", ["search:q"], visibility="private"
    )
    abroad = await _capture(registry, Scope("globex", "ops", "cy"), "x = 1", [public.fqdn])
    blind = await _capture(registry, other, "x = 2", [private.fqdn, "search:q"])
    assert (abroad.routing, blind.routing) == ("cloud", "local")  # bob cannot see ann's

    await sync_routing(db, SEARCH_IS_CLOUD)
    assert await _routing(db, blind.fqdn) == "local"
    await registry.rename(owner, private.fqdn, RenameChanges(visibility="project"))
    changes = await sync_routing(db, NOTHING_IS_CLOUD, batch_size=1)

    assert {c.fqdn for c in changes} == {public.fqdn, private.fqdn, abroad.fqdn}
    assert await _routing(db, abroad.fqdn) == "local"
    changes = await sync_routing(db, SEARCH_IS_CLOUD, batch_size=1)
    assert {c.fqdn for c in changes} == {public.fqdn, private.fqdn, abroad.fqdn, blind.fqdn}


async def _cycle(db: Database, scope: Scope) -> tuple[CapabilityRecord, CapabilityRecord]:
    """``c:one`` and ``c:two`` use each other (a new version of the first closes the loop)."""
    registry = CapabilityRegistry(db)
    one = await _capture(registry, scope, "x = 1", ["search:q"], name="c:one")
    two = await _capture(registry, scope, "x = 2", [one.fqdn, "search:q"], name="c:two")
    await registry.update_code(
        scope, "c:one", CapabilityDraft(code="x = 11", tools_used=[two.fqdn, "search:q"])
    )
    return one, two


@pytest.mark.parametrize("batch_size", [1, 500])
async def test_a_cycle_settles_on_cloud_when_nothing_in_it_is_local(
    db: Database, scope: Scope, batch_size: int
) -> None:
    one, two = await _cycle(db, scope)
    assert {await _routing(db, one.fqdn), await _routing(db, two.fqdn)} == {"local"}

    with anyio.fail_after(10):
        changes = await sync_routing(db, SEARCH_IS_CLOUD, batch_size=batch_size)

    assert {(c.fqdn, c.derived) for c in changes} == {(one.fqdn, "cloud"), (two.fqdn, "cloud")}


async def test_a_cycle_with_a_local_tool_is_local_throughout(db: Database, scope: Scope) -> None:
    one, two = await _cycle(db, scope)
    await sync_routing(db, SEARCH_IS_CLOUD)
    registry = CapabilityRegistry(db)
    await registry.update_code(
        scope, "c:two", CapabilityDraft(code="x = 22", tools_used=[one.fqdn, "fs:read"])
    )
    assert await _routing(db, one.fqdn) == "cloud"  # stored before c:two changed

    with anyio.fail_after(10):
        changes = await sync_routing(db, SEARCH_IS_CLOUD)

    assert [(c.fqdn, c.derived) for c in changes] == [(one.fqdn, "local")]
    assert await _routing(db, two.fqdn) == "local"


async def test_announcements_stop_at_a_bound_per_project_but_every_row_changes(
    db: Database, scope: Scope
) -> None:
    registry = CapabilityRegistry(db, routing=SEARCH_IS_CLOUD)
    for n in range(ANNOUNCED_PER_SCOPE + 5):
        await _capture(registry, scope, f"mcp.search.q(q={n})", ["search:q"])
    heard = Heard()

    changes = await sync_routing(db, NOTHING_IS_CLOUD, announce=heard, batch_size=40)

    assert len(changes) == ANNOUNCED_PER_SCOPE + 5
    assert len(heard.changes) == ANNOUNCED_PER_SCOPE
    rows = await db.first(
        sa.select(sa.func.count()).where(capability_records.c.routing == "cloud"), {}
    )
    assert rows is not None
    assert rows[0] == 0


async def test_at_start_changes_are_logged_and_audited_once_per_project(
    db: Database, database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CapabilityRegistry(db, routing=SEARCH_IS_CLOUD)
    for org in ("acme", "globex"):
        for n in range(2):
            await _capture(registry, Scope(org, "web", "u"), f"mcp.search.q(q={n})", ["search:q"])
    settings = Settings.model_validate(
        {"database_url": database_url, "audit": {"file": str(tmp_path / "audit.jsonl")}}
    )
    caplog.set_level(logging.INFO, logger="pml.registry.routing_start")

    changes = await routing_at_start(db, settings)

    assert len(changes) == 4
    assert "routing follows [routing]: 4 capabilities re-derived" in caplog.text
    async with db.read() as conn:
        rows = (
            await conn.execute(sa.select(audit_events).where(audit_events.c.event == AUDIT_EVENT))
        ).all()
    assert sorted((row.org, row.project) for row in rows) == [("acme", "web"), ("globex", "web")]
    assert {row.decided_by for row in rows} == {"config:routing"}
    assert (tmp_path / "audit.jsonl").read_text().count(AUDIT_EVENT) == 2
    caplog.clear()
    # The same patterns again: the scan is skipped (the fingerprint is remembered).
    assert await routing_at_start(db, settings) == []
    assert "re-derived" not in caplog.text
    # Other patterns: scanned again, and the capabilities follow them back.
    searching = settings.model_copy(
        update={"routing": settings.routing.model_copy(update={"cloud": ["search*"]})}
    )
    assert len(await routing_at_start(db, searching)) == 4
    assert "routing follows [routing]: 4 capabilities re-derived" in caplog.text
