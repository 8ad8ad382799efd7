"""Pinned tool definitions and accepting a changed one, on both backends."""

from __future__ import annotations

import mcp_types as types
import pytest
import sqlalchemy as sa

from pml.storage.catalog_repo import CatalogStore, definition_hash, tool_definition
from pml.storage.database import Database
from pml.storage.tables import tool_schema

pytestmark = pytest.mark.anyio


def tool(name: str, description: str = "Does a thing.") -> types.Tool:
    return types.Tool(
        name=name,
        description=description,
        input_schema={"type": "object", "properties": {"x": {"type": "string"}}},
    )


async def test_the_first_definition_seen_is_pinned_with_its_content(db: Database) -> None:
    store = CatalogStore(db)
    await store.record_catalog("fs", [tool("read"), tool("write")])

    read, write = await store.stored_tools("fs")

    assert (read.name, write.name) == ("read", "write")
    assert read.pinned_definition == read.definition == tool_definition(tool("read"))
    assert read.pinned_hash == read.definition_hash == definition_hash(read.definition)
    assert read.flagged is False
    assert read.address == "fs:read"
    assert await store.tool_counts() == {"fs": 2}


async def test_a_changed_definition_keeps_the_pinned_one_to_compare_against(
    db: Database,
) -> None:
    store = CatalogStore(db)
    await store.record_catalog("fs", [tool("read")])
    await store.record_catalog("fs", [tool("read", "Now also uploads.")])
    await store.record_catalog("fs", [tool("read", "Now uploads everything.")])

    stored = await store.stored_tool("fs", "read")

    assert stored is not None
    assert stored.flagged is True
    assert stored.definition["description"] == "Now uploads everything."
    assert stored.pinned_definition == tool_definition(tool("read"))
    assert stored.pinned_hash == definition_hash(tool_definition(tool("read")))
    assert stored.definition_hash != stored.pinned_hash


async def test_accepting_pins_the_current_definition_and_clears_the_flag(db: Database) -> None:
    store = CatalogStore(db)
    await store.record_catalog("fs", [tool("read"), tool("write")])
    await store.record_catalog("fs", [tool("read", "Now also uploads."), tool("write")])
    changed = await store.stored_tool("fs", "read")
    assert changed is not None

    assert await store.accept("fs", "read", expected_hash=changed.definition_hash) is True

    accepted = await store.stored_tool("fs", "read")
    assert accepted is not None
    assert accepted.flagged is False
    assert accepted.pinned_hash == changed.definition_hash
    assert accepted.pinned_definition == changed.definition
    assert await store.flagged() == {}
    # Listed again as accepted: nothing to flag; a further change is shown against it.
    assert (
        await store.record_catalog("fs", [tool("read", "Now also uploads."), tool("write")]) == []
    )
    assert await store.record_catalog("fs", [tool("read", "Third."), tool("write")]) == ["read"]
    third = await store.stored_tool("fs", "read")
    assert third is not None
    assert third.pinned_definition == changed.definition


async def test_a_definition_that_changed_since_it_was_reviewed_is_not_accepted(
    db: Database,
) -> None:
    store = CatalogStore(db)
    await store.record_catalog("fs", [tool("read")])
    await store.record_catalog("fs", [tool("read", "Reviewed.")])
    seen = await store.stored_tool("fs", "read")
    assert seen is not None
    await store.record_catalog("fs", [tool("read", "Swapped after the review.")])

    assert await store.accept("fs", "read", expected_hash=seen.definition_hash) is False

    after = await store.stored_tool("fs", "read")
    assert after is not None
    assert after.flagged is True
    assert after.pinned_definition == tool_definition(tool("read"))


async def test_unknown_or_unstorable_names_are_not_accepted_and_raise_nothing(
    db: Database,
) -> None:
    store = CatalogStore(db)
    await store.record_catalog("fs", [tool("read")])

    for server, name in (
        ("fs", "nope"),
        ("other", "read"),
        ("fs\x00", "read"),
        ("fs", "read\x00"),
        ("x" * 500, "read"),
        ("fs", "y" * 5000),
        ("", ""),
    ):
        assert await store.accept(server, name) is False
        assert await store.stored_tool(server, name) is None
    assert await store.stored_tools("fs\x00") == []
    assert await store.stored_tools("z" * 1000) == []


async def test_going_back_to_the_pinned_definition_stays_flagged_until_accepted(
    db: Database,
) -> None:
    store = CatalogStore(db)
    await store.record_catalog("fs", [tool("read")])
    await store.record_catalog("fs", [tool("read", "Changed.")])

    assert await store.record_catalog("fs", [tool("read")]) == ["read"]

    back = await store.stored_tool("fs", "read")
    assert back is not None
    assert (back.flagged, back.definition_hash) == (True, back.pinned_hash)
    assert await store.accept("fs", "read", expected_hash=back.definition_hash) is True
    assert await store.flagged() == {}


async def test_a_row_migrated_without_its_pinned_definition_reads_as_none(db: Database) -> None:
    store = CatalogStore(db)
    await store.record_catalog("fs", [tool("read")])
    await store.record_catalog("fs", [tool("read", "Changed.")])
    async with db.transaction() as conn:  # as migration 0010 leaves a flagged row
        await conn.execute(sa.update(tool_schema).values(pinned_definition=None))

    stored = await store.stored_tool("fs", "read")
    assert stored is not None
    assert stored.pinned_definition is None
    assert stored.flagged is True

    assert await store.accept("fs", "read") is True
    accepted = await store.stored_tool("fs", "read")
    assert accepted is not None
    assert accepted.pinned_definition == tool_definition(tool("read", "Changed."))


async def test_an_accepted_tool_leaves_the_servers_last_report(db: Database) -> None:
    from pml.upstream.base import ServerStatus

    store = CatalogStore(db)
    await store.record_catalog("fs", [tool("read"), tool("write")])
    await store.record_catalog("fs", [tool("read", "Changed."), tool("write", "Changed too.")])
    await store.record_status(
        [ServerStatus("fs", "running", "stdio", 2, flagged_tools=("read", "write"))], "gw"
    )
    assert await store.accept("fs", "read")
    [report] = await store.load_status()
    assert report.flagged_tools == ("write",)
    assert await store.flagged() == {"fs": ["write"]}
