"""Discovery follows a capability's life: archived and purged ones are not found, restored
ones are again, and a deprecated one ranks below its replacement and says so."""

from __future__ import annotations

import pytest

from discovery.test_discovery_service import ME, REFERENCE, _model, learn
from pml.discovery.service import DiscoveryService
from pml.registry.lifecycle import CapabilityLifecycle
from pml.registry.models import RoutingRules
from pml.registry.service import CapabilityRegistry
from pml.storage.database import Database

pytestmark = pytest.mark.anyio


@pytest.fixture
def service(db: Database, registry: CapabilityRegistry) -> DiscoveryService:
    found = DiscoveryService(db, REFERENCE, _model(), routing=RoutingRules(), refresh_interval_s=0)
    registry.on_change(found.capability_changed)
    return found


async def _fqdns(service: DiscoveryService, intent: str) -> list[str]:
    results = await service.discover(ME, intent, kind="capability", limit=10)
    return [result["fqdn"] for result in results]


async def test_archived_and_purged_capabilities_leave_discovery_and_restored_ones_return(
    service: DiscoveryService, registry: CapabilityRegistry
) -> None:
    life = CapabilityLifecycle(registry)
    intent = "compress the nightly database backup"
    fqdn = await learn(registry, intent, "return 'gz'", name="backup:compress")
    assert await _fqdns(service, intent) == [fqdn]

    await life.archive(ME, "backup:compress")
    assert await _fqdns(service, intent) == []
    await life.restore(ME, fqdn)
    assert await _fqdns(service, intent) == [fqdn]
    await life.archive(ME, "backup:compress")
    await life.purge(ME, fqdn)
    assert await _fqdns(service, intent) == []
    # a full reload (another replica, a restart) agrees
    await service.refresh(force=True)
    assert await _fqdns(service, intent) == []


async def test_a_deprecated_capability_ranks_below_its_replacement_and_says_so(
    service: DiscoveryService, registry: CapabilityRegistry
) -> None:
    life = CapabilityLifecycle(registry)
    old = await learn(
        registry, "convert a markdown file to html", "return 'old'", name="docs:md_to_html"
    )
    new = await learn(
        registry, "render markdown documents as html pages", "return 'new'", name="docs:render"
    )
    # the old one matches this query better before it is deprecated
    assert (await _fqdns(service, "convert a markdown file to html"))[0] == old

    await life.deprecate(ME, "docs:md_to_html", replaced_by="docs:render")
    results = await service.discover(
        ME, "convert a markdown file to html", kind="capability", limit=10
    )

    assert [result["fqdn"] for result in results] == [new, old]
    assert results[1]["replacedBy"] == new
    assert "docs:render" in results[1]["deprecated"]
    assert "deprecated" not in results[0]
