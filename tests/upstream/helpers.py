"""Helpers for the upstream pool's tests: small MCP servers, process checks, waiting on state.

Imported as ``upstream.helpers`` (``tests/`` is on ``sys.path``, see ``tests/samples.py``).
"""

from __future__ import annotations

import os
import socket
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged

from pml.config import ServerSettings
from pml.upstream.base import ServerState
from pml.upstream.pool import ClientPool

TOY_SERVER = Path(__file__).parent / "servers" / "toy_server.py"
VENV_BIN = Path(sys.executable).parent
OBJECT = {"type": "object"}
TOY_TOOL_COUNT = 7  # the tools servers/toy_server.py lists at start


def toy(*flags: str, tag: str | None = None, **fields: Any) -> ServerSettings:
    """The stdio toy server (``servers/toy_server.py``) with a tag on its command line."""
    args = [str(TOY_SERVER), *flags, "--tag", tag or uuid.uuid4().hex]
    return ServerSettings(command=sys.executable, args=args, **fields)


def processes_with(marker: str) -> list[int]:
    """Live processes (not zombies) whose command line contains ``marker``."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # gone meanwhile
        if marker in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def children_running(word: str) -> list[int]:
    """This process's live children whose command line contains ``word``."""
    mine: list[int] = []
    for pid in processes_with(word):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        ppid = next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:"))
        if int(ppid) == os.getpid():
            mine.append(pid)
    return mine


async def wait_until(check: Callable[[], bool], within: float = 5.0) -> None:
    """Wait until ``check()`` holds (polled every 20 ms); fail after ``within`` seconds."""
    with anyio.fail_after(within):
        while not check():  # noqa: ASYNC110 - process tables and pool states have no events
            await anyio.sleep(0.02)


def state_of(pool: ClientPool, server: str) -> ServerState:
    return next(status.state for status in pool.status() if status.name == server)


def text_of(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


class ChangingServer:
    """An in-process server whose tools change on a call, announced on 2026-07-28 streams."""

    def __init__(self, label: str = "mem") -> None:
        self.label = label
        self.bus = InMemorySubscriptionBus()
        self.tools = [
            types.Tool(name="echo", description=f"Echo ({label}).", input_schema=OBJECT),
            types.Tool(name="grow", description="Add a tool.", input_schema=OBJECT),
            types.Tool(
                name="mutate", description="Change echo's description.", input_schema=OBJECT
            ),
        ]
        self.server: Server[Any] = Server(
            label,
            on_list_tools=self.server_list_tools,
            on_call_tool=self._call_tool,
            on_subscriptions_listen=ListenHandler(self.bus),
        )

    async def server_list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(self.tools))

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if params.name == "grow":
            self.tools.append(types.Tool(name="extra", description="Grown.", input_schema=OBJECT))
            await self.bus.publish(ToolsListChanged())
        elif params.name == "mutate":
            self.tools[0] = self.tools[0].model_copy(update={"description": "Now it deletes."})
            await self.bus.publish(ToolsListChanged())
        answer = self.label if params.name == "echo" else params.name
        return types.CallToolResult(content=[types.TextContent(type="text", text=answer)])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def wait_for_port(url: str) -> None:
    port = int(url.rsplit(":", 1)[1].split("/")[0])

    def accepting() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        except OSError:
            return False
        return True

    await wait_until(accepting, within=15)
