"""``GET /api/capabilities[/{fqdn}]`` on a real uvicorn with API keys, on SQLite and
PostgreSQL: the same answers as ``cap_list`` / ``cap_whois`` over ``/mcp`` with the same key,
tenants kept apart, hostile parameters refused."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from gateway.upstreams import data_of, error_of, gateway_settings
from pml.errors import StorageError
from pml.gateway.http import running_http
from pml.gateway.keys import ApiKeys
from pml.gateway.server import Gateway, open_gateway
from pml.registry.tools import CapTools
from pml.upstream.pool import ClientPool

pytestmark = pytest.mark.anyio

TIMEOUT = httpx.Timeout(10.0)
TENANTS = {  # who: (org, project, user)
    "erwan": ("acme", "webapp", "erwan"),
    "zoe": ("acme", "webapp", "zoe"),
    "mobile": ("acme", "mobile", "erwan"),
    "globex": ("globex", "site", "gina"),
}
ADD_CODE = 'return {"sum": args.get("a", 1) + args.get("b", 2)}'


@dataclass
class Served:
    url: str
    gateway: Gateway
    keys: dict[str, str]
    mcp: dict[str, Client]
    http: httpx.AsyncClient
    fqdns: dict[str, str] = field(default_factory=dict[str, str])

    async def get(self, key: str | None, path: str = "/api/capabilities") -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
        return await self.http.get(f"{self.url}{path}", headers=headers)

    async def ok(self, who: str, path: str = "/api/capabilities") -> dict[str, Any]:
        response = await self.get(self.keys[who], path)
        assert response.status_code == 200, (path, response.text)
        assert response.headers["content-type"] == "application/json"
        return response.json()

    async def tool(self, who: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The answer of one of the gateway's tools over ``/mcp`` with ``who``'s key."""
        return data_of(await self.mcp[who].call_tool(name, arguments))

    async def tool_error(self, who: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return error_of(await self.mcp[who].call_tool(name, arguments))

    async def run(self, who: str, code: str, name: str | None = None, **changes: Any) -> str:
        """A capability made by ``pml_execute`` (then ``cap_rename`` for ``changes``)."""
        arguments = {"intent": "a test snippet", "code": code}
        if name is not None:
            arguments["name"] = name
        answer = await self.tool(who, "pml_execute", arguments)
        assert answer["status"] == "success", answer
        if changes:
            await self.tool(who, "cap_rename", {"name": answer["capabilityFqdn"], **changes})
        self.fqdns[name or "unnamed"] = answer["capabilityFqdn"]
        return answer["capabilityFqdn"]


@pytest.fixture
async def served(database_url: str, pool: ClientPool) -> AsyncGenerator[Served]:
    settings = gateway_settings(database_url, expose_upstream=False)
    async with open_gateway(settings, pool=pool) as gateway:
        api_keys = ApiKeys(gateway.db)
        keys = {who: (await api_keys.create(*parts))[0] for who, parts in TENANTS.items()}
        async with running_http(gateway) as url, AsyncExitStack() as stack:
            clients: dict[str, Client] = {}
            for who, key in keys.items():
                session = await stack.enter_async_context(
                    create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
                )
                transport = streamable_http_client(f"{url}/mcp", http_client=session)
                clients[who] = await stack.enter_async_context(Client(transport))
            http = await stack.enter_async_context(httpx.AsyncClient(timeout=TIMEOUT))
            yield Served(url, gateway, keys, clients, http)


@pytest.fixture
async def seeded(served: Served) -> Served:
    """Capabilities of every kind, made through ``pml_execute`` by three users."""
    await served.run("erwan", ADD_CODE, "math:add", tags=["math", "demo"])
    await served.run("erwan", "return 6 * 7")
    await served.run("erwan", 'return "fs one"', "fs:read_one", tags=["io"])
    await served.run(
        "erwan", 'return "fs two"', "fs:read_two", tags=["io", "json"], visibility="public"
    )
    await served.run("erwan", 'return "mine"', "my:private", visibility="private")
    await served.run("erwan", 'return "org wide"', "org:shared", visibility="org")
    await served.run("zoe", 'return "zoe"', "zoe:hello")
    await served.run("zoe", 'return "zoe only"', "zoe:secret", visibility="private")
    await served.run("globex", 'return "globex"', "g:only")
    for args in ({}, {"b": 5}):  # math:add: three uses (with its capture), the others one
        run = {"intent": "add", "capability": "math:add", "args": args}
        assert (await served.tool("erwan", "pml_execute", run))["status"] == "success"
    await served.gateway.executor.flush()
    return served


def names(page: dict[str, Any]) -> list[str]:
    return [item["display_name"] for item in page["items"]]


CREATED = ["math:add", "unnamed", "fs:read_one", "fs:read_two", "my:private", "org:shared"]
ERWAN_SEES = [*CREATED, "zoe:hello"]

# (query string, the same cap_list arguments, the display names expected: a list when the
# order is part of the answer, a set otherwise; "unnamed" stands for the unnamed one)
FILTER_CASES: list[tuple[str, dict[str, Any], list[str] | set[str]]] = [
    ("", {}, set(ERWAN_SEES)),
    ("?pattern=fs:*", {"pattern": "fs:*"}, {"fs:read_one", "fs:read_two"}),
    ("?pattern=math%3A%3F%3F%3F", {"pattern": "math:???"}, ["math:add"]),
    ("?pattern=%E6%97%A5%E6%9C%AC*", {"pattern": "日本*"}, []),
    ("?named_only=true", {"named_only": True}, set(ERWAN_SEES) - {"unnamed"}),
    ("?unnamed_only=1", {"unnamed_only": True}, ["unnamed"]),
    (
        "?named_only=false&unnamed_only=0",
        {"named_only": False, "unnamed_only": False},
        set(ERWAN_SEES),
    ),
    ("?tags=io", {"tags": ["io"]}, {"fs:read_one", "fs:read_two"}),
    ("?tags=io,json", {"tags": ["io", "json"]}, ["fs:read_two"]),
    ("?tags=json&tags=io", {"tags": ["json", "io"]}, ["fs:read_two"]),
    ("?tags=nope", {"tags": ["nope"]}, []),
    ("?created_by=zoe", {"created_by": "zoe"}, ["zoe:hello"]),
    ("?created_by=j%C3%B3zef", {"created_by": "józef"}, []),
    ("?visibility=private", {"visibility": "private"}, ["my:private"]),
    ("?visibility=org", {"visibility": "org"}, ["org:shared"]),
    ("?visibility=public", {"visibility": "public"}, ["fs:read_two"]),
    ("?sort_by=name", {"sort_by": "name"}, sorted(ERWAN_SEES)),
    ("?sort_by=name&order=desc", {"sort_by": "name", "order": "desc"}, sorted(ERWAN_SEES)[::-1]),
    ("?sort_by=created&order=asc", {"sort_by": "created", "order": "asc"}, ERWAN_SEES),
    ("?sort_by=usage&limit=1", {"sort_by": "usage", "limit": 1}, ["math:add"]),
    (
        "?pattern=*:*&named_only=true&tags=io&sort_by=name&order=asc&limit=1&offset=1",
        {
            "pattern": "*:*",
            "named_only": True,
            "tags": ["io"],
            "sort_by": "name",
            "order": "asc",
            "limit": 1,
            "offset": 1,
        },
        ["fs:read_two"],
    ),
]


async def test_every_filter_answers_what_cap_list_answers_for_the_same_key(
    seeded: Served,
) -> None:
    unnamed = (await seeded.ok("erwan", "/api/capabilities?unnamed_only=true"))["items"][0]
    assert unnamed["fqdn"] == seeded.fqdns["unnamed"]
    for query, arguments, expected in FILTER_CASES:
        page = await seeded.ok("erwan", f"/api/capabilities{query}")
        assert page == await seeded.tool("erwan", "cap_list", arguments), query
        shown = ["unnamed" if name == unnamed["display_name"] else name for name in names(page)]
        if isinstance(expected, set):
            assert set(shown) == expected, query
            assert page["total"] == len(expected), query
        else:
            assert shown == expected, query
    everything = await seeded.ok("erwan")
    assert everything["total"] == 7
    assert everything["items"][0]["display_name"] == "math:add"  # most used first
    assert everything["items"][0]["usage_count"] == 3
    assert all("code" not in item for item in everything["items"])


async def test_pages_of_limit_and_offset_add_up_to_the_whole_list(seeded: Served) -> None:
    whole = await seeded.ok("erwan", "/api/capabilities?sort_by=name&limit=500")
    seen: list[dict[str, Any]] = []
    for offset in range(0, 10, 3):
        query = f"?sort_by=name&limit=3&offset={offset}"
        page = await seeded.ok("erwan", f"/api/capabilities{query}")
        same = {"sort_by": "name", "limit": 3, "offset": offset}
        assert page == await seeded.tool("erwan", "cap_list", same)
        assert page["total"] == 7
        seen += page["items"]
    assert seen == whole["items"]
    assert len(seen) == 7
    default = await seeded.ok("erwan")
    assert len(default["items"]) == 7  # default limit 50


async def test_whois_answers_what_cap_whois_answers(seeded: Served) -> None:
    await seeded.tool("erwan", "cap_rename", {"name": "math:add", "new_name": "math:plus"})
    fqdn = seeded.fqdns["math:add"]
    whois = await seeded.ok("erwan", f"/api/capabilities/{fqdn}")
    assert whois == await seeded.tool("erwan", "cap_whois", {"fqdn": fqdn})
    assert whois["display_name"] == "math:plus"
    assert [alias["alias"] for alias in whois["aliases"]] == ["math:add"]
    assert whois["code"] == ADD_CODE
    assert whois["version_count"] == 1
    assert whois["tool_usage"]["calls"] == 2  # the two runs by name


async def test_another_tenant_sees_nothing_that_is_not_shared_with_it(seeded: Served) -> None:
    add, missing = seeded.fqdns["math:add"], "acme.webapp.math.add.ffff"
    for who in ("globex", "mobile"):
        page = await seeded.ok(who, "/api/capabilities?pattern=math:*")
        assert page == {"items": [], "total": 0}
        assert page == await seeded.tool(who, "cap_list", {"pattern": "math:*"})
        for fqdn in (add, missing):
            response = await seeded.get(seeded.keys[who], f"/api/capabilities/{fqdn}")
            assert response.status_code == 404
            body = response.json()
            assert body == {
                "error": {"code": "NOT_FOUND", "message": f"Capability not found: {fqdn}"}
            }
            assert body["error"] == await seeded.tool_error(who, "cap_whois", {"fqdn": fqdn})
    private = seeded.fqdns["my:private"]
    response = await seeded.get(seeded.keys["zoe"], f"/api/capabilities/{private}")
    assert response.status_code == 404  # another user's private one, in the same project
    zoe = await seeded.ok("zoe")
    assert "my:private" not in names(zoe)
    assert "zoe:secret" in names(zoe)
    assert "zoe:secret" not in names(await seeded.ok("erwan"))


async def test_public_and_org_capabilities_reach_others_as_cap_list_and_cap_whois_say(
    seeded: Served,
) -> None:
    globex = await seeded.ok("globex")
    assert globex == await seeded.tool("globex", "cap_list", {})
    assert set(names(globex)) == {"g:only", "fs:read_two"}
    mobile = await seeded.ok("mobile")
    assert mobile == await seeded.tool("mobile", "cap_list", {})
    assert set(names(mobile)) == {"org:shared", "fs:read_two"}
    public = seeded.fqdns["fs:read_two"]
    whois = await seeded.ok("globex", f"/api/capabilities/{public}")
    assert whois == await seeded.tool("globex", "cap_whois", {"fqdn": public})
    assert whois["org"] == "acme"
    assert whois["tool_usage"] is None  # acme's own calls are never shown to globex
    org_wide = seeded.fqdns["org:shared"]
    whois = await seeded.ok("mobile", f"/api/capabilities/{org_wide}")
    assert whois == await seeded.tool("mobile", "cap_whois", {"fqdn": org_wide})


@pytest.mark.parametrize("key", [None, "pml_not-a-real-key-000000000000000000", "x" * 600])
async def test_requests_without_a_valid_key_get_401_and_nothing_else(
    served: Served, key: str | None
) -> None:
    fqdn = await served.run("erwan", ADD_CODE, "math:add")
    for path in ("/api/capabilities", f"/api/capabilities/{fqdn}"):
        response = await served.get(key, path)
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "UNAUTHORIZED"
        assert "math" not in response.text


BAD_QUERIES = [
    "?limit=501",
    "?limit=0",
    "?limit=-1",
    "?limit=abc",
    "?limit=",
    "?limit=1e3",
    "?limit=%EF%BC%91",  # a fullwidth digit one, which int() would take
    "?limit=%D9%A1",  # an Arabic-Indic digit one
    "?limit=1&limit=2",
    "?offset=1e9",
    "?offset=1000000000",
    "?offset=" + "9" * 30,
    "?offset=-5",
    "?sort_by=drop%20table",
    "?sort_by=name%3B%20DROP%20TABLE%20capability_records%3B--",
    "?sort_by=%EF%BD%8E%EF%BD%81%EF%BD%8D%EF%BD%85",  # "name" in fullwidth letters
    "?sort_by=name&sort_by=usage",
    "?order=sideways",
    "?visibility=everyone",
    "?visibility=public&visibility=private",
    "?pattern=" + "a" * 10_000,
    "?pattern=fs:*&pattern=x",
    "?pattern=a%00b",
    "?created_by=%00",
    "?created_by=erwan%0A",
    "?created_by=" + "x" * 300,
    "?tags=%00",
    "?tags=a,,b",
    "?tags=",
    "?tags=" + ",".join(["t"] * 33),
    "?named_only=yes",
    "?named_only=TRUE",
    "?named_only",
    "?named_only=true&named_only=false",
    "?named_only=true&unnamed_only=true",
    "?tag=io",
    "?org=globex",
    "?project=site&limit=5",
    "?%E2%80%AEevil=1",
    "?%00=1",
]


async def test_bad_parameters_get_400_invalid_input_and_change_nothing(served: Served) -> None:
    await served.run("erwan", ADD_CODE, "math:add")
    before = await served.ok("erwan")
    assert before["total"] == 1
    for query in BAD_QUERIES:
        response = await served.get(served.keys["erwan"], f"/api/capabilities{query}")
        assert response.status_code == 400, (query[:60], response.text)
        body = response.json()
        assert set(body) == {"error"}, query[:60]
        assert body["error"]["code"] == "INVALID_INPUT", query[:60]
        assert len(body["error"]["message"]) < 200, query[:60]
    await served.gateway.executor.flush()
    assert await served.ok("erwan") == before


BAD_FQDNS = [
    "nope",
    "mcp:filesystem",
    "a.b.c.d.XYZ",
    "acme.webapp.math.add.abcd.extra",
    "acme.webapp.math.add",
    "a%2Fb",
    "acme/webapp/math/add/abcd",
    "acme.webapp.math.add.ab%00cd",
    "%E2%80%AE.b.c.d.abcd",
    "x" * 10_000,
    "",
]


async def test_a_malformed_fqdn_is_answered_as_cap_whois_answers_it(served: Served) -> None:
    fqdn = await served.run("erwan", ADD_CODE, "math:add")
    for raw in BAD_FQDNS:
        response = await served.get(served.keys["erwan"], f"/api/capabilities/{raw}")
        assert response.status_code == 400, (raw[:60], response.text[:200])
        decoded = httpx.URL(f"/x/{raw}").path[3:]
        assert response.json() == {
            "error": await served.tool_error("erwan", "cap_whois", {"fqdn": decoded})
        }, raw[:60]
    response = await served.get(served.keys["erwan"], f"/api/capabilities/{fqdn}?verbose=1")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "INVALID_INPUT"
    assert (await served.ok("erwan", f"/api/capabilities/{fqdn}"))["fqdn"] == fqdn


@pytest.mark.parametrize(
    ("failure", "status", "code"),
    [
        (RuntimeError("boom: a detail for the log only"), 500, "INTERNAL_ERROR"),
        (StorageError("Database error: the server is gone"), 503, "STORAGE_ERROR"),
    ],
)
async def test_a_failure_inside_is_an_error_object_without_a_traceback(
    served: Served,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    failure: Exception,
    status: int,
    code: str,
) -> None:
    async def fail(self: CapTools, *_args: object) -> dict[str, Any]:
        raise failure

    monkeypatch.setattr(CapTools, "list", fail)
    monkeypatch.setattr(CapTools, "whois", fail)
    caplog.set_level(logging.WARNING, logger="pml.web.api_capabilities")
    for path in ("/api/capabilities", "/api/capabilities/acme.webapp.math.add.abcd"):
        response = await served.get(served.keys["erwan"], path)
        assert response.status_code == status
        body = response.json()
        assert set(body) == {"error"}
        assert body["error"]["code"] == code
        assert "Traceback" not in response.text
        assert "boom" not in response.text
    logged = [record for record in caplog.records if record.name == "pml.web.api_capabilities"]
    assert len(logged) == 2
    assert all((record.exc_info is not None) == (status == 500) for record in logged)
