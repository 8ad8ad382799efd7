"""A gateway with two in-process upstream servers (``a``, ``b``) and the real sandbox."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

import mcp_types
import pytest
import sqlalchemy as sa
from mcp import Client

from gateway.upstreams import Upstream, gateway_settings
from pml.gateway.server import Gateway, open_gateway
from pml.registry.models import CapabilityRecord
from pml.registry.scope import Scope
from pml.storage.tables import capability_records, capability_versions, execution_traces
from pml.upstream.pool import ClientPool

SCOPE = Scope("acme", "webapp", "erwan")
FQDN = r"^[a-z0-9_-]+\.[a-z0-9_-]+\.[a-z0-9_-]+\.[A-Za-z0-9_-]+\.[0-9a-f]{4,}$"


@dataclass
class Execute:
    """Calls ``pml_execute`` through a real SDK client and returns its JSON."""

    client: Client
    gateway: Gateway

    async def __call__(self, **arguments: Any) -> dict[str, Any]:
        arguments.setdefault("intent", "test run")
        result = await self.client.call_tool("pml_execute", arguments)
        data = result.structured_content
        assert data is not None
        block = result.content[0]
        assert isinstance(block, mcp_types.TextContent)
        assert json.loads(block.text) == data
        assert result.is_error == (data.get("status") == "error" or "error" in data)
        return data

    async def error(self, **arguments: Any) -> dict[str, Any]:
        data = await self(**arguments)
        assert data.get("status") == "error", data
        return data["error"]

    async def record(self, name: str) -> CapabilityRecord:
        """A capability's record once the queued usage counts are written."""
        await self.gateway.executor.flush()
        return (await self.gateway.registry.resolve(SCOPE, name)).record

    async def stored(self) -> dict[str, int]:
        """How many capability records, versions and traces the database holds."""
        await self.gateway.executor.flush()
        counts: dict[str, int] = {}
        async with self.gateway.db.read() as conn:
            for name, table in (
                ("records", capability_records),
                ("versions", capability_versions),
                ("traces", execution_traces),
            ):
                query = sa.select(sa.func.count()).select_from(table)
                if name == "records":
                    query = query.where(table.c.record_type == "capability")
                elif name == "versions":  # not the seeded MCP server records
                    capabilities = sa.select(capability_records.c.fqdn).where(
                        capability_records.c.record_type == "capability"
                    )
                    query = query.where(table.c.capability_fqdn.in_(capabilities))
                counts[name] = int((await conn.execute(query)).scalar_one())
        return counts


@pytest.fixture
def upstreams() -> dict[str, Upstream]:
    return {"a": Upstream("a"), "b": Upstream("b")}


@pytest.fixture
async def gateway(sqlite_url: str, upstreams: dict[str, Upstream]) -> AsyncGenerator[Gateway]:
    pool = ClientPool({name: upstream.server for name, upstream in upstreams.items()})
    settings = gateway_settings(sqlite_url, expose_upstream=False)
    async with open_gateway(settings, pool=pool) as gw:
        yield gw


@pytest.fixture
async def execute(gateway: Gateway) -> AsyncGenerator[Execute]:
    async with Client(gateway.server) as client:
        yield Execute(client, gateway)
