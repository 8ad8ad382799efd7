"""The life of a capability: archive, restore, purge, deprecate, tag, and ids as names
(SQLite and PostgreSQL, through the registry and its tools)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from pml.errors import (
    InvalidInput,
    NameTaken,
    NotFound,
    PermissionDenied,
    StorageError,
    VersionNotFound,
)
from pml.registry.changes import CapabilityChange
from pml.registry.lifecycle import CapabilityLifecycle
from pml.registry.models import ListQuery
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry, RenameChanges
from pml.registry.tools import CapTools
from pml.storage.capability_repo import SqlCapabilityRepository
from pml.storage.database import Database
from pml.storage.tables import (
    capability_records,
    capability_version_tags,
    capability_versions,
)

pytestmark = pytest.mark.anyio


class Recorder:
    """Collects audit events and change announcements."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any], str | None]] = []
        self.changes: list[CapabilityChange] = []

    def emit(
        self,
        event: str,
        *,
        scope: Scope,
        details: Mapping[str, Any],
        decided_by: str | None = None,
        **_: Any,
    ) -> None:
        self.events.append((event, dict(details), decided_by))

    async def changed(self, change: CapabilityChange) -> None:
        self.changes.append(change)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def registry(db: Database, recorder: Recorder) -> CapabilityRegistry:
    registry = CapabilityRegistry(db)
    registry.auditor = recorder
    registry.on_change(recorder.changed)
    return registry


@pytest.fixture
def life(registry: CapabilityRegistry) -> CapabilityLifecycle:
    return CapabilityLifecycle(registry)


async def _named(registry: CapabilityRegistry, scope: Scope, name: str, code: str) -> str:
    draft = CapabilityDraft(code=code, name=name, intent=f"do {name}")
    return (await registry.capture(scope, draft, latency_ms=1)).record.fqdn


async def test_an_archived_capability_leaves_names_lists_and_tools_but_keeps_its_history(
    registry: CapabilityRegistry, life: CapabilityLifecycle, recorder: Recorder, scope: Scope
) -> None:
    fqdn = await _named(registry, scope, "reader", "return 1")
    await registry.rename(scope, "reader", RenameChanges(new_name="fs:reader"))
    tools = CapTools(registry)

    record, dependants = await life.archive(scope, "fs:reader")

    assert record.archived
    assert record.archived_by == scope.user
    assert dependants == []
    for ref in ("fs:reader", "reader", fqdn, record.id, record.tool_name):
        with pytest.raises(NotFound):
            await registry.resolve(scope, ref)
    assert (await tools.call("cap_list", scope, {}))["total"] == 0
    archived = await tools.call("cap_list", scope, {"archived": True})
    assert [item["fqdn"] for item in archived["items"]] == [fqdn]
    assert (await registry.counts(scope))["named"] == 0
    whois = await tools.call("cap_whois", scope, {"fqdn": fqdn})
    assert whois["archived"] is True
    assert whois["version_count"] == 1
    assert whois["archived_aliases"][0]["alias"] == "reader"
    # the name and the old alias are free again
    await _named(registry, scope, "fs:reader", "return 2")
    await _named(registry, scope, "reader", "return 3")
    assert ("CAPABILITY_ARCHIVED", "user:erwan") in [(e, by) for e, _, by in recorder.events]
    assert any(c.fqdn == fqdn and c.kind == "archived" for c in recorder.changes)


async def test_the_same_code_after_archiving_is_learned_as_a_new_capability(
    registry: CapabilityRegistry, life: CapabilityLifecycle, scope: Scope
) -> None:
    fqdn = await _named(registry, scope, "calc", "return 40 + 2")
    await life.archive(scope, "calc")
    again = await registry.capture(scope, CapabilityDraft(code="return 40 + 2"), latency_ms=1)
    assert again.created
    assert again.record.fqdn != fqdn
    # and the archived one cannot come back over the code that lives on
    with pytest.raises(InvalidInput, match="learned again"):
        await life.restore(scope, "calc")


async def test_dependants_block_archiving_unless_forced_and_are_named(
    registry: CapabilityRegistry, life: CapabilityLifecycle, scope: Scope
) -> None:
    base = await _named(registry, scope, "base", "return 1")
    draft = CapabilityDraft(code=f'return await mcp["{base}"]()', name="top", tools_used=[base])
    await registry.capture(scope, draft, latency_ms=1)

    with pytest.raises(InvalidInput, match=r"used by 1 other capability: top \(") as refused:
        await life.archive(scope, "base")
    assert refused.value.to_dict()["field"] == "force"
    assert (await registry.resolve(scope, "base")).record.fqdn == base  # nothing changed

    record, dependants = await life.archive(scope, "base", force=True)
    assert record.archived
    assert [d.display_name for d in dependants] == ["top"]


async def test_restore_brings_the_name_back_or_asks_for_a_new_one(
    registry: CapabilityRegistry, life: CapabilityLifecycle, scope: Scope
) -> None:
    fqdn = await _named(registry, scope, "old", "return 'a'")
    await registry.rename(scope, "old", RenameChanges(new_name="report"))
    await life.archive(scope, "report")
    await _named(registry, scope, "report", "return 'b'")  # takes the name meanwhile

    with pytest.raises(NameTaken, match=r"--name NEW"):
        await life.restore(scope, "report")
    with pytest.raises(NameTaken):
        await life.restore(scope, fqdn, new_name="report")
    with pytest.raises(NotFound):
        await life.restore(scope, "never-existed")

    restored = await life.restore(scope, fqdn, new_name="report-v1")

    assert restored.record.display_name == "report-v1"
    assert not restored.record.archived
    assert restored.aliases_dropped == []  # "old" was still free: it resolves again
    assert (await registry.resolve(scope, "old")).record.fqdn == fqdn
    assert (await registry.resolve(scope, "report-v1")).record.tool_name.endswith("report-v1")
    assert (await registry.resolve(scope, "report")).record.fqdn != fqdn


async def test_purge_deletes_only_an_archived_capability(
    db: Database, registry: CapabilityRegistry, life: CapabilityLifecycle, scope: Scope
) -> None:
    fqdn = await _named(registry, scope, "gone", "return 1")
    await registry.update_code(
        scope, "gone", CapabilityDraft(code="return 2", version_tag="v2.0.0")
    )
    with pytest.raises(NotFound, match="archive it first"):
        await life.purge(scope, "gone")
    keep = await _named(registry, scope, "kept", "return 3")

    await life.archive(scope, "gone")
    purged = await life.purge(scope, fqdn)

    assert purged.fqdn == fqdn
    async with db.read() as conn:
        for table, column in (
            (capability_records, capability_records.c.fqdn),
            (capability_versions, capability_versions.c.capability_fqdn),
            (capability_version_tags, capability_version_tags.c.capability_fqdn),
        ):
            query = sa.select(sa.func.count()).select_from(table).where(column == fqdn)
            assert (await conn.execute(query)).scalar_one() == 0
    assert (await registry.resolve(scope, "kept")).record.fqdn == keep


async def test_the_database_refuses_to_delete_the_history_of_an_active_capability(
    db: Database, registry: CapabilityRegistry, scope: Scope
) -> None:
    fqdn = await _named(registry, scope, "history", "return 1")
    await registry.update_code(
        scope, "history", CapabilityDraft(code="return 2", version_tag="v1.0.0")
    )
    for statement in (
        capability_versions.delete().where(capability_versions.c.capability_fqdn == fqdn),
        capability_version_tags.delete().where(capability_version_tags.c.capability_fqdn == fqdn),
        capability_version_tags.update().values(tag="v9.9.9"),
    ):
        with pytest.raises((StorageError, DBAPIError), match=r"immutable|only with its archived"):
            async with db.transaction() as conn:
                await conn.execute(statement)
    async with db.read() as conn:
        count = sa.select(sa.func.count()).where(capability_versions.c.capability_fqdn == fqdn)
        assert (await conn.execute(count)).scalar_one() == 2


async def test_deprecated_capabilities_warn_every_answer_until_undone(
    registry: CapabilityRegistry, life: CapabilityLifecycle, recorder: Recorder, scope: Scope
) -> None:
    old = await _named(registry, scope, "old-sum", "return 1")
    new = await _named(registry, scope, "new-sum", "return 2")
    tools = CapTools(registry)

    record = await life.deprecate(scope, "old-sum", replaced_by="new-sum")

    assert record.deprecation == {
        "deprecated": f"Capability 'old-sum' is deprecated: use 'new-sum' ({new}) instead",
        "replacedBy": new,
    }
    lookup = await tools.call("cap_lookup", scope, {"name": "old-sum"})
    assert lookup["replacedBy"] == new
    assert "deprecated" in lookup["deprecated"]
    whois = await tools.call("cap_whois", scope, {"fqdn": old})
    assert whois["replacedBy"] == new

    custom = await life.deprecate(scope, "old-sum", message="Use the new one.")
    assert custom.deprecation == {"deprecated": "Use the new one."}
    undone = await life.deprecate(scope, "old-sum", undo=True)
    assert undone.deprecation is None
    assert "deprecated" not in await tools.call("cap_lookup", scope, {"name": "old-sum"})
    assert [e for e, _, _ in recorder.events].count("CAPABILITY_DEPRECATED") == 3


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"replaced_by": "old-one"}, InvalidInput),  # itself
        ({"replaced_by": "nobody"}, NotFound),
        ({"replaced_by": 42}, InvalidInput),
        ({"message": "x" * 1_001}, InvalidInput),
        ({"message": "bad\x00nul"}, InvalidInput),
        ({"message": "escape \x1b[31m red"}, InvalidInput),
        ({"message": ["list"]}, InvalidInput),
    ],
)
async def test_hostile_deprecations_are_refused_and_change_nothing(
    registry: CapabilityRegistry,
    life: CapabilityLifecycle,
    scope: Scope,
    changes: dict[str, Any],
    error: type[Exception],
) -> None:
    await _named(registry, scope, "old-one", "return 1")
    with pytest.raises(error):
        await life.deprecate(scope, "old-one", **changes)
    assert (await registry.resolve(scope, "old-one")).record.deprecated_at is None


async def test_tags_are_semantic_unique_immutable_and_resolve(
    registry: CapabilityRegistry, life: CapabilityLifecycle, scope: Scope
) -> None:
    await _named(registry, scope, "my-reader", "return 1")
    await registry.update_code(scope, "my-reader", CapabilityDraft(code="return 2"))
    await registry.update_code(
        scope, "my-reader", CapabilityDraft(code="return 3", version_tag="v2.0.0")
    )

    tagged = await life.tag(scope, "my-reader@v2", "1.2.0")

    assert (tagged.version, tagged.version_tag) == (2, "v1.2.0")
    assert (await registry.resolve(scope, "my-reader@v1.2.0")).version.code == "return 2"
    assert (await registry.resolve(scope, "my-reader@v2.0.0")).version.version == 3
    # the current version's tag shows on the record; history lists every tag
    current = await life.tag(scope, "my-reader@v1", "v0.9.0")
    assert current.version == 1
    _, versions, _ = await registry.history(scope, "my-reader")
    assert [(v.version, v.version_tag) for v in versions] == [
        (3, "v2.0.0"),
        (2, "v1.2.0"),
        (1, "v0.9.0"),
    ]
    with pytest.raises(InvalidInput, match=r"already tagged v0\.9\.0"):
        await life.tag(scope, "my-reader@v1", "v3.0.0")
    with pytest.raises(InvalidInput, match="already tagged"):
        await life.tag(scope, "my-reader", "v3.0.0")
    with pytest.raises(InvalidInput, match="already exists"):
        await registry.update_code(
            scope, "my-reader", CapabilityDraft(code="return 4", version_tag="v1.2.0")
        )
    await registry.update_code(scope, "my-reader", CapabilityDraft(code="return 4"))
    with pytest.raises(InvalidInput, match=r"v1\.2\.0 already exists .*\(version 2\)"):
        await life.tag(scope, "my-reader", "v1.2.0")
    with pytest.raises(VersionNotFound):
        await life.tag(scope, "my-reader@v7", "v7.0.0")


@pytest.mark.parametrize(
    "tag", ["", "1.2", "v1.2.3-beta", "latest", "v1.2.3\n", "١.٢.٣", "'; DROP TABLE x; --", None, 3]
)
async def test_bad_version_tags_are_refused(
    registry: CapabilityRegistry, life: CapabilityLifecycle, scope: Scope, tag: object
) -> None:
    await _named(registry, scope, "tagme", "return 1")
    with pytest.raises(InvalidInput):
        await life.tag(scope, "tagme", tag)
    assert (await registry.resolve(scope, "tagme")).version.version_tag is None


async def test_an_mcp_server_record_can_be_tagged_but_not_archived(
    registry: CapabilityRegistry, life: CapabilityLifecycle, scope: Scope
) -> None:
    await registry.register_mcp_server(scope, "time", code_url="uvx mcp-server-time")
    await life.tag(scope, "mcp:time", "v1.0.0")
    assert (await registry.resolve(scope, "mcp:time@v1.0.0")).record.display_name == "mcp:time"
    with pytest.raises(InvalidInput, match="MCP server record"):
        await life.archive(scope, "mcp:time")


async def test_the_capability_id_resolves_like_a_name_within_visibility(
    registry: CapabilityRegistry, scope: Scope
) -> None:
    draft = CapabilityDraft(code="return 'secret plan'", visibility="private")
    record = (await registry.capture(scope, draft, latency_ms=1)).record

    assert (await registry.resolve(scope, record.id)).record.fqdn == record.fqdn
    assert (await registry.resolve(scope, f"{record.id}@v1")).version.version == 1
    for other in (Scope("acme", "webapp", "mallory"), Scope("evil", "corp", "erwan")):
        with pytest.raises(NotFound):
            await registry.resolve(other, record.id)


async def test_another_tenant_cannot_archive_restore_purge_or_tag(
    registry: CapabilityRegistry, life: CapabilityLifecycle, scope: Scope
) -> None:
    fqdn = await _named(registry, scope, "mine", "return 1")
    intruder = Scope("evil", "corp", "mallory")
    with pytest.raises(NotFound):
        await life.archive(intruder, fqdn)
    with pytest.raises(NotFound):
        await life.tag(intruder, fqdn, "v1.0.0")
    await registry.rename(scope, "mine", RenameChanges(visibility="public"))
    with pytest.raises(PermissionDenied):
        await life.archive(intruder, fqdn)
    await life.archive(scope, fqdn)
    with pytest.raises(NotFound):
        await life.restore(intruder, fqdn)
    with pytest.raises(NotFound):
        await life.purge(intruder, fqdn)
    page = await registry.list(scope, ListQuery(archived=True))
    assert [item.fqdn for item in page.items] == [fqdn]


@pytest.mark.parametrize("ref", ["", "x" * 10_001, None, 12, ["a"], "name@", "na\x00me"])
async def test_hostile_references_are_clear_errors(
    life: CapabilityLifecycle, scope: Scope, ref: object
) -> None:
    with pytest.raises((InvalidInput, NotFound, VersionNotFound)):
        await life.archive(scope, ref)
    with pytest.raises((InvalidInput, NotFound)):
        await life.restore(scope, ref)


async def test_tagging_reads_no_version_s_code(
    registry: CapabilityRegistry,
    life: CapabilityLifecycle,
    scope: Scope,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Versions accumulate without end (a version of 100 KB code each): tagging one, and a
    new version that carries a tag, choose by numbers and tags, never by reading them all."""
    await _named(registry, scope, "big", "return 0")
    for number in range(1, 6):
        await registry.update_code(scope, "big", CapabilityDraft(code=f"return {number}"))

    async def every_version(*_: object, **__: object) -> None:
        raise AssertionError("every version's code was read")

    monkeypatch.setattr(SqlCapabilityRepository, "versions_of", every_version)
    tagged = await life.tag(scope, "big@v3", "v3.0.0")
    assert (tagged.version, tagged.version_tag, tagged.code) == (3, "v3.0.0", "return 2")
    updated = await registry.update_code(
        scope, "big", CapabilityDraft(code="return 9", version_tag="v9.0.0")
    )
    assert (updated.version, updated.version_tag) == (7, "v9.0.0")
    with pytest.raises(InvalidInput, match=r"v3\.0\.0 already exists"):
        await registry.update_code(
            scope, "big", CapabilityDraft(code="return 10", version_tag="v3.0.0")
        )
