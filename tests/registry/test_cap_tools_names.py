"""``cap_lookup``, ``cap_whois``, ``cap_rename``, ``cap_history`` (SPEC §6.2-6.7), both backends."""

from __future__ import annotations

from typing import Any

import pytest

from pml.errors import (
    InvalidFqdn,
    InvalidInput,
    InvalidName,
    NameTaken,
    NotFound,
    PermissionDenied,
    VersionNotFound,
)
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry
from pml.registry.tools import CapTools
from samples import make

pytestmark = pytest.mark.anyio

LOOKUP_FIELDS = {
    "fqdn",
    "display_name",
    "description",
    "usage_count",
    "success_rate",
    "routing",
    "type",
    "version",
    "visibility",
}
INVALID_NAME = 'Invalid capability name: "{}". Must be alphanumeric with underscores, hyphens, and colons only.'  # noqa: E501


async def whois(tools: CapTools, scope: Scope, fqdn: str) -> dict[str, Any]:
    return await tools.call("cap_whois", scope, {"fqdn": fqdn})


async def rename(tools: CapTools, scope: Scope, name: str, new_name: str) -> dict[str, Any]:
    return await tools.call("cap_rename", scope, {"name": name, "new_name": new_name})


# -- cap_lookup ---------------------------------------------------------------------------


async def test_lookup_returns_the_spec_fields_of_a_capability(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    record = await make(
        registry,
        scope,
        "return 1",
        name="fs:read_json",
        tools_used=["filesystem:read_file"],
        description="Reads a JSON file",
    )
    await registry.record_usage(record.fqdn, success=False, latency_ms=3.0)

    found = await tools.call("cap_lookup", scope, {"name": "fs:read_json"})

    assert set(found) >= LOOKUP_FIELDS
    assert {key: found[key] for key in LOOKUP_FIELDS} == {
        "fqdn": record.fqdn,
        "display_name": "fs:read_json",
        "description": "Reads a JSON file",
        "usage_count": 2,
        "success_rate": 0.5,
        "routing": "local",
        "type": "capability",
        "version": 1,
        "visibility": "project",
    }
    assert "code_url" not in found
    assert "deprecatedAlias" not in found
    assert (await tools.call("cap_lookup", scope, {"name": record.fqdn}))["fqdn"] == record.fqdn


async def test_lookup_of_a_seeded_mcp_server_gives_its_code_url(
    tools: CapTools, scope: Scope
) -> None:
    found = await tools.call("cap_lookup", scope, {"name": "mcp:filesystem"})

    assert found["type"] == "mcp-server"
    assert found["display_name"] == "mcp:filesystem"
    assert found["fqdn"].startswith("pml.std.mcp.filesystem.")
    assert found["code_url"] == "npx -y @modelcontextprotocol/server-filesystem"
    assert found["visibility"] == "public"
    assert found["routing"] == "local"


async def test_lookup_by_an_old_name_warns_with_a_deprecated_alias(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    record = await make(registry, scope, "return 1", name="fs:old")
    await rename(tools, scope, "fs:old", "fs:new")

    found = await tools.call("cap_lookup", scope, {"name": "fs:old"})

    assert found["fqdn"] == record.fqdn
    assert found["display_name"] == "fs:new"
    assert found["deprecatedAlias"] == {
        "alias": "fs:old",
        "currentName": "fs:new",
        "message": 'Deprecated: Using alias "fs:old" for capability "fs:new". Update your code.',
    }
    current = await tools.call("cap_lookup", scope, {"name": "fs:new"})
    assert "deprecatedAlias" not in current


async def test_lookup_version_specifiers_pick_a_version_or_fail_exactly(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    await make(registry, scope, "return 1", name="reader", tools_used=["filesystem:read"])
    await registry.update_code(scope, "reader", CapabilityDraft(code="return 2"))  # no tools

    async def lookup(name: str) -> dict[str, Any]:
        return await tools.call("cap_lookup", scope, {"name": name})

    assert ((await lookup("reader@v1"))["version"], (await lookup("reader@v1"))["routing"]) == (
        1,
        "local",
    )
    assert (await lookup("reader@v2"))["version"] == 2
    assert (await lookup("reader@latest"))["version"] == 2
    assert (await lookup("reader"))["routing"] == "cloud"
    with pytest.raises(VersionNotFound) as caught:
        await lookup("reader@v9")
    assert caught.value.code == "VERSION_NOT_FOUND"
    assert caught.value.message == "Version v9 not found for reader"
    with pytest.raises(VersionNotFound) as seeded:
        await lookup("mcp:filesystem@v9")
    assert seeded.value.message == "Version v9 not found for mcp:filesystem"
    assert (await lookup("mcp:filesystem@v1"))["version"] == 1


# -- cap_whois ----------------------------------------------------------------------------


async def test_whois_gives_the_full_record_its_aliases_and_version_count(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    record = await make(registry, scope, "return 1", name="fs:alpha")
    await rename(tools, scope, "fs:alpha", "fs:beta")
    await rename(tools, scope, "fs:beta", "fs:gamma")
    await registry.update_code(scope, "fs:gamma", CapabilityDraft(code="return 2"))

    found = await whois(tools, scope, record.fqdn)

    assert found["fqdn"] == record.fqdn
    assert found["display_name"] == "fs:gamma"
    assert found["code"] == "return 2"
    assert found["version"] == 2
    assert found["version_count"] == 2
    assert found["created_by"] == scope.user
    assert {alias["alias"] for alias in found["aliases"]} == {"fs:alpha", "fs:beta"}
    for old in ("fs:alpha", "fs:beta"):  # both point at the FQDN: no alias chain
        via = await tools.call("cap_lookup", scope, {"name": old})
        assert via["fqdn"] == record.fqdn
        assert via["deprecatedAlias"]["currentName"] == "fs:gamma"


@pytest.mark.parametrize(
    "fqdn", ["bad", "a.b.c.d", "acme.webapp.fs.read.XYZ1", "acme.webapp.fs.read.a7f3.x", ""]
)
async def test_whois_of_a_malformed_fqdn_is_invalid_fqdn(
    tools: CapTools, scope: Scope, fqdn: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        await tools.call("cap_whois", scope, {"fqdn": fqdn})
    assert caught.value.code == "INVALID_INPUT"
    if fqdn:
        assert isinstance(caught.value, InvalidFqdn)
        assert caught.value.message.startswith(f'Invalid FQDN format: "{fqdn}"')


async def test_another_orgs_project_capability_looks_exactly_like_a_missing_one(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    stranger = Scope("globex", "secret", "mallory")
    hidden = await make(registry, stranger, "return 1", name="fs:hidden")
    missing = "globex.secret.fs.hidden.ffff"

    errors: list[str] = []
    for fqdn in (hidden.fqdn, missing):
        with pytest.raises(NotFound) as caught:
            await tools.call("cap_whois", scope, {"fqdn": fqdn})
        errors.append(caught.value.message.replace(fqdn, "<fqdn>"))
        assert caught.value.to_dict() == {
            "code": "NOT_FOUND",
            "message": f"Capability not found: {fqdn}",
        }
    assert errors[0] == errors[1]
    for name in ("fs:hidden", hidden.fqdn, hidden.tool_name):
        with pytest.raises(NotFound):
            await tools.call("cap_lookup", scope, {"name": name})
    assert (await whois(tools, stranger, hidden.fqdn))["display_name"] == "fs:hidden"


# -- cap_rename ---------------------------------------------------------------------------


async def test_rename_shows_the_new_name_at_once_and_keeps_the_old_as_alias(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    record = await make(registry, scope, "return 1", tools_used=["filesystem:read"])
    old = record.display_name
    assert old.startswith("unnamed_")

    updated = await rename(tools, scope, old, "fs:read_json")

    assert updated["fqdn"] == record.fqdn
    assert updated["display_name"] == "fs:read_json"
    assert updated["named"] is True
    assert updated["tool_name"] == "mcp__fs__read_json"
    listed = await tools.call("cap_list", scope, {"named_only": True})
    assert [item["display_name"] for item in listed["items"]] == ["fs:read_json"]
    via_old = await tools.call("cap_lookup", scope, {"name": old})
    assert via_old["fqdn"] == record.fqdn
    assert via_old["deprecatedAlias"]["alias"] == old


async def test_rename_to_a_display_name_or_alias_in_use_is_name_taken(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    await make(registry, scope, "return 1", name="first")
    await rename(tools, scope, "first", "first_v2")
    second = await make(registry, scope, "return 2", name="second")
    before = await whois(tools, scope, second.fqdn)

    for taken in ("first_v2", "first"):  # a display name, then an alias
        with pytest.raises(NameTaken) as caught:
            await rename(tools, scope, "second", taken)
        assert caught.value.code == "NAME_TAKEN"
        assert (
            caught.value.message == f"Capability name '{taken}' already exists in scope acme.webapp"
        )
        assert await whois(tools, scope, second.fqdn) == before
    other = Scope("acme", "mobile", scope.user)  # uniqueness is per org/project
    elsewhere = await make(registry, other, "return 3", name="third")
    renamed = await rename(tools, other, "third", "first")
    assert renamed["fqdn"] == elsewhere.fqdn


@pytest.mark.parametrize("bad", ["bad name", "x;DROP", "а", "x" * 65, "fs:read\n", ":::"])
async def test_rename_to_a_hostile_name_is_invalid_name_and_changes_nothing(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope, bad: str
) -> None:
    record = await make(registry, scope, "return 1", name="fs:before")
    await rename(tools, scope, "fs:before", "fs:now")
    before = await whois(tools, scope, record.fqdn)

    with pytest.raises(InvalidName) as caught:
        await rename(tools, scope, "fs:now", bad)

    assert caught.value.code == "INVALID_NAME"
    assert caught.value.message == INVALID_NAME.format(bad)
    assert await whois(tools, scope, record.fqdn) == before


async def test_rename_to_an_empty_name_is_invalid_name_like_a_65_character_one(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    # "" and "x" * 65 break the same rule (^[A-Za-z0-9_:-]{1,64}$): same code, same message.
    record = await make(registry, scope, "return 1", name="fs:before")
    before = await whois(tools, scope, record.fqdn)

    with pytest.raises(InvalidName) as caught:
        await rename(tools, scope, "fs:before", "")

    assert caught.value.message == INVALID_NAME.format("")
    assert await whois(tools, scope, record.fqdn) == before


async def test_rename_changes_description_tags_visibility_and_routing(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    record = await make(registry, scope, "return 1", name="fs:tool", tools_used=["filesystem:x"])
    assert record.routing == "local"
    changes = {
        "description": "Now documented",
        "tags": ["json", "io"],
        "visibility": "org",
        "routing": "cloud",
    }

    updated = await tools.call("cap_rename", scope, {"name": "fs:tool", **changes})

    assert {key: updated[key] for key in changes} == changes
    assert updated["display_name"] == "fs:tool"
    assert updated["routing_override"] == "cloud"
    found = await tools.call("cap_lookup", scope, {"name": "fs:tool"})
    assert (found["routing"], found["visibility"], found["description"]) == (
        "cloud",
        "org",
        "Now documented",
    )
    tagged = await tools.call("cap_list", scope, {"tags": ["json", "io"]})
    assert [item["fqdn"] for item in tagged["items"]] == [record.fqdn]
    colleague_elsewhere = Scope("acme", "mobile", "zoe")
    assert (await whois(tools, colleague_elsewhere, record.fqdn))["visibility"] == "org"
    assert (await whois(tools, scope, record.fqdn))["aliases"] == []


async def test_renaming_another_orgs_public_capability_is_permission_denied(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    stranger = Scope("globex", "shared", "mallory")
    public = await make(registry, stranger, "return 1", name="fs:public", visibility="public")
    before = await whois(tools, stranger, public.fqdn)

    for name in ("fs:public", public.fqdn, "mcp:filesystem"):
        with pytest.raises(PermissionDenied) as caught:
            await rename(tools, scope, name, "fs:mine")
        assert caught.value.code == "PERMISSION_DENIED"
    with pytest.raises(PermissionDenied):
        await tools.call("cap_rename", scope, {"name": "fs:public", "description": "hijacked"})

    assert await whois(tools, stranger, public.fqdn) == before
    assert (await tools.call("cap_lookup", scope, {"name": "fs:public"}))["fqdn"] == public.fqdn


# -- cap_history --------------------------------------------------------------------------


async def test_history_lists_versions_newest_first_with_unified_diffs(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    await make(registry, scope, "x = 1\nreturn x", name="fs:calc")
    editor = Scope(scope.org, scope.project, "alice")
    await registry.update_code(editor, "fs:calc", CapabilityDraft(code="x = 2\nreturn x"))

    history = await tools.call("cap_history", scope, {"name": "fs:calc"})

    versions = history["versions"]
    assert [entry["version"] for entry in versions] == [2, 1]
    for entry in versions:
        assert set(entry) >= {
            "version",
            "version_tag",
            "updated_at",
            "updated_by",
            "change_summary",
            "diff",
        }
    newest, first = versions
    assert (newest["updated_by"], first["updated_by"]) == ("alice", scope.user)
    assert newest["updated_at"] >= first["updated_at"]
    assert first["change_summary"] == "created"
    assert newest["change_summary"] == "code changed: +1 -1 lines"
    diff_lines = newest["diff"].splitlines()
    assert diff_lines[0].startswith("--- fs:calc@v1")
    assert diff_lines[1].startswith("+++ fs:calc@v2")
    assert "-x = 1" in diff_lines
    assert "+x = 2" in diff_lines
    assert " return x" in diff_lines
    assert "+x = 1" in first["diff"].splitlines()
    assert "-" not in {line[:1] for line in first["diff"].splitlines()[2:]}


async def test_history_follows_aliases_and_refuses_a_version_specifier(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    record = await make(registry, scope, "return 1", name="fs:old")
    await rename(tools, scope, "fs:old", "fs:new")

    history = await tools.call("cap_history", scope, {"name": "fs:old"})

    assert (history["fqdn"], history["display_name"]) == (record.fqdn, "fs:new")
    assert [entry["version"] for entry in history["versions"]] == [1]
    with pytest.raises(InvalidInput):
        await tools.call("cap_history", scope, {"name": "fs:new@v1"})
    with pytest.raises(NotFound):
        await tools.call("cap_history", scope, {"name": "fs:missing"})


async def test_a_routing_override_applies_to_every_version_in_lookup(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    await registry.capture(
        scope,
        CapabilityDraft(code="return 1", name="reader", tools_used=["filesystem:read"]),
        latency_ms=1,
    )
    await tools.call("cap_rename", scope, {"name": "reader", "routing": "cloud"})
    latest = await tools.call("cap_lookup", scope, {"name": "reader"})
    first = await tools.call("cap_lookup", scope, {"name": "reader@v1"})
    assert (latest["routing"], first["routing"]) == ("cloud", "cloud")
