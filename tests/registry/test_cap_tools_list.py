"""``cap_list`` and argument checking of the ``cap_*`` tools (SPEC §6.5), on both backends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from pml.errors import InvalidInput, InvalidName, NotFound
from pml.registry.scope import Scope, Visibility
from pml.registry.service import CapabilityRegistry
from pml.registry.tools import CapTools
from pml.storage.database import Database
from samples import make

pytestmark = pytest.mark.anyio

INJECTIONS = ["x' OR '1'='1", "%'; DROP TABLE capability_records; --"]


async def names(tools: CapTools, scope: Scope, arguments: dict[str, Any]) -> list[str]:
    result = await tools.call("cap_list", scope, arguments)
    return [item["display_name"] for item in result["items"]]


async def row_count(db: Database) -> int:
    async with db.read() as conn:
        query = sa.text("SELECT count(*) FROM capability_records")
        return int((await conn.execute(query)).scalar_one())


async def test_empty_registry_lists_nothing_not_even_the_seeded_servers(
    tools: CapTools, scope: Scope
) -> None:
    assert await tools.call("cap_list", scope, {}) == {"items": [], "total": 0}
    assert await tools.call("cap_list", scope, None) == {"items": [], "total": 0}


async def test_pattern_is_a_glob_where_percent_and_underscore_are_literal(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    for i, name in enumerate(["fs:read", "fs:write", "db:read", "a_b", "axb", "ab", "1000"]):
        await make(registry, scope, f"return {i}", name=name)

    async def matching(pattern: str) -> list[str]:
        return sorted(await names(tools, scope, {"pattern": pattern}))

    assert await matching("fs:*") == ["fs:read", "fs:write"]
    assert await matching("*read") == ["db:read", "fs:read"]
    assert await matching("a?b") == ["a_b", "axb"]
    assert await matching("?b") == ["ab"]
    assert await matching("a_b") == ["a_b"]
    assert await matching("100*") == ["1000"]
    assert await matching("100%") == []
    assert await matching("A_B") == []  # case-sensitive on both backends
    result = await tools.call("cap_list", scope, {"pattern": "a_b"})
    assert result["total"] == 1


async def test_named_only_and_unnamed_only_split_the_listing(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    named = await make(registry, scope, "return 1", name="fs:named")
    unnamed = [await make(registry, scope, f"return {i}") for i in (2, 3)]

    assert await names(tools, scope, {"named_only": True}) == [named.display_name]
    assert sorted(await names(tools, scope, {"unnamed_only": True})) == sorted(
        record.display_name for record in unnamed
    )
    assert (await tools.call("cap_list", scope, {}))["total"] == 3


async def test_named_only_and_unnamed_only_together_are_invalid_input(
    tools: CapTools, scope: Scope
) -> None:
    with pytest.raises(InvalidInput) as caught:
        await tools.call("cap_list", scope, {"named_only": True, "unnamed_only": True})
    assert caught.value.code == "INVALID_INPUT"
    assert "named_only" in caught.value.message
    assert caught.value.data["fields"] == ["named_only", "unnamed_only"]


async def test_tags_filter_requires_every_tag(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    await make(registry, scope, "return 1", name="both", tags=["json", "fs"])
    await make(registry, scope, "return 2", name="json_only", tags=["json"])
    await make(registry, scope, "return 3", name="fs_only", tags=["fs"])

    assert sorted(await names(tools, scope, {"tags": ["json"]})) == ["both", "json_only"]
    assert await names(tools, scope, {"tags": ["json", "fs"]}) == ["both"]
    assert await names(tools, scope, {"tags": ["json", "nope"]}) == []
    assert len(await names(tools, scope, {"tags": []})) == 3


async def test_created_by_filters_on_the_creating_user(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    colleague = Scope(scope.org, scope.project, "alice")
    await make(registry, scope, "return 1", name="mine")
    await make(registry, colleague, "return 2", name="hers")

    assert await names(tools, scope, {"created_by": "alice"}) == ["hers"]
    assert await names(tools, scope, {"created_by": scope.user}) == ["mine"]
    assert await names(tools, scope, {"created_by": "nobody"}) == []


async def test_visibility_filter_and_what_other_scopes_see(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    levels: list[Visibility] = ["private", "project", "org", "public"]
    for i, visibility in enumerate(levels):
        await make(registry, scope, f"return {i}", name=f"v_{visibility}", visibility=visibility)

    assert await names(tools, scope, {"visibility": "private"}) == ["v_private"]
    assert await names(tools, scope, {"visibility": "org"}) == ["v_org"]
    colleague = Scope(scope.org, scope.project, "alice")
    assert sorted(await names(tools, colleague, {})) == ["v_org", "v_project", "v_public"]
    other_project = Scope(scope.org, "mobile", "zoe")
    assert sorted(await names(tools, other_project, {})) == ["v_org", "v_public"]
    other_org = Scope("globex", "webapp", "erwan")
    assert await names(tools, other_org, {}) == ["v_public"]
    assert await names(tools, other_org, {"visibility": "project"}) == []


async def test_sort_by_usage_defaults_to_most_used_first(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    uses = {"once": 1, "thrice": 3, "twice": 2}
    for i, (name, count) in enumerate(uses.items()):
        record = await make(registry, scope, f"return {i}", name=name)
        for _ in range(count - 1):
            await registry.record_usage(record.fqdn, success=True, latency_ms=1.0)

    listed = await tools.call("cap_list", scope, {})
    assert [item["display_name"] for item in listed["items"]] == ["thrice", "twice", "once"]
    assert [item["usage_count"] for item in listed["items"]] == [3, 2, 1]
    ascending = await names(tools, scope, {"sort_by": "usage", "order": "asc"})
    assert ascending == ["once", "twice", "thrice"]


async def test_sort_by_name_defaults_to_ascending_and_order_reverses_it(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    for i, name in enumerate(["mango", "apple", "zucchini"]):
        await make(registry, scope, f"return {i}", name=name)

    assert await names(tools, scope, {"sort_by": "name"}) == ["apple", "mango", "zucchini"]
    assert await names(tools, scope, {"sort_by": "name", "order": "desc"}) == [
        "zucchini",
        "mango",
        "apple",
    ]


async def test_sort_by_created_defaults_to_newest_first(db: Database, scope: Scope) -> None:
    ticks = iter(datetime(2025, 3, 1, tzinfo=UTC) + timedelta(minutes=n) for n in range(100))
    registry = CapabilityRegistry(db, clock=lambda: next(ticks))
    tools = CapTools(registry)
    for i, name in enumerate(["mango", "zucchini", "apple"]):  # creation order
        await make(registry, scope, f"return {i}", name=name)

    assert await names(tools, scope, {"sort_by": "created"}) == ["apple", "zucchini", "mango"]
    assert await names(tools, scope, {"sort_by": "created", "order": "asc"}) == [
        "mango",
        "zucchini",
        "apple",
    ]


async def test_limit_and_offset_page_through_an_unchanged_total(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    for i in range(5):
        await make(registry, scope, f"return {i}", name=f"n{i}")

    pages: list[list[str]] = []
    for offset in (0, 2, 4, 10):
        arguments = {"sort_by": "name", "limit": 2, "offset": offset}
        result = await tools.call("cap_list", scope, arguments)
        assert result["total"] == 5
        pages.append([item["display_name"] for item in result["items"]])
    assert pages == [["n0", "n1"], ["n2", "n3"], ["n4"], []]
    assert len(await names(tools, scope, {"limit": 500})) == 5


async def test_listed_items_never_include_the_code(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    record = await make(registry, scope, "return 41 + 1", name="answer")

    [item] = (await tools.call("cap_list", scope, {}))["items"]
    assert "code" not in item
    assert item["fqdn"] == record.fqdn
    assert item["display_name"] == "answer"
    assert item["type"] == "capability"
    whois = await tools.call("cap_whois", scope, {"fqdn": record.fqdn})
    assert whois["code"] == "return 41 + 1"


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"limit": "5"}, "limit"),
        ({"limit": 0}, "limit"),
        ({"limit": 501}, "limit"),
        ({"offset": -1}, "offset"),
        ({"named_only": "yes"}, "named_only"),
        ({"tags": "json"}, "tags"),
        ({"tags": [1]}, "tags"),
        ({"sort_by": "popularity"}, "sort_by"),
        ({"order": "up"}, "order"),
        ({"visibility": "everyone"}, "visibility"),
        ({"pattern": 3}, "pattern"),
        ({"pattern": "fs:\x00*"}, "pattern"),  # NUL: PostgreSQL would refuse the query
        ({"pattern": "x" * 1001}, "pattern"),
        ({"tags": ["json\x00"]}, "tags"),
        ({"tags": [f"t{i}" for i in range(65)]}, "tags"),
        ({"created_by": "ana\nbob"}, "created_by"),
        ({"bogus": 1}, "bogus"),
        (["pattern", "fs:*"], "arguments"),
        ("pattern=fs:*", "arguments"),
    ],
)
async def test_bad_list_arguments_are_invalid_input_naming_the_field(
    db: Database,
    registry: CapabilityRegistry,
    tools: CapTools,
    scope: Scope,
    arguments: object,
    field: str,
) -> None:
    await make(registry, scope, "return 1", name="kept")
    before = await row_count(db)

    with pytest.raises(InvalidInput) as caught:
        await tools.call("cap_list", scope, arguments)

    assert caught.value.code == "INVALID_INPUT"
    assert field in caught.value.message
    if field != "arguments":
        assert caught.value.data["fields"] == [field]
    assert await row_count(db) == before
    assert await names(tools, scope, {}) == ["kept"]


@pytest.mark.parametrize(
    ("tool", "arguments", "field"),
    [
        ("cap_lookup", {"name": ""}, "name"),
        ("cap_lookup", {"name": 123}, "name"),
        ("cap_lookup", {}, "name"),
        ("cap_lookup", {"name": "x", "extra": True}, "extra"),
        ("cap_whois", {"fqdn": None}, "fqdn"),
        ("cap_history", {"name": ["a"]}, "name"),
        ("cap_rename", {"name": "kept", "tags": "json"}, "tags"),
        ("cap_rename", {"name": "kept", "visibility": "everyone"}, "visibility"),
        ("cap_rename", {"name": "kept", "routing": "edge"}, "routing"),
        ("cap_rename", ["kept", "renamed"], "arguments"),
    ],
)
async def test_bad_arguments_of_the_other_tools_are_invalid_input_and_change_nothing(
    registry: CapabilityRegistry,
    tools: CapTools,
    scope: Scope,
    tool: str,
    arguments: object,
    field: str,
) -> None:
    record = await make(registry, scope, "return 1", name="kept")
    before = await tools.call("cap_whois", scope, {"fqdn": record.fqdn})

    with pytest.raises(InvalidInput) as caught:
        await tools.call(tool, scope, arguments)

    assert field in caught.value.message
    assert await tools.call("cap_whois", scope, {"fqdn": record.fqdn}) == before


async def test_a_ten_thousand_character_name_is_simply_not_found(
    tools: CapTools, scope: Scope
) -> None:
    with pytest.raises(NotFound) as caught:
        await tools.call("cap_lookup", scope, {"name": "n" * 10_000})
    assert caught.value.message.startswith("Capability not found: nnnn")
    assert len(caught.value.message) < 200


@pytest.mark.parametrize("hostile", INJECTIONS)
async def test_sql_injection_strings_match_nothing_and_drop_nothing(
    db: Database, registry: CapabilityRegistry, tools: CapTools, scope: Scope, hostile: str
) -> None:
    await make(registry, scope, "return 1", name="kept")
    before = await row_count(db)

    assert await tools.call("cap_list", scope, {"pattern": hostile}) == {"items": [], "total": 0}
    for tool in ("cap_lookup", "cap_history", "cap_rename"):
        with pytest.raises(NotFound) as caught:
            await tools.call(tool, scope, {"name": hostile})
        assert caught.value.message == f"Capability not found: {hostile}"
    with pytest.raises(InvalidName):
        await tools.call("cap_rename", scope, {"name": "kept", "new_name": hostile})

    assert await row_count(db) == before == 4  # one capability and the three seeded servers
    assert await names(tools, scope, {}) == ["kept"]


async def test_seed_spelling_cap_colon_list_is_the_same_tool(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    await make(registry, scope, "return 1", name="fs:one")
    await make(registry, scope, "return 2", name="db:two")
    arguments = {"pattern": "fs:*"}

    seed = await tools.call("cap:list", scope, arguments)
    assert seed == await tools.call("cap_list", scope, arguments)
    assert [item["display_name"] for item in seed["items"]] == ["fs:one"]
    lookup = await tools.call("cap:lookup", scope, {"name": "db:two"})
    assert lookup["display_name"] == "db:two"
    assert set(tools.names) == {"cap_list", "cap_lookup", "cap_whois", "cap_rename", "cap_history"}


@pytest.mark.parametrize("tool", ["cap_delete", "cap:drop", "pml_execute", "", "cap_list "])
async def test_an_unknown_tool_name_is_not_found(tools: CapTools, scope: Scope, tool: str) -> None:
    with pytest.raises(NotFound) as caught:
        await tools.call(tool, scope, {})
    assert caught.value.message == f"Unknown tool: {tool}"
