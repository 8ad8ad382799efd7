"""``pml serve --http`` with API keys, in front of real servers, driven by the SDK client.

One gateway serves the whole module (time + everything upstream) on a free loopback port;
its database holds one capability of org ``acme`` and a key per org (SPEC §1, §11).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client

from e2e.support import (
    META_TOOLS,
    HttpGateway,
    NpmDeps,
    Upstream,
    comparable,
    create_key,
    error_of,
    http_client,
    pml_cli,
    pml_http,
    reference_servers,
    result_json,
    sqlite_url,
    write_config,
)
from gateway.raw_mcp import INIT as INITIALIZE
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry
from pml.storage.database import Database

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

ACME = Scope("acme", "web", "alice")
ACME_CAPABILITY = "acme-weekly-report"
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@dataclass(frozen=True, slots=True)
class Deployment:
    gateway: HttpGateway
    config: Path
    keys: dict[str, str]
    servers: dict[str, Upstream]


async def seed_acme_capability(database_url: str) -> None:
    """One capability in acme/web, written through the registry like a real run would."""
    db = await Database.open(database_url)
    try:
        draft = CapabilityDraft(code="return 6 * 7", intent="weekly report", name=ACME_CAPABILITY)
        await CapabilityRegistry(db).capture(ACME, draft, latency_ms=1.0)
    finally:
        await db.close()


@pytest.fixture(scope="module")
def deployment(npm_deps: NpmDeps, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    workdir = tmp_path_factory.mktemp("http")
    servers = reference_servers(npm_deps, workdir)
    config = write_config(
        workdir / "pml.toml",
        [servers["time"], servers["everything"]],
        database_url=sqlite_url(workdir),
    )
    anyio.run(seed_acme_capability, sqlite_url(workdir))
    keys = {
        "acme": create_key(config, ACME.org, ACME.project, ACME.user)["key"],
        "globex": create_key(config, "globex", "web", "bob")["key"],
    }
    with pml_http(config, workdir / "pml.log") as gateway:
        yield Deployment(gateway, config, keys, servers)


def post_initialize(url: str, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(url, json=INITIALIZE, headers=MCP_HEADERS | headers, timeout=10.0)


async def cap_list(client: Client) -> dict[str, Any]:
    result = await client.call_tool("cap_list", {})
    assert not result.is_error, result
    return result_json(result)


def test_health_answers_without_a_key(deployment: Deployment) -> None:
    response = httpx.get(f"{deployment.gateway.base_url}/health", timeout=5.0)

    assert response.status_code == 200


def test_an_initialize_request_with_a_valid_key_is_accepted(deployment: Deployment) -> None:
    key = deployment.keys["acme"]
    response = post_initialize(deployment.gateway.mcp_url, {"Authorization": f"Bearer {key}"})

    assert response.status_code == 200
    assert "serverInfo" in response.text


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer pml_this-is-not-a-key"},
        {"Authorization": "Bearer"},
        {"Authorization": "Basic YWxpY2U6c2VjcmV0"},
    ],
    ids=["no-key", "wrong-key", "empty-key", "not-bearer"],
)
def test_requests_without_a_valid_key_get_401_and_nothing_else(
    deployment: Deployment, headers: dict[str, str]
) -> None:
    posted = post_initialize(deployment.gateway.mcp_url, headers)
    streamed = httpx.get(
        deployment.gateway.mcp_url,
        headers={"Accept": "text/event-stream"} | headers,
        timeout=10.0,
    )

    for response in (posted, streamed):
        assert response.status_code == 401
        assert "serverInfo" not in response.text
        assert "mcp-session-id" not in response.headers


async def test_a_revoked_key_is_refused_from_the_next_request_on(deployment: Deployment) -> None:
    created = create_key(deployment.config, "acme", "web", "carol")
    async with http_client(deployment.gateway.mcp_url, created["key"]) as client:
        before = await cap_list(client)

    pml_cli(deployment.config, "keys", "revoke", created["id"], "--json")
    refused = post_initialize(
        deployment.gateway.mcp_url, {"Authorization": f"Bearer {created['key']}"}
    )

    assert before["total"] == 1
    assert refused.status_code == 401
    assert "serverInfo" not in refused.text


@pytest.mark.parametrize("mode", ["auto", "legacy"], ids=["modern", "legacy"])
async def test_the_sdk_client_with_a_key_gets_the_tools_and_pass_through_results(
    deployment: Deployment, mode: str
) -> None:
    arguments = {"message": f"over HTTP ({mode})"}
    async with Client(deployment.servers["everything"].params()) as direct:
        expected = comparable(await direct.call_tool("echo", arguments))

    url, key = deployment.gateway.mcp_url, deployment.keys["acme"]
    async with http_client(url, key, mode=mode) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        echoed = comparable(await client.call_tool("everything__echo", arguments))
        now = await client.call_tool("time__get_current_time", {"timezone": "UTC"})

    assert names >= META_TOOLS
    assert {"everything__echo", "time__get_current_time", "time__convert_time"} <= names
    assert echoed == expected
    assert result_json(now)["timezone"] == "UTC"


async def test_a_key_of_another_org_sees_another_scope(deployment: Deployment) -> None:
    url = deployment.gateway.mcp_url
    async with http_client(url, deployment.keys["acme"]) as acme:
        mine = await cap_list(acme)
        found = await acme.call_tool("cap_lookup", {"name": ACME_CAPABILITY})
    async with http_client(url, deployment.keys["globex"]) as globex:
        theirs = await cap_list(globex)
        hidden = await globex.call_tool("cap_lookup", {"name": ACME_CAPABILITY})

    assert mine["total"] == 1
    assert [item["display_name"] for item in mine["items"]] == [ACME_CAPABILITY]
    assert not found.is_error
    assert result_json(found)["fqdn"].startswith("acme.web.")
    assert theirs == {"items": [], "total": 0}
    assert error_of(hidden)["code"] == "NOT_FOUND"


def test_the_key_list_shows_each_org_but_never_a_key(deployment: Deployment) -> None:
    listed = json.loads(pml_cli(deployment.config, "keys", "list", "--json"))

    assert {"acme", "globex"} <= {item["org"] for item in listed["items"]}
    for key in deployment.keys.values():
        assert key not in json.dumps(listed)


async def test_pml_execute_over_http_learns_in_the_key_s_scope_only(
    deployment: Deployment,
) -> None:
    url = deployment.gateway.mcp_url
    code = "said = await mcp.everything.echo(message='over http')\nreturn said"
    async with (
        http_client(url, deployment.keys["acme"]) as acme,
        http_client(url, deployment.keys["globex"]) as globex,
    ):
        mine = result_json(
            await acme.call_tool(
                "pml_execute", {"intent": "echo", "code": code, "name": "http:echo"}
            )
        )
        theirs_by_name = await globex.call_tool(
            "pml_execute", {"intent": "steal", "capability": "http:echo"}
        )
        theirs_by_fqdn = await globex.call_tool(
            "pml_execute", {"intent": "steal", "capability": mine["capabilityFqdn"]}
        )
        theirs = result_json(
            await globex.call_tool("pml_execute", {"intent": "echo", "code": code})
        )
        again = result_json(
            await acme.call_tool("pml_execute", {"intent": "again", "capability": "http:echo"})
        )
    assert mine["result"] == "Echo: over http"
    assert mine["capabilityFqdn"].startswith("acme.web.http.echo.")
    assert error_of(theirs_by_name)["message"] == "Capability not found: http:echo"
    assert error_of(theirs_by_fqdn)["code"] == "NOT_FOUND"
    assert theirs["created"] is True
    assert theirs["capabilityFqdn"].startswith("globex.web.")
    assert again["capabilityFqdn"] == mine["capabilityFqdn"]
