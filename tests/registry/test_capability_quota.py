"""The capabilities-per-project quota (``[limits] capabilities_per_project``), both backends."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pml.config import LimitsSettings
from pml.errors import LimitExceeded
from pml.registry import naming
from pml.registry.lifecycle import CapabilityLifecycle
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry
from pml.storage.database import Database

pytestmark = pytest.mark.anyio


def draft(n: int, name: str | None = None) -> CapabilityDraft:
    return CapabilityDraft(code=f"return {n}", tools_used=["filesystem:read"], name=name)


async def test_a_project_at_its_quota_gets_no_new_capability_and_stores_nothing(
    db: Database, scope: Scope
) -> None:
    registry = CapabilityRegistry(db, capabilities_per_project=2)
    for n in range(2):
        assert (await registry.capture(scope, draft(n), latency_ms=1)).created
    with pytest.raises(LimitExceeded) as caught:
        await registry.capture(scope, draft(2), latency_ms=1)
    assert caught.value.data == {"limit": "capabilities_per_project", "max": 2}
    assert "acme.webapp" in caught.value.message
    assert "capabilities_per_project" in caught.value.message
    with pytest.raises(LimitExceeded):  # under a name too
        await registry.capture(scope, draft(3, name="fs:third"), latency_ms=1)
    counts = await registry.counts(scope)
    assert (counts["named"], counts["unnamed"]) == (0, 2)


async def test_known_code_still_counts_and_can_be_named_at_the_quota(
    db: Database, scope: Scope
) -> None:
    registry = CapabilityRegistry(db, capabilities_per_project=1)
    first = await registry.capture(scope, draft(0), latency_ms=1)
    again = await registry.capture(scope, draft(0, name="fs:zero"), latency_ms=2)
    assert (again.created, again.record.fqdn) == (False, first.record.fqdn)
    assert (again.record.display_name, again.record.usage_count) == ("fs:zero", 2)


async def test_other_projects_servers_and_archived_capabilities_do_not_count(
    db: Database, scope: Scope
) -> None:
    registry = CapabilityRegistry(db, capabilities_per_project=1)
    await registry.register_mcp_server(scope, "filesystem", code_url="npx fs")
    other = Scope(scope.org, "other", scope.user)
    await registry.capture(other, draft(0), latency_ms=1)
    first = await registry.capture(scope, draft(0), latency_ms=1)  # the server does not count
    with pytest.raises(LimitExceeded):
        await registry.capture(scope, draft(1), latency_ms=1)
    await CapabilityLifecycle(registry).archive(scope, first.record.fqdn)
    assert (await registry.capture(scope, draft(1), latency_ms=1)).created


async def test_zero_means_no_quota(db: Database, scope: Scope) -> None:
    registry = CapabilityRegistry(db, capabilities_per_project=0)
    for n in range(5):
        assert (await registry.capture(scope, draft(n), latency_ms=1)).created


async def test_a_named_save_is_refused_before_the_run_only_for_new_code(
    db: Database, scope: Scope
) -> None:
    registry = CapabilityRegistry(db, capabilities_per_project=1)
    held = await registry.capture(scope, draft(0), latency_ms=1)
    assert held.record.code_hash is not None
    new_hash = "f" * 64
    with pytest.raises(LimitExceeded) as caught:
        await naming.check_name_before_run(db, scope, "fs:new", new_hash, quota=1)
    assert caught.value.data["limit"] == "capabilities_per_project"
    # the code already has its capability: naming it creates nothing
    name = "fs:zero"
    assert await naming.check_name_before_run(db, scope, name, held.record.code_hash, quota=1)
    assert await naming.check_name_before_run(db, scope, name, new_hash, quota=2) == name
    assert await naming.check_name_before_run(db, scope, name, new_hash, quota=0) == name


@pytest.mark.parametrize("value", [-1, "many", 1.5, None, [3], {"n": 1}])
def test_a_quota_that_is_not_a_count_is_a_settings_error(value: object) -> None:
    with pytest.raises(ValidationError):
        LimitsSettings.model_validate({"capabilities_per_project": value})
