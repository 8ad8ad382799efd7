"""The capability lifecycle over the REST API: archive (refused while used, then forced),
restore (under a new name when taken), deprecate, tag and purge, each with the key's roles,
strict bodies and tenancy; an archived capability leaves a connected MCP client's tool list."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from pml.gateway.keys import ApiKeys
from pml.registry.models import CapabilityDraft
from pml.registry.scope import Scope
from policy.conftest import SCOPE
from web.conftest import WebHarness

pytestmark = pytest.mark.anyio

READ = 'return await mcp.filesystem.read_text_file(path="/data/config.json")'
READ_V2 = 'r = await mcp.filesystem.read_text_file(path="/data/config.json")\nreturn r["args"]'
READ_V3 = 'r = await mcp.filesystem.read_text_file(path="/data/config.json")\nreturn r["server"]'
DOUBLE = 'return {"double": args.get("n", 2) * 2}'


class Api:
    """Bearer-key requests to ``/api`` through the gateway's app."""

    def __init__(self, web: WebHarness) -> None:
        self.web = web

    async def send(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        key: str | None = None,
        raw: bytes | None = None,
    ) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key or self.web.admin_key}"}
        if raw is not None:
            return await self.web.http.request(method, path, content=raw, headers=headers)
        if body is None:
            return await self.web.http.request(method, path, headers=headers)
        return await self.web.http.request(method, path, json=body, headers=headers)

    async def ok(self, method: str, path: str, body: object = None, **kw: Any) -> dict[str, Any]:
        response = await self.send(method, path, body, **kw)
        assert response.status_code == 200, response.text
        data: dict[str, Any] = response.json()
        return data

    async def error(
        self, status: int, method: str, path: str, body: object = None, **kw: Any
    ) -> dict[str, Any]:
        response = await self.send(method, path, body, **kw)
        assert response.status_code == status, response.text
        error: dict[str, Any] = response.json()["error"]
        return error


async def _learn(web: WebHarness, name: str, code: str, **extra: Any) -> str:
    failed, answer = await web.pg.execute(code=code, intent=f"learn {name}", name=name, **extra)
    assert not failed, answer
    await web.pg.gateway.executor.flush()
    return str(answer["capabilityFqdn"])


async def _tool_names(web: WebHarness) -> set[str]:
    return {tool.name for tool in (await web.pg.client.list_tools()).tools}


async def _record(api: Api, fqdn: str) -> dict[str, Any]:
    return await api.ok("GET", f"/api/capabilities/{fqdn}")


async def _listed(api: Api) -> set[str]:
    page = await api.ok("GET", "/api/capabilities?limit=500")
    return {item["display_name"] for item in page["items"]}


async def test_archive_is_refused_while_used_then_forced_and_the_tool_leaves_the_client(
    web: WebHarness,
) -> None:
    api = Api(web)
    fqdn = await _learn(web, "fs:read_config", READ)
    user = await _learn(web, "fs:use_config", f'return await mcp["{fqdn}"]()')
    # a capability of another project uses it too: it is counted, never named
    other = Scope("acme", "ops", "olga")
    draft = CapabilityDraft(code="x = 1", tools_used=[fqdn], name="ops:secret_user")
    await web.pg.gateway.registry.capture(other, draft, latency_ms=1.0)
    assert "mcp__fs__read_config" in await _tool_names(web)

    refused = await api.error(400, "POST", "/api/capabilities/fs:read_config/archive", {})
    assert refused["code"] == "INVALID_INPUT"
    assert refused["field"] == "force"
    assert refused["dependants"] == [{"fqdn": user, "display_name": "fs:use_config"}]
    assert refused["hiddenDependants"] == 1
    assert "fs:use_config" in refused["message"]
    assert "1 you cannot see" in refused["message"]
    assert "ops:secret_user" not in str(refused)
    assert "acme.ops" not in str(refused)
    assert (await _record(api, fqdn))["archived"] is False
    assert "mcp__fs__read_config" in await _tool_names(web)

    done = await api.ok(
        "POST", f"/api/capabilities/{fqdn}/archive", {"force": True}, key=web.agent_key
    )
    assert done["archived"] is True
    assert done["archived_by"] == SCOPE.user
    assert done["dependants"] == [{"fqdn": user, "display_name": "fs:use_config"}]
    names = await _tool_names(web)
    assert "mcp__fs__read_config" not in names
    assert "mcp__fs__use_config" in names
    assert "fs:read_config" not in await _listed(api)
    # still shown by FQDN, as archived, and in the archived listing
    assert (await _record(api, fqdn))["archived"] is True
    archived = await api.ok("GET", "/api/capabilities?archived=true")
    assert [item["fqdn"] for item in archived["items"]] == [fqdn]
    [event] = await web.pg.events("CAPABILITY_ARCHIVED")
    assert event["decided_by"] == f"user:{SCOPE.user}"
    assert event["details"]["forced"] is True


async def test_restore_asks_for_a_new_name_when_the_old_one_was_taken(web: WebHarness) -> None:
    api = Api(web)
    fqdn = await _learn(web, "fs:read_config", READ)
    await api.ok("POST", "/api/capabilities/fs:read_config/archive")
    await _learn(web, "fs:read_config", DOUBLE)  # another capability takes the freed name

    taken = await api.error(409, "POST", f"/api/capabilities/{fqdn}/restore", {})
    assert taken["code"] == "NAME_TAKEN"
    assert "new_name" in taken["message"]
    assert (await _record(api, fqdn))["archived"] is True
    bad = await api.error(
        400, "POST", f"/api/capabilities/{fqdn}/restore", {"new_name": "no spaces"}
    )
    assert bad["code"] == "INVALID_NAME"

    restored = await api.ok(
        "POST", f"/api/capabilities/{fqdn}/restore", {"new_name": "fs:read_config_v1"}
    )
    assert restored["archived"] is False
    assert restored["display_name"] == "fs:read_config_v1"
    assert restored["aliasesDropped"] == []
    assert {"mcp__fs__read_config_v1", "mcp__fs__read_config"} <= await _tool_names(web)
    [event] = await web.pg.events("CAPABILITY_RESTORED")
    assert event["decided_by"] == "user:ana"


async def test_deprecate_names_the_replacement_and_undo_clears_it(web: WebHarness) -> None:
    api = Api(web)
    old = await _learn(web, "fs:read_config", READ)
    new = await _learn(web, "fs:load_config", READ_V2)
    path = "/api/capabilities/fs:read_config/deprecate"

    missing = await api.error(404, "POST", path, {"replaced_by": "fs:nothing_here"})
    assert missing["code"] == "NOT_FOUND"
    itself = await api.error(400, "POST", path, {"replaced_by": old})
    assert itself["field"] == "replaced_by"

    marked = await api.ok(
        "POST",
        path,
        {"replaced_by": "fs:load_config", "message": "Use fs:load_config.\nIt is faster."},
        key=web.agent_key,
    )
    assert marked["deprecated"] == "Use fs:load_config.\nIt is faster."
    assert marked["replacedBy"] == new
    assert marked["deprecated_by"] == SCOPE.user
    shown = await _record(api, old)
    assert shown["replacedBy"] == new
    assert shown["deprecated"] == "Use fs:load_config.\nIt is faster."

    undone = await api.ok("POST", path, {"undo": True})
    assert "deprecated" not in undone
    assert "replacedBy" not in undone
    record = await _record(api, old)
    assert record["deprecated_at"] is None
    assert record["replaced_by"] is None
    assert len(await web.pg.events("CAPABILITY_DEPRECATED")) == 2


async def test_tags_name_one_version_once(web: WebHarness) -> None:
    api = Api(web)
    fqdn = await _learn(web, "fs:read_config", READ)
    await _learn(web, "fs:read_config", READ_V2, update=True)
    await _learn(web, "fs:read_config", READ_V3, update=True)
    path = "/api/capabilities/fs:read_config/tags"

    first = await api.ok("POST", path, {"tag": "0.1.0", "version": 1}, key=web.agent_key)
    assert first["tagged"] == {"version": 1, "tag": "v0.1.0"}
    assert first["version"] == 3
    assert first["version_tag"] is None  # the current version is not the one tagged
    current = await api.ok("POST", path, {"tag": "v1.1.0"})
    assert current["tagged"] == {"version": 3, "tag": "v1.1.0"}
    assert current["version_tag"] == "v1.1.0"
    second = await api.ok("POST", path, {"tag": "v0.2.0", "version": 2})
    assert second["tagged"] == {"version": 2, "tag": "v0.2.0"}

    again = await api.error(400, "POST", path, {"tag": "v1.1.0", "version": 2})
    assert "already tagged v0.2.0" in again["message"]
    taken = await api.error(400, "POST", path, {"tag": "v0.1.0"})
    assert "immutable" in taken["message"]
    missing = await api.error(404, "POST", path, {"tag": "v2.0.0", "version": 7})
    assert missing["code"] == "VERSION_NOT_FOUND"
    assert (await api.error(400, "POST", path, {"tag": "latest"}))["code"] == "INVALID_INPUT"
    history = await web.pg.gateway.registry.history(SCOPE, fqdn)
    tags = [(v.version, v.version_tag) for v in history[1]]
    assert tags == [(3, "v1.1.0"), (2, "v0.2.0"), (1, "v0.1.0")]


async def test_a_version_is_tagged_by_its_number_even_when_its_major_spelling_selects_another(
    web: WebHarness,
) -> None:
    api = Api(web)
    await _learn(web, "fs:read_config", READ)
    await _learn(web, "fs:read_config", READ_V2, update=True)
    path = "/api/capabilities/fs:read_config/tags"
    await api.ok("POST", path, {"tag": "v1.1.0"})  # version 2 is now of major 1

    tagged = await api.ok("POST", path, {"tag": "v1.0.0", "version": 1})

    assert tagged["tagged"] == {"version": 1, "tag": "v1.0.0"}
    resolved = await web.pg.gateway.registry.resolve(SCOPE, "fs:read_config@v1.0.0")
    assert resolved.version.version == 1
    assert len(await web.pg.events("CAPABILITY_TAGGED")) == 2


async def test_purge_is_for_admin_keys_and_only_for_archived_capabilities(
    web: WebHarness,
) -> None:
    api = Api(web)
    fqdn = await _learn(web, "fs:read_config", READ)
    path = f"/api/capabilities/{fqdn}"

    active = await api.error(404, "DELETE", path)
    assert "archive it first" in active["message"]
    await api.ok("POST", f"{path}/archive")

    forbidden = await api.error(403, "DELETE", path, key=web.agent_key)
    assert forbidden["code"] == "FORBIDDEN"
    assert (await _record(api, fqdn))["archived"] is True  # still there

    purged = await api.ok("DELETE", path)
    assert purged["purged"] is True
    assert purged["fqdn"] == fqdn
    assert (await api.error(404, "GET", path))["code"] == "NOT_FOUND"
    assert (await api.error(404, "POST", f"{path}/restore"))["code"] == "NOT_FOUND"
    [event] = await web.pg.events("CAPABILITY_PURGED")
    assert event["decided_by"] == "user:ana"


HOSTILE: list[tuple[str, str, object]] = [
    ("POST", "archive", {"force": "yes"}),
    ("POST", "archive", {"force": 1}),
    ("POST", "archive", {"force": True, "why": "x"}),
    ("POST", "archive", [True]),
    ("POST", "archive", b"{not json"),
    ("POST", "archive", b"[" * 5000 + b"]" * 5000),
    ("POST", "archive", b'{"force": true, "pad": "' + b"x" * 5000 + b'"}'),
    ("POST", "archive?force=true", {}),
    ("POST", "deprecate", {"message": "a\x00b"}),
    ("POST", "deprecate", {"message": "x" * 1001}),
    ("POST", "deprecate", {"replaced_by": "fs:load\x1b[31m"}),
    ("POST", "deprecate", {"replaced_by": "y" * 300}),
    ("POST", "deprecate", {"undo": True, "message": "why"}),
    ("POST", "deprecate", {"undo": "true"}),
    ("POST", "restore", {"new_name": 42}),
    ("POST", "tags", {}),
    ("POST", "tags", {"tag": "v1.0.0", "version": True}),
    ("POST", "tags", {"tag": "v1.0.0", "version": 0}),
    ("POST", "tags", {"tag": "v1.0.0", "version": "1"}),
    ("POST", "tags", {"tag": "v1.0.0\n"}),
    ("DELETE", "", {"really": True}),
]


@pytest.mark.parametrize(("method", "route", "body"), HOSTILE)
async def test_hostile_bodies_are_refused_and_change_nothing(
    web: WebHarness, method: str, route: str, body: object
) -> None:
    api = Api(web)
    fqdn = await _learn(web, "fs:read_config", READ)
    await _learn(web, "fs:load_config", READ_V2)
    if method == "DELETE":
        await api.ok("POST", f"/api/capabilities/{fqdn}/archive")
    before = await _record(api, fqdn)
    path = f"/api/capabilities/{fqdn}" + (f"/{route}" if route else "")
    raw = body if isinstance(body, bytes) else None
    response = await api.send(method, path, None if raw else body, raw=raw)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "INVALID_INPUT"
    assert await _record(api, fqdn) == before


async def test_a_name_with_a_version_or_control_characters_is_refused(web: WebHarness) -> None:
    api = Api(web)
    await _learn(web, "fs:read_config", READ)
    versioned = await api.error(400, "POST", "/api/capabilities/fs:read_config@v1/archive")
    assert versioned["field"] == "name"
    control = await api.error(400, "POST", "/api/capabilities/fs%1Bread/archive")
    assert "control" in control["message"]
    assert "fs:read_config" in await _listed(api)


async def test_another_tenants_capability_is_not_found_and_unchanged(web: WebHarness) -> None:
    api = Api(web)
    fqdn = await _learn(web, "fs:read_config", READ)
    await api.ok("POST", "/api/capabilities/fs:read_config/deprecate", {"message": "old"})
    stranger, _ = await ApiKeys(web.pg.gateway.db).create("globex", "webapp", "gus", role="admin")
    before = await _record(api, fqdn)
    for method, suffix, body in [
        ("POST", "/archive", {"force": True}),
        ("POST", "/deprecate", {"undo": True}),
        ("POST", "/tags", {"tag": "v1.0.0"}),
        ("POST", "/restore", {}),
        ("DELETE", "", None),
    ]:
        for ref in (fqdn, "fs:read_config"):
            error = await api.error(
                404, method, f"/api/capabilities/{ref}{suffix}", body, key=stranger
            )
            assert error["code"] == "NOT_FOUND", (method, suffix)
    assert await _record(api, fqdn) == before


async def test_lifecycle_routes_need_a_key(web: WebHarness) -> None:
    fqdn = await _learn(web, "fs:read_config", READ)
    for method, path in [
        ("POST", f"/api/capabilities/{fqdn}/archive"),
        ("DELETE", f"/api/capabilities/{fqdn}"),
    ]:
        response = await web.http.request(method, path, json={"force": True})
        assert response.status_code == 401
    assert "fs:read_config" in await _listed(Api(web))


async def test_a_restore_past_the_projects_quota_is_409_and_changes_nothing(
    web: WebHarness,
) -> None:
    api = Api(web)
    fqdn = await _learn(web, "fs:read_config", READ)
    await api.ok("POST", "/api/capabilities/fs:read_config/archive")
    await _learn(web, "fs:double", DOUBLE)
    web.pg.gateway.registry.capabilities_per_project = 1  # the project is now full

    refused = await api.error(409, "POST", f"/api/capabilities/{fqdn}/restore", {})
    assert refused["code"] == "LIMIT_EXCEEDED"
    assert refused["limit"] == "capabilities_per_project"
    assert "'fs:read_config' was not restored" in refused["message"]
    assert (await _record(api, fqdn))["archived"] is True
    assert await web.pg.events("CAPABILITY_RESTORED") == []
