"""An upstream that holds its call until released, and the 2026-07-28 envelope, shared by
the lane tests (stdio and HTTP)."""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types
from mcp.server import Server, ServerRequestContext

MODERN = "2026-07-28"
ENVELOPE = {
    mcp_types.PROTOCOL_VERSION_META_KEY: MODERN,
    mcp_types.CLIENT_INFO_META_KEY: {"name": "raw", "version": "1"},
    mcp_types.CLIENT_CAPABILITIES_META_KEY: {},
}


class Waiter:
    """An upstream whose ``wait`` tool blocks until released; it records cancellations."""

    def __init__(self) -> None:
        self.release = anyio.Event()
        self.started = anyio.Event()
        self.cancelled = anyio.Event()
        self.server: Server[Any] = Server(
            "slow", on_list_tools=self._list_tools, on_call_tool=self._call_tool
        )

    async def _list_tools(self, ctx: Any, params: Any) -> mcp_types.ListToolsResult:
        schema: dict[str, Any] = {"type": "object"}
        return mcp_types.ListToolsResult(tools=[mcp_types.Tool(name="wait", input_schema=schema)])

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        self.started.set()
        try:
            await self.release.wait()
        except anyio.get_cancelled_exc_class():
            self.cancelled.set()
            raise
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text="done")])
