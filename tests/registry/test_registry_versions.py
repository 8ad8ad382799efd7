"""Versions: append-only history, specifiers, diffs; and atomic renames."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from pml.errors import InvalidInput, NameTaken, VersionNotFound
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry, RenameChanges
from pml.storage.capability_repo import SqlCapabilityRepository
from pml.storage.database import Database
from pml.storage.tables import capability_aliases, capability_versions

pytestmark = pytest.mark.anyio


class Clock:
    """A settable clock, so version dates are chosen by the test."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now


async def _three_versions(db: Database, scope: Scope) -> tuple[CapabilityRegistry, Clock]:
    clock = Clock(datetime(2025, 12, 20, 9, 0, tzinfo=UTC))
    registry = CapabilityRegistry(db, clock=clock)
    await registry.capture(
        scope,
        CapabilityDraft(code="return 'one'", name="my-reader", version_tag="v1.0.0"),
        latency_ms=1,
    )
    clock.now = datetime(2025, 12, 22, 23, 59, tzinfo=UTC)
    await registry.update_code(
        scope, "my-reader", CapabilityDraft(code="return 'two'", version_tag="1.2.0")
    )
    clock.now = datetime(2025, 12, 23, 0, 1, tzinfo=UTC)
    await registry.update_code(scope, "my-reader", CapabilityDraft(code="return 'three'"))
    return registry, clock


async def test_update_keeps_the_fqdn_and_increments_the_version(db: Database, scope: Scope) -> None:
    registry = CapabilityRegistry(db)
    first = (
        await registry.capture(scope, CapabilityDraft(code="return 1", name="calc"), latency_ms=1)
    ).record
    updated = await registry.update_code(scope, "calc", CapabilityDraft(code="return 2"))
    assert (updated.fqdn, updated.version, updated.code) == (first.fqdn, 2, "return 2")
    assert (await registry.resolve(scope, "calc")).version.code == "return 2"


@pytest.mark.parametrize(
    ("spec", "code"),
    [
        ("", "return 'three'"),
        ("@latest", "return 'three'"),
        ("@v1", "return 'two'"),  # v1.0.0 and v1.2.0 are major 1: the highest wins
        ("@v1.0.0", "return 'one'"),
        ("@v1.2.0", "return 'two'"),
        ("@3", "return 'three'"),
        ("@2025-12-20", "return 'one'"),
        ("@2025-12-22", "return 'two'"),  # current at the end of that UTC day
        ("@2025-12-23", "return 'three'"),
    ],
)
async def test_version_specifiers_pick_the_right_code(
    db: Database, scope: Scope, spec: str, code: str
) -> None:
    registry, _ = await _three_versions(db, scope)
    assert (await registry.resolve(scope, f"my-reader{spec}")).version.code == code


@pytest.mark.parametrize(
    "spec", ["v5", "v1.9.9", "2025-12-19", "vx", "2025-13-45", "v-1", "", "x" * 10_000]
)
async def test_unknown_or_malformed_versions_are_version_not_found(
    db: Database, scope: Scope, spec: str
) -> None:
    registry, _ = await _three_versions(db, scope)
    with pytest.raises(VersionNotFound) as caught:
        await registry.resolve(scope, f"my-reader@{spec}")
    if len(spec) < 100:
        assert caught.value.message == f"Version {spec} not found for my-reader"


async def test_history_is_newest_first_with_summaries(db: Database, scope: Scope) -> None:
    registry, _ = await _three_versions(db, scope)
    record, versions, alias = await registry.history(scope, "my-reader")
    assert alias is None
    assert [v.version for v in versions] == [3, 2, 1]
    assert [v.version_tag for v in versions] == [None, "v1.2.0", "v1.0.0"]
    assert versions[0].change_summary == "code changed: +1 -1 lines"
    assert record.version == 3


async def test_version_rows_cannot_be_updated(db: Database, scope: Scope) -> None:
    await _three_versions(db, scope)
    with pytest.raises(DBAPIError, match="append-only"):
        async with db.engine.begin() as conn:
            await conn.execute(sa.update(capability_versions).values(code="return 'forged'"))
    async with db.read() as conn:
        codes = (await conn.execute(sa.select(capability_versions.c.code))).scalars().all()
    assert "return 'forged'" not in codes


async def test_a_duplicate_version_tag_is_refused(db: Database, scope: Scope) -> None:
    registry, _ = await _three_versions(db, scope)
    with pytest.raises(InvalidInput, match=re.escape("v1.2.0 already exists")):
        await registry.update_code(
            scope, "my-reader", CapabilityDraft(code="return 4", version_tag="v1.2.0")
        )
    assert (await registry.resolve(scope, "my-reader")).record.version == 3


async def test_updating_to_another_capabilitys_code_is_refused(db: Database, scope: Scope) -> None:
    registry = CapabilityRegistry(db)
    await registry.capture(scope, CapabilityDraft(code="return 1", name="one"), latency_ms=1)
    await registry.capture(scope, CapabilityDraft(code="return 2", name="two"), latency_ms=1)
    with pytest.raises(InvalidInput, match="already capability 'two'"):
        await registry.update_code(scope, "one", CapabilityDraft(code="return 2"))


async def test_rename_chain_leaves_every_old_name_pointing_at_the_fqdn(
    registry: CapabilityRegistry, scope: Scope
) -> None:
    fqdn = (
        await registry.capture(scope, CapabilityDraft(code="return 1", name="a"), latency_ms=1)
    ).record.fqdn
    await registry.rename(scope, "a", RenameChanges(new_name="b"))
    await registry.rename(scope, "b", RenameChanges(new_name="ns:c"))
    for old in ("a", "b", "mcp__code__a", "mcp__code__b"):
        resolved = await registry.resolve(scope, old)
        assert resolved.record.fqdn == fqdn
        assert resolved.via_alias in {"a", "b"}
    assert (await registry.resolve(scope, "mcp__ns__c")).record.display_name == "ns:c"


async def test_taking_back_an_old_name_removes_that_alias(
    registry: CapabilityRegistry, scope: Scope
) -> None:
    await registry.capture(scope, CapabilityDraft(code="return 1", name="a"), latency_ms=1)
    await registry.rename(scope, "a", RenameChanges(new_name="b"))
    record = await registry.rename(scope, "b", RenameChanges(new_name="a"))
    assert record.display_name == "a"
    assert (await registry.resolve(scope, "a")).via_alias is None
    assert (await registry.resolve(scope, "b")).via_alias == "b"


async def test_a_rename_that_fails_half_way_leaves_no_trace(
    db: Database, registry: CapabilityRegistry, scope: Scope, monkeypatch: pytest.MonkeyPatch
) -> None:
    await registry.capture(scope, CapabilityDraft(code="return 1", name="a"), latency_ms=1)

    async def explode(self: SqlCapabilityRepository, fqdn: str, **values: object) -> None:
        raise RuntimeError("disk unplugged")

    monkeypatch.setattr(SqlCapabilityRepository, "update_record", explode)
    with pytest.raises(RuntimeError, match="disk unplugged"):
        await registry.rename(scope, "a", RenameChanges(new_name="b"))
    monkeypatch.undo()
    async with db.read() as conn:
        aliases = (await conn.execute(sa.select(capability_aliases))).all()
    assert aliases == []  # the alias written before the failure was rolled back
    assert (await registry.resolve(scope, "a")).record.display_name == "a"


async def test_a_name_whose_tool_name_is_taken_is_refused(
    registry: CapabilityRegistry, scope: Scope
) -> None:
    await registry.capture(scope, CapabilityDraft(code="return 1", name="fs:read"), latency_ms=1)
    other = (
        await registry.capture(
            scope, CapabilityDraft(code="return 2", tools_used=["filesystem:x"]), latency_ms=1
        )
    ).record
    with pytest.raises(NameTaken):
        await registry.rename(scope, other.display_name, RenameChanges(new_name="read"))
    assert (await registry.resolve(scope, other.fqdn)).record.display_name == other.display_name


async def test_a_display_name_may_not_shadow_another_capabilitys_tool_name(
    registry: CapabilityRegistry, scope: Scope
) -> None:
    await registry.capture(
        scope, CapabilityDraft(code="return 1", name="fs:list_dir"), latency_ms=1
    )
    other = (await registry.capture(scope, CapabilityDraft(code="return 2"), latency_ms=1)).record
    with pytest.raises(NameTaken):
        await registry.rename(
            scope, other.display_name, RenameChanges(new_name="mcp__fs__list_dir")
        )
    assert (await registry.resolve(scope, "mcp__fs__list_dir")).record.display_name == "fs:list_dir"


async def test_history_through_an_old_name_carries_the_alias_warning(
    registry: CapabilityRegistry, scope: Scope
) -> None:
    await registry.capture(scope, CapabilityDraft(code="return 1", name="old"), latency_ms=1)
    await registry.rename(scope, "old", RenameChanges(new_name="new"))
    _, _, alias = await registry.history(scope, "old")
    assert alias is not None
    assert alias["currentName"] == "new"
