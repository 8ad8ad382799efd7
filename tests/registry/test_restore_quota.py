"""Restoring an archived capability cannot take a project past its quota, both backends."""

from __future__ import annotations

import anyio
import pytest

from pml.errors import LimitExceeded, NotFound, PmlError
from pml.registry.lifecycle import CapabilityLifecycle
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry
from pml.storage.database import Database

pytestmark = pytest.mark.anyio


def draft(n: int, name: str | None = None) -> CapabilityDraft:
    return CapabilityDraft(code=f"return {n}", tools_used=["filesystem:read"], name=name)


async def active_count(registry: CapabilityRegistry, scope: Scope) -> int:
    counts = await registry.counts(scope)
    return counts["named"] + counts["unnamed"]


async def test_archive_capture_restore_cannot_grow_a_project_past_its_quota(
    db: Database, scope: Scope
) -> None:
    registry = CapabilityRegistry(db, capabilities_per_project=2)
    lifecycle = CapabilityLifecycle(registry)
    await registry.capture(scope, draft(0, name="fs:zero"), latency_ms=1)
    await registry.capture(scope, draft(1, name="fs:one"), latency_ms=1)
    archived, _ = await lifecycle.archive(scope, "fs:one")
    await registry.capture(scope, draft(2, name="fs:two"), latency_ms=1)

    with pytest.raises(LimitExceeded) as caught:
        await lifecycle.restore(scope, "fs:one")

    assert caught.value.data == {"limit": "capabilities_per_project", "max": 2}
    assert "acme.webapp" in caught.value.message
    assert "capabilities_per_project" in caught.value.message
    assert "'fs:one' was not restored" in caught.value.message
    # nothing changed: still archived, its name still free, the count unchanged
    assert await active_count(registry, scope) == 2
    record = await lifecycle.archived(scope, archived.fqdn)
    assert record.archived_at is not None
    with pytest.raises(NotFound):
        await registry.resolve(scope, "fs:one")


async def test_a_restore_is_allowed_again_once_a_place_is_free(db: Database, scope: Scope) -> None:
    registry = CapabilityRegistry(db, capabilities_per_project=1)
    lifecycle = CapabilityLifecycle(registry)
    await registry.capture(scope, draft(0, name="fs:zero"), latency_ms=1)
    await lifecycle.archive(scope, "fs:zero")
    await registry.capture(scope, draft(1, name="fs:one"), latency_ms=1)
    with pytest.raises(LimitExceeded):
        await lifecycle.restore(scope, "fs:zero")
    await lifecycle.archive(scope, "fs:one")

    restored = await lifecycle.restore(scope, "fs:zero")

    assert (restored.record.display_name, restored.record.archived_at) == ("fs:zero", None)
    assert await active_count(registry, scope) == 1


async def test_restore_without_a_quota_or_below_it_still_works(db: Database, scope: Scope) -> None:
    for quota in (0, 3):
        project = Scope(scope.org, f"p{quota}", scope.user)
        registry = CapabilityRegistry(db, capabilities_per_project=quota)
        lifecycle = CapabilityLifecycle(registry)
        await registry.capture(project, draft(0, name="fs:zero"), latency_ms=1)
        await lifecycle.archive(project, "fs:zero")
        await registry.capture(project, draft(1, name="fs:one"), latency_ms=1)
        assert (await lifecycle.restore(project, "fs:zero")).record.archived_at is None
        assert await active_count(registry, project) == 2


async def test_concurrent_restores_into_the_last_free_place_let_only_one_in(
    db: Database, scope: Scope
) -> None:
    registry = CapabilityRegistry(db, capabilities_per_project=3)
    lifecycle = CapabilityLifecycle(registry)
    names = [f"fs:c{n}" for n in range(4)]
    for n, name in enumerate(names):
        await registry.capture(scope, draft(n, name=name), latency_ms=1)
        if n < 3:
            await lifecycle.archive(scope, name)
    # one active, three archived, quota 3: two places left for three restores
    outcomes: dict[str, str] = {}

    async def restore(name: str) -> None:
        try:
            await lifecycle.restore(scope, name)
            outcomes[name] = "restored"
        except PmlError as error:
            outcomes[name] = error.code

    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            for name in names[:3]:
                group.start_soon(restore, name)

    assert sorted(outcomes.values()) == ["LIMIT_EXCEEDED", "restored", "restored"]
    assert await active_count(registry, scope) == 3
