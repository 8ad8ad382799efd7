"""A client's cancel of a pass-through call reaches the upstream server, through ``pml serve``.

server-everything shows no trace of a cancelled call, so the upstream here is a small stdio
server of our own that writes a marker file when its call is cancelled.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import stdio_client

from e2e.support import Upstream, pml_stdio_params, sqlite_url, write_config

pytestmark = pytest.mark.anyio

MODES = ["legacy", "auto"]
WAIT_S = 60.0
ALLOW = {"permissions": {"allow": ["*:*"]}}

# A stdio server whose ``hold`` tool waits until cancelled, then writes a marker file.
RECORDER = """
import sys, anyio, mcp_types
from mcp.server import Server
from mcp.server.stdio import stdio_server

MARK = sys.argv[1]

async def on_list_tools(ctx, params):
    tool = mcp_types.Tool(name="hold", input_schema={"type": "object"})
    return mcp_types.ListToolsResult(tools=[tool])

async def on_call_tool(ctx, params):
    open(MARK + ".started", "w").close()
    try:
        await anyio.sleep(60)
    except anyio.get_cancelled_exc_class():
        open(MARK, "w").close()
        raise
    return mcp_types.CallToolResult(content=[])

server = Server("recorder", on_list_tools=on_list_tools, on_call_tool=on_call_tool)

async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())

anyio.run(main)
"""


@asynccontextmanager
async def stdio_gateway(config: Path, mode: str) -> AsyncGenerator[Client]:
    with (config.parent / "pml.log").open("w") as errlog:
        transport = stdio_client(pml_stdio_params(config), errlog=errlog)
        async with Client(transport, mode=mode) as client:
            yield client


@pytest.mark.parametrize("mode", MODES)
async def test_a_cancelled_pass_through_call_is_cancelled_upstream(
    tmp_path: Path, mode: str
) -> None:
    mark = tmp_path / "cancelled"
    recorder = Upstream("recorder", sys.executable, ("-c", RECORDER, str(mark)))
    config = write_config(
        tmp_path / "pml.toml", [recorder], database_url=sqlite_url(tmp_path), extra=ALLOW
    )
    async with stdio_gateway(config, mode) as client:
        with anyio.fail_after(WAIT_S):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(client.call_tool, "recorder__hold", {})
                while not await anyio.Path(f"{mark}.started").exists():  # noqa: ASYNC110 - another process's file
                    await anyio.sleep(0.05)
                tasks.cancel_scope.cancel()  # the SDK client sends notifications/cancelled
            while not await anyio.Path(mark).exists():  # noqa: ASYNC110 - another process's file
                await anyio.sleep(0.05)
    assert mark.exists()
