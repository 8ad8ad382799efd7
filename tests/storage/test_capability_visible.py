"""Many capability records in one scoped read (the dashboard's search), on both backends."""

from __future__ import annotations

import pytest

from pml.errors import InvalidInput
from pml.registry.models import CapabilityDraft
from pml.registry.scope import Scope
from pml.registry.service import CapabilityRegistry
from pml.storage.capability_repo import MAX_VISIBLE_FQDNS, find_visible
from pml.storage.database import Database

pytestmark = pytest.mark.anyio


async def test_find_visible_reads_many_records_within_the_scope(db: Database) -> None:
    registry = CapabilityRegistry(db)
    mine = Scope("acme", "webapp", "erwan")
    theirs = Scope("globex", "webapp", "gus")
    kept = await registry.capture(mine, CapabilityDraft(code="return 1"), latency_ms=1.0)
    private = await registry.capture(
        theirs, CapabilityDraft(code="return 2", visibility="private"), latency_ms=1.0
    )
    fqdns = [kept.record.fqdn, private.record.fqdn, "acme.webapp.no.such.abcd", kept.record.fqdn]
    found = await find_visible(db, mine, fqdns)
    assert list(found) == [kept.record.fqdn]
    assert found[kept.record.fqdn].code == "return 1"
    assert await find_visible(db, mine, []) == {}
    assert list(await find_visible(db, theirs, fqdns)) == [private.record.fqdn]
    with pytest.raises(InvalidInput):
        await find_visible(db, mine, [f"a.b.c.d.{i:04x}" for i in range(MAX_VISIBLE_FQDNS + 1)])
