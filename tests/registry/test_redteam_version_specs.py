"""``name@spec`` reads one version's code, not every version's (red team: versions accumulate
without end, and a lookup of a capability with 1 000 versions of 100 KB code held ~100 MB)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event

from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry
from pml.storage.database import Database
from samples import make

pytestmark = pytest.mark.anyio

VERSIONS = 12
CODE_LINES = 200  # each version's code: ~3 KB, its marker on every line


def _code(version: int) -> str:
    return "\n".join(f"x_{version}_{i} = {i}" for i in range(CODE_LINES)) + f"\nreturn {version}"


async def _versions(registry: CapabilityRegistry, scope: Scope) -> None:
    await make(registry, scope, _code(1), name="hist")
    for version in range(2, VERSIONS + 1):
        await registry.update_code(scope, "hist", CapabilityDraft(code=_code(version)))


@pytest.mark.parametrize(
    ("spec", "expected"),
    [("@v3", 3), ("@2", 2), ("@2999-12-31", VERSIONS), ("@latest", VERSIONS), ("@v1", 1)],
)
async def test_a_version_specifier_reads_the_code_of_the_chosen_version_only(
    db: Database, registry: CapabilityRegistry, scope: Scope, spec: str, expected: int
) -> None:
    await _versions(registry, scope)
    reads: list[bool] = []  # per statement reading version code: is it one version's?

    def fetched_codes(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "FROM capability_versions" in statement and "capability_versions.code" in statement:
            reads.append("capability_versions.version = " in statement)

    event.listen(db.engine.sync_engine, "after_cursor_execute", fetched_codes)
    try:
        resolved = await registry.resolve(scope, f"hist{spec}")
    finally:
        event.remove(db.engine.sync_engine, "after_cursor_execute", fetched_codes)

    assert resolved.version.version == expected
    assert resolved.version.code == _code(expected)
    assert len(reads) <= 1  # the chosen row, or none when the record itself is current
    assert all(reads)  # never every version's code


async def test_every_version_is_still_selectable_by_its_number(
    registry: CapabilityRegistry, scope: Scope
) -> None:
    await _versions(registry, scope)

    for version in range(1, VERSIONS + 1):
        resolved = await registry.resolve(scope, f"hist@{version}")
        assert (resolved.version.version, resolved.version.code) == (version, _code(version))
