"""Helpers of the reload tests: a gateway opened on a real config file, and its reloader.

from gateway.reloading import config, running  # noqa: F401 - the fixtures

async def test_x(running: Running, sqlite_url: str) -> None:
    line = await running.reload_with(base_config(sqlite_url, servers={"clock": CLOCK}))
"""

from __future__ import annotations

import sys
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import mcp_types
import pytest
import tomli_w
from mcp import Client

from gateway.upstreams import Upstream
from pml.gateway.reload import Reloader, config_loader
from pml.gateway.server import Gateway, open_gateway
from pml.upstream.pool import ClientPool

TIME = str(Path(sys.executable).parent / "mcp-server-time")
CLOCK = {"command": TIME, "args": ["--local-timezone", "Pacific/Tarawa"]}
RELOAD_LOGGER = "pml.gateway.reload"


def base_config(sqlite_url: str, **more: Any) -> dict[str, Any]:
    """acme/webapp/erwan exposing upstream tools, every tool allowed (``more`` on top)."""
    return {
        "database_url": sqlite_url,
        "expose_upstream": True,
        "scope": {"org": "acme", "project": "webapp", "user": "erwan"},
        "permissions": {"allow": ["*:*"]},
        **more,
    }


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(tomli_w.dumps(data))
    return path


class Running:
    """An open gateway on ``config`` (plus the in-process server ``a``) and its reloader."""

    def __init__(self, gateway: Gateway, reloader: Reloader, config: Path) -> None:
        self.gateway = gateway
        self.reloader = reloader
        self.config = config

    async def reload_with(self, data: dict[str, Any]) -> str:
        write(self.config, data)
        return (await self.reloader.reload()).line()


@pytest.fixture(name="config")
def config_fixture(tmp_path: Path, sqlite_url: str) -> Path:
    return write(tmp_path / "pml.toml", base_config(sqlite_url))


@pytest.fixture(name="running")
async def running_fixture(config: Path) -> AsyncGenerator[Running]:
    load = config_loader(config, environ={}, cwd=config.parent)
    pool = ClientPool({"a": Upstream("a").server})
    async with open_gateway(load(), pool=pool) as gateway:
        yield Running(gateway, Reloader(gateway, load), config)


def execute_error(result: mcp_types.CallToolResult) -> dict[str, Any]:
    """The error of a failed ``pml_execute`` (``{"status": "error", "error": ...}``)."""
    assert result.structured_content is not None
    assert result.structured_content["status"] == "error"
    return result.structured_content["error"]


async def names_of(client: Client) -> set[str]:
    return {tool.name for tool in (await client.list_tools(cache_mode="bypass")).tools}
