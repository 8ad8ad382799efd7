"""The gateway records its configured upstream servers in the registry (SPEC §6.8)."""

from __future__ import annotations

import pytest

from pml.config import RoutingSettings, ScopeSettings, ServerSettings, Settings
from pml.errors import NotFound
from pml.gateway.server import open_gateway
from pml.registry.scope import Scope
from pml.upstream.pool import ClientPool

pytestmark = pytest.mark.anyio

SCOPE = Scope("acme", "webapp", "erwan")


def settings(database_url: str, **servers: ServerSettings) -> Settings:
    return Settings(
        database_url=database_url,
        scope=ScopeSettings(org=SCOPE.org, project=SCOPE.project, user=SCOPE.user),
        servers=servers,
        routing=RoutingSettings(cloud=["search-*"]),
    )


async def test_configured_servers_become_mcp_records_with_their_routing(sqlite_url: str) -> None:
    configured = settings(
        sqlite_url,
        time=ServerSettings(command="mcp-server-time", args=["--local-timezone", "UTC"]),
        **{"search-web": ServerSettings(url="https://search.example/mcp")},
        off=ServerSettings(command="never-started", disabled=True),
    )
    async with open_gateway(configured, pool=ClientPool({})) as gateway:
        time = (await gateway.registry.resolve(SCOPE, "mcp:time")).record
        search = (await gateway.registry.resolve(SCOPE, "mcp:search-web")).record
        with pytest.raises(NotFound):
            await gateway.registry.resolve(SCOPE, "mcp:off")
    assert (time.record_type, time.code_url, time.routing) == (
        "mcp-server",
        "mcp-server-time --local-timezone UTC",
        "local",
    )
    assert (search.code_url, search.routing) == ("https://search.example/mcp", "cloud")
    assert time.fqdn.startswith("acme.webapp.mcp.time.")


async def test_a_changed_command_is_a_new_version_at_the_next_start(sqlite_url: str) -> None:
    first = settings(sqlite_url, time=ServerSettings(command="mcp-server-time"))
    second = settings(sqlite_url, time=ServerSettings(command="uvx", args=["mcp-server-time"]))
    async with open_gateway(first, pool=ClientPool({})):
        pass
    async with open_gateway(second, pool=ClientPool({})) as gateway:
        latest = (await gateway.registry.resolve(SCOPE, "mcp:time")).version
        original = (await gateway.registry.resolve(SCOPE, "mcp:time@v1")).version
    assert (latest.version, latest.code_url) == (2, "uvx mcp-server-time")
    assert original.code_url == "mcp-server-time"
