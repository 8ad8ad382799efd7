"""The stored tool catalog (pinning) and the reported server states, on both backends."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import mcp_types as types
import pytest

from pml.storage.catalog_repo import CatalogStore, definition_hash, tool_definition
from pml.storage.database import Database
from pml.upstream.base import ServerStatus

pytestmark = pytest.mark.anyio


def tool(name: str, description: str = "Does a thing.", **schema: object) -> types.Tool:
    return types.Tool(name=name, description=description, input_schema={"type": "object", **schema})


async def test_first_sight_pins_and_loads_the_same_definitions(db: Database) -> None:
    store = CatalogStore(db)
    tools = [tool("b_tool", properties={"x": {"type": "string"}}), tool("a_tool")]

    assert await store.record_catalog("fs", tools) == []

    loaded = await store.load_catalog("fs")
    assert [t.name for t in loaded] == ["a_tool", "b_tool"]
    assert loaded[1] == tools[0]
    assert await store.flagged() == {}


async def test_a_changed_definition_is_kept_flagged_and_logged(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    store = CatalogStore(db)
    await store.record_catalog("fs", [tool("read"), tool("write")])

    with caplog.at_level(logging.WARNING, logger="pml.storage.catalog_repo"):
        flagged = await store.record_catalog(
            "fs", [tool("read", "Now also uploads."), tool("write")]
        )

    assert flagged == ["read"]
    assert "fs:read changed its definition" in caplog.text
    assert (await store.load_catalog("fs"))[0].description == "Now also uploads."
    assert await store.flagged() == {"fs": ["read"]}
    assert await store.flagged("other") == {}
    # Seen again unchanged: still flagged, not reported as newly changed.
    assert (
        await store.record_catalog("fs", [tool("read", "Now also uploads."), tool("write")]) == []
    )
    assert await store.flagged("fs") == {"fs": ["read"]}


async def test_tools_that_disappear_are_deleted_and_servers_are_separate(db: Database) -> None:
    store = CatalogStore(db)
    await store.record_catalog("a", [tool("one"), tool("two")])
    await store.record_catalog("b", [tool("one", "Other server.")])

    await store.record_catalog("a", [tool("two")])

    assert [t.name for t in await store.load_catalog("a")] == ["two"]
    assert [t.description for t in await store.load_catalog("b")] == ["Other server."]
    assert await store.flagged() == {}


async def test_a_tool_name_too_long_to_store_is_skipped(db: Database) -> None:
    store = CatalogStore(db)
    await store.record_catalog("a", [tool("x" * 300), tool("ok")])
    assert [t.name for t in await store.load_catalog("a")] == ["ok"]


def test_the_definition_hash_ignores_key_order_but_not_content() -> None:
    first = tool_definition(tool("t", properties={"a": {"type": "string"}, "b": {}}))
    reordered = {key: first[key] for key in reversed(list(first))}
    assert definition_hash(first) == definition_hash(reordered)
    assert definition_hash(first) != definition_hash(tool_definition(tool("t", "Other.")))
    assert len(definition_hash(first)) == 64


async def test_status_is_upserted_and_loaded_as_last_reported(db: Database) -> None:
    store = CatalogStore(db)
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    await store.record_status(
        [ServerStatus("time", "starting", "stdio", 0, updated_at=when)], reported_by="h:1"
    )
    await store.record_status(
        [
            ServerStatus("time", "running", "stdio", 2, 1.5, flagged_tools=("x",), updated_at=when),
            ServerStatus("web", "failed", "http", 0, last_error="cannot reach it"),
        ],
        reported_by="h:2",
    )

    time, web = await store.load_status()
    assert (time.name, time.state, time.tool_count, time.last_latency_ms) == (
        "time",
        "running",
        2,
        1.5,
    )
    assert time.flagged_tools == ("x",)
    assert time.updated_at == when
    assert time.extra["reported_by"] == "h:2"
    assert (web.state, web.transport, web.last_error) == ("failed", "http", "cannot reach it")
    assert web.updated_at is not None
