"""MCP servers in the registry (SPEC §6.8): seeded base servers, registration, versions, scope."""

from __future__ import annotations

import re

import pytest

from pml.errors import (
    InvalidInput,
    NameTaken,
    NotFound,
    PermissionDenied,
    PmlError,
    VersionNotFound,
)
from pml.registry.fqdn import Fqdn
from pml.registry.models import CapabilityRecord
from pml.registry.names import NAME_PATTERN
from pml.registry.scope import Scope, Visibility
from pml.registry.service import CapabilityDraft, CapabilityRegistry
from pml.registry.tools import CapTools

pytestmark = pytest.mark.anyio

TIME_URL = "uvx mcp-server-time"
TIME_URL_2 = "uvx mcp-server-time --local-timezone=UTC"
SAME_ORG = Scope("acme", "mobile", "lea")
OTHER_ORG = Scope("globex", "portal", "mia")
ANY_SCOPES = (
    Scope("acme", "webapp", "erwan"),
    SAME_ORG,
    OTHER_ORG,
    Scope("local", "default", "me"),
)


async def lookup(tools: CapTools, scope: Scope, name: str) -> dict[str, object]:
    return await tools.call("cap_lookup", scope, {"name": name})


async def lookup_error(tools: CapTools, scope: Scope, name: str) -> PmlError:
    with pytest.raises(PmlError) as caught:
        await lookup(tools, scope, name)
    return caught.value


async def time_server(
    registry: CapabilityRegistry,
    scope: Scope,
    *,
    visibility: Visibility = "project",
    description: str | None = None,
) -> CapabilityRecord:
    """Register ``mcp:time`` as ``TIME_URL`` for the first time and return its record."""
    result = await registry.register_mcp_server(
        scope, "time", code_url=TIME_URL, visibility=visibility, description=description
    )
    assert result.created
    return result.record


@pytest.mark.parametrize("server", ["filesystem", "shell", "sqlite"])
async def test_seeded_base_servers_resolve_by_name_for_any_scope(
    tools: CapTools, server: str
) -> None:
    for caller in ANY_SCOPES:
        found = await lookup(tools, caller, f"mcp:{server}")

        assert found["type"] == "mcp-server"
        assert found["display_name"] == f"mcp:{server}"
        assert re.fullmatch(rf"pml\.std\.mcp\.{server}\.[0-9a-f]{{4}}", str(found["fqdn"]))
        assert (found["routing"], found["visibility"], found["version"]) == ("local", "public", 1)
        code_url = found["code_url"]
        assert isinstance(code_url, str)
        assert server in code_url


async def test_seeded_server_accepts_v1_and_latest_specifiers(
    tools: CapTools, scope: Scope
) -> None:
    bare = await lookup(tools, scope, "mcp:filesystem")

    assert await lookup(tools, scope, "mcp:filesystem@v1") == bare
    assert await lookup(tools, scope, "mcp:filesystem@latest") == bare


async def test_a_missing_version_of_a_seeded_server_is_version_not_found(
    tools: CapTools, scope: Scope
) -> None:
    error = await lookup_error(tools, scope, "mcp:filesystem@v2")

    assert isinstance(error, VersionNotFound)
    assert error.message == "Version v2 not found for mcp:filesystem"


async def test_registering_a_server_creates_a_project_visible_mcp_record(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    result = await registry.register_mcp_server(scope, "time", code_url=TIME_URL)

    assert result.created
    found = await lookup(tools, scope, "mcp:time")
    assert re.fullmatch(r"acme\.webapp\.mcp\.time\.[0-9a-f]{4}", str(found["fqdn"]))
    assert found["fqdn"] == result.record.fqdn
    assert (found["type"], found["code_url"], found["version"]) == ("mcp-server", TIME_URL, 1)
    assert (found["visibility"], found["routing"]) == ("project", "local")


async def test_registering_the_same_command_again_creates_nothing(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    first = await time_server(registry, scope)

    again = await registry.register_mcp_server(scope, "time", code_url=TIME_URL)

    assert not again.created
    assert (again.record.fqdn, again.record.version) == (first.fqdn, 1)
    history = await tools.call("cap_history", scope, {"name": "mcp:time"})
    assert [entry["version"] for entry in history["versions"]] == [1]


async def test_a_changed_command_is_a_new_version_under_the_same_fqdn(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    first = await time_server(registry, scope)

    second = await registry.register_mcp_server(scope, "time", code_url=TIME_URL_2)

    assert not second.created
    assert (second.record.fqdn, second.record.version) == (first.fqdn, 2)
    latest = await lookup(tools, scope, "mcp:time")
    assert (latest["fqdn"], latest["version"], latest["code_url"]) == (
        first.fqdn,
        2,
        TIME_URL_2,
    )
    old = await lookup(tools, scope, "mcp:time@v1")
    assert (old["version"], old["code_url"]) == (1, TIME_URL)
    history = await tools.call("cap_history", scope, {"name": "mcp:time"})
    assert [entry["version"] for entry in history["versions"]] == [2, 1]
    diff = history["versions"][0]["diff"]
    assert f"-{TIME_URL}\n" in diff
    assert f"+{TIME_URL_2}\n" in diff


async def test_an_org_server_resolves_by_fqdn_in_another_project_of_the_same_org(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    record = await time_server(registry, scope, visibility="org")

    found = await lookup(tools, SAME_ORG, record.fqdn)

    assert (found["fqdn"], found["type"], found["visibility"]) == (record.fqdn, "mcp-server", "org")
    assert found["code_url"] == TIME_URL


async def test_an_org_server_is_not_found_from_another_org_exactly_like_a_missing_one(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    record = await time_server(registry, scope, visibility="org")
    missing = "acme.webapp.mcp.nothing.abcd"

    for ref in (record.fqdn, "mcp:time", missing):
        error = await lookup_error(tools, OTHER_ORG, ref)
        assert isinstance(error, NotFound)
        assert error.to_dict() == {"code": "NOT_FOUND", "message": f"Capability not found: {ref}"}
    with pytest.raises(NotFound):
        await tools.call("cap_whois", OTHER_ORG, {"fqdn": record.fqdn})


async def test_a_public_server_resolves_by_name_from_another_org(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    record = await time_server(registry, scope, visibility="public")

    found = await lookup(tools, OTHER_ORG, "mcp:time")

    assert (found["fqdn"], found["visibility"], found["code_url"]) == (
        record.fqdn,
        "public",
        TIME_URL,
    )


async def test_unsafe_characters_in_a_server_name_become_a_safe_fqdn_component(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    record = (await registry.register_mcp_server(scope, "my server/1", code_url="npx srv")).record

    parsed = Fqdn.parse(record.fqdn)
    assert (parsed.org, parsed.project, parsed.namespace) == ("acme", "webapp", "mcp")
    assert parsed.action == "my_server_1"
    assert record.display_name == "mcp:my_server_1"
    assert (await lookup(tools, scope, "mcp:my_server_1"))["fqdn"] == record.fqdn


async def test_a_long_server_name_still_gives_a_valid_display_name_on_every_backend(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    # Display names are at most 64 characters (§6.2); "mcp:" + a 64-character name is 68.
    try:
        result = await registry.register_mcp_server(scope, "x" * 64, code_url="uvx long")
    except InvalidInput:
        return  # refusing the name cleanly is acceptable too
    name = result.record.display_name
    assert NAME_PATTERN.fullmatch(name), f"{len(name)}-character display name {name!r}"
    assert (await lookup(tools, scope, name))["fqdn"] == result.record.fqdn


@pytest.mark.parametrize("name", ["", "   "])
async def test_an_empty_server_name_is_invalid_input_and_stores_nothing(
    registry: CapabilityRegistry, scope: Scope, name: str
) -> None:
    before = await registry.counts(scope)

    with pytest.raises(InvalidInput):
        await registry.register_mcp_server(scope, name, code_url=TIME_URL)

    assert await registry.counts(scope) == before


async def test_a_capability_already_named_mcp_time_makes_the_server_name_taken(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    await registry.capture(scope, CapabilityDraft(code="return 1", name="mcp:time"), latency_ms=1)
    before = await registry.counts(scope)

    with pytest.raises(NameTaken) as caught:
        await registry.register_mcp_server(scope, "time", code_url=TIME_URL)

    assert caught.value.message == "Capability name 'mcp:time' already exists in scope acme.webapp"
    assert await registry.counts(scope) == before
    found = await lookup(tools, scope, "mcp:time")
    assert (found["type"], found.get("code_url")) == ("capability", None)


async def test_cap_list_never_lists_mcp_servers(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    await time_server(registry, scope)
    await registry.register_mcp_server(scope, "web", code_url="uvx web", visibility="public")

    for caller, arguments in (
        (scope, {}),
        (scope, {"pattern": "mcp:*"}),
        (scope, {"tags": ["mcp-server"]}),
        (OTHER_ORG, {"named_only": True}),
    ):
        assert await tools.call("cap_list", caller, arguments) == {"items": [], "total": 0}
    assert (await registry.counts(scope))["mcp_servers"] == 5  # 3 seeded + 2 registered


async def test_renaming_an_mcp_server_is_refused_and_changes_nothing(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    record = await time_server(registry, scope, description="Clock")

    with pytest.raises(InvalidInput):
        await tools.call(
            "cap_rename",
            scope,
            {"name": "mcp:time", "new_name": "mcp:clock", "description": "Changed"},
        )

    whois = await tools.call("cap_whois", scope, {"fqdn": record.fqdn})
    assert (whois["display_name"], whois["description"]) == ("mcp:time", "Clock")
    assert (whois["aliases"], whois["version_count"]) == ([], 1)
    assert isinstance(await lookup_error(tools, scope, "mcp:clock"), NotFound)


async def test_an_mcp_server_description_can_be_changed(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    await time_server(registry, scope)

    updated = await tools.call(
        "cap_rename", scope, {"name": "mcp:time", "description": "Tells the time"}
    )

    assert (updated["display_name"], updated["description"]) == ("mcp:time", "Tells the time")
    found = await lookup(tools, scope, "mcp:time")
    assert (found["description"], found["code_url"], found["version"]) == (
        "Tells the time",
        TIME_URL,
        1,
    )


async def test_a_scope_cannot_change_a_seeded_base_server(tools: CapTools, scope: Scope) -> None:
    with pytest.raises(PermissionDenied):
        await tools.call("cap_rename", scope, {"name": "mcp:shell", "description": "Mine now"})

    assert (await lookup(tools, OTHER_ORG, "mcp:shell"))["description"] != "Mine now"


async def test_registering_again_with_new_routing_updates_it_without_a_new_version(
    registry: CapabilityRegistry, scope: Scope
) -> None:
    first = await registry.register_mcp_server(scope, "time", code_url="uvx mcp-server-time")
    again = await registry.register_mcp_server(
        scope, "time", code_url="uvx mcp-server-time", routing="cloud"
    )
    found = (await registry.resolve(scope, "mcp:time")).record
    assert (again.created, found.routing, found.version) == (False, "cloud", 1)
    assert found.fqdn == first.record.fqdn


@pytest.mark.parametrize("code_url", ["", "   ", "x" * 4001])
async def test_an_empty_or_huge_command_is_invalid_input_and_stores_nothing(
    registry: CapabilityRegistry, scope: Scope, code_url: str
) -> None:
    with pytest.raises(InvalidInput):
        await registry.register_mcp_server(scope, "time", code_url=code_url)
    with pytest.raises(NotFound):
        await registry.resolve(scope, "mcp:time")
