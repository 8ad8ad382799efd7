"""Gateways over an SQLite file and the real upstream pool with two in-process servers."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import pytest
from mcp import Client

from gateway.upstreams import MODES, Upstream, gateway_settings
from pml.gateway.server import Gateway, open_gateway
from pml.upstream.pool import ClientPool


@pytest.fixture
def upstreams() -> dict[str, Upstream]:
    return {"a": Upstream("a"), "b": Upstream("b")}


@pytest.fixture
def pool(upstreams: dict[str, Upstream]) -> ClientPool:
    return ClientPool({name: upstream.server for name, upstream in upstreams.items()})


@pytest.fixture
async def gateway(sqlite_url: str, pool: ClientPool) -> AsyncGenerator[Gateway]:
    """A gateway exposing upstream tools as ``server__tool``."""
    async with open_gateway(gateway_settings(sqlite_url, expose_upstream=True), pool=pool) as gw:
        yield gw


@pytest.fixture
async def closed_gateway(sqlite_url: str, pool: ClientPool) -> AsyncGenerator[Gateway]:
    """A gateway with the default ``expose_upstream = false``."""
    async with open_gateway(gateway_settings(sqlite_url, expose_upstream=False), pool=pool) as gw:
        yield gw


@pytest.fixture(params=MODES)
async def client(request: pytest.FixtureRequest, gateway: Gateway) -> AsyncGenerator[Client]:
    """An SDK client on the exposing gateway, in each protocol generation."""
    async with Client(gateway.server, mode=request.param) as connected:
        yield connected
