"""Small upstream MCP servers for the gateway's tests, run in-process by the real pool.

    a = Upstream("a")
    pool = ClientPool({"a": a.server, "broken": ServerSettings(command=NO_SUCH_COMMAND)})

Each ``Upstream`` records the calls it receives and can change its tool list, announcing it
to listening clients (the pool listens on 2026-07-28 connections).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import mcp_types
from mcp.client.session import IncomingMessage
from mcp.server import Server, ServerRequestContext
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged

from pml.config import PermissionsSettings, ScopeSettings, ServerSettings, Settings

Ctx = ServerRequestContext[Any, Any]

UNICODE_TEXT = "héllo wörld ✓ 日本語 🙂"
MODES = ["legacy", "auto"]  # in-process, "auto" discovers and speaks 2026-07-28
NO_SUCH_COMMAND = "pml-test-no-such-command"

# A stdio upstream whose ``die`` tool kills its own process in the middle of the call.
MORTAL_SERVER = """
import os, anyio, mcp_types
from mcp.server import Server
from mcp.server.stdio import stdio_server

async def on_list_tools(ctx, params):
    tools = [mcp_types.Tool(name=n, input_schema={"type": "object"}) for n in ("ping", "die")]
    return mcp_types.ListToolsResult(tools=tools)

async def on_call_tool(ctx, params):
    if params.name == "die":
        os._exit(1)
    return mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text="pong")])

server = Server("mortal", on_list_tools=on_list_tools, on_call_tool=on_call_tool)

async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())

anyio.run(main)
"""


def mortal_server() -> ServerSettings:
    """A real stdio server (a child process) that dies when its ``die`` tool is called."""
    return ServerSettings(command=sys.executable, args=["-c", MORTAL_SERVER])


def gateway_settings(database_url: str, *, expose_upstream: bool) -> Settings:
    """Settings for a test gateway acting, without an API key, as acme/webapp/erwan.

    The in-process servers' tools map to the ``unknown`` permission capability, which asks
    for approval by default (SPEC §10.4); these settings allow every tool, as an operator's
    ``[permissions] allow = ["*:*"]`` would. The policy gate still applies (the policy
    tests configure their own rules)."""
    return Settings(
        database_url=database_url,
        expose_upstream=expose_upstream,
        scope=ScopeSettings(org="acme", project="webapp", user="erwan"),
        permissions=PermissionsSettings(allow=["*:*"]),
    )


def tool(name: str, description: str = "", **properties: Any) -> mcp_types.Tool:
    return mcp_types.Tool(
        name=name,
        description=description or f"the {name} tool",
        input_schema={"type": "object", "properties": properties},
    )


DEFAULT_TOOLS = [
    tool("echo", "Echo the arguments", text={"type": "string"}),
    tool("fail", "Always an error result"),
    tool("mixed", "Text, image and structured content"),
]


class Upstream:
    """An in-process server: ``echo`` answers ``{server, tool, args}``, ``fail`` an error result,
    ``mixed`` several content blocks with structured content and ``_meta``."""

    def __init__(self, name: str, tools: list[mcp_types.Tool] | None = None) -> None:
        self.name = name
        self.tools = list(tools or DEFAULT_TOOLS)
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.bus = InMemorySubscriptionBus()
        self.server: Server[Any] = Server(
            name,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_subscriptions_listen=ListenHandler(self.bus),
        )

    async def change_tools(self, tools: list[mcp_types.Tool]) -> None:
        """Replace the tool list and announce it (``tools/list_changed``)."""
        self.tools = list(tools)
        await self.bus.publish(ToolsListChanged())

    async def _list_tools(
        self, ctx: Ctx, params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=list(self.tools))

    async def _call_tool(
        self, ctx: Ctx, params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        args = params.arguments or {}
        self.calls.append((params.name, args))
        if params.name == "fail":
            return mcp_types.CallToolResult(
                content=[mcp_types.TextContent(type="text", text=f"{self.name} says no")],
                is_error=True,
            )
        if params.name == "mixed":
            return mcp_types.CallToolResult(
                content=[
                    mcp_types.TextContent(type="text", text=UNICODE_TEXT),
                    mcp_types.ImageContent(
                        type="image", data="iVBORw0KGgo=", mime_type="image/png"
                    ),
                ],
                structured_content={"n": 1, "nested": {"list": [1, 2.5, None, "x"]}},
                _meta={"upstream": self.name},
            )
        data = {"server": self.name, "tool": params.name, "args": args}
        return mcp_types.CallToolResult(
            content=[mcp_types.TextContent(type="text", text=f"{self.name}:{params.name}")],
            structured_content=data,
        )


class ListChanged:
    """A client message handler that records ``tools/list_changed`` notifications."""

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.count = 0

    async def __call__(self, message: IncomingMessage) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self.count += 1
            self.event.set()

    async def wait(self, timeout_s: float = 5.0) -> None:
        """Wait for the next notification (``TimeoutError`` after ``timeout_s``)."""
        with anyio.fail_after(timeout_s):
            await self.event.wait()
        self.event = anyio.Event()


def error_of(result: mcp_types.CallToolResult) -> dict[str, Any]:
    """The error object of a failed call, checked to be the same in JSON and in text."""
    assert result.is_error is True
    assert result.structured_content is not None
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, mcp_types.TextContent)
    assert json.loads(block.text) == result.structured_content
    assert set(result.structured_content) == {"error"}
    return result.structured_content["error"]


def data_of(result: mcp_types.CallToolResult) -> dict[str, Any]:
    """The JSON of a successful call, checked to be the same in structuredContent and text."""
    assert not result.is_error
    assert result.structured_content is not None
    block = result.content[0]
    assert isinstance(block, mcp_types.TextContent)
    assert json.loads(block.text) == result.structured_content
    return result.structured_content
