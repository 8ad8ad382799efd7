"""An MCP upstream (stdio, the SDK's ``Server``) that answers with deeply nested JSON.

    python depth_upstream.py            # a stdio MCP server named "deep"

Its tools take ``depth`` (levels of nesting) and ``kind`` (``"list"``, ``"dict"`` or
``"mixed"``):

- ``deep_text``: one text block whose text is JSON nested ``depth`` levels;
- ``deep_structured``: ``structuredContent`` ``{"value": <nested depth levels>}``;
- ``ping``: ``"pong"`` (the server still answers).

The SDK could not serialise a value that deep (its serialiser and Python's ``json`` both
recurse), so a result carries a marker string that the writer replaces, in the serialised
line, by the nested JSON text: the wire gets exactly what a hostile server would send.
Used only by the depth tests (``tests/e2e/test_e2e_depth.py``).
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
import mcp_types
from mcp.server import Server, ServerRequestContext
from mcp.shared.message import SessionMessage

MARKER = "@@deep-json@@"


def nested_text(depth: int, kind: str) -> str:
    """JSON text nested ``depth`` levels: arrays, objects, or both in turn (``mixed``)."""
    opens: list[str] = []
    closes: list[str] = []
    for level in range(depth):
        as_list = kind == "list" or (kind == "mixed" and level % 2 == 0)
        opens.append("[" if as_list else '{"a":')
        closes.append("]" if as_list else "}")
    return "".join(opens) + "1" + "".join(reversed(closes))


async def on_list_tools(
    ctx: ServerRequestContext[Any, Any], params: mcp_types.PaginatedRequestParams | None
) -> mcp_types.ListToolsResult:
    schema = {
        "type": "object",
        "properties": {"depth": {"type": "integer"}, "kind": {"type": "string"}},
    }
    names = ("deep_text", "deep_structured", "ping")
    return mcp_types.ListToolsResult(
        tools=[mcp_types.Tool(name=name, input_schema=schema) for name in names]
    )


async def on_call_tool(
    ctx: ServerRequestContext[Any, Any], params: mcp_types.CallToolRequestParams
) -> mcp_types.CallToolResult:
    arguments = params.arguments or {}
    depth, kind = int(arguments.get("depth", 10)), str(arguments.get("kind", "list"))
    marker = f"{MARKER}{depth}:{kind}"
    if params.name == "deep_text":
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text=marker)])
    if params.name == "deep_structured":
        return mcp_types.CallToolResult(
            content=[mcp_types.TextContent(type="text", text="deep")],
            structured_content={"value": marker},
        )
    return mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text="pong")])


def expand(line: str) -> str:
    """``line`` with its marker (if any) replaced by the nested JSON it stands for: inside
    a text block's string (escaped), or in place of the structured value's string."""
    start = line.find(MARKER)
    if start < 0:
        return line
    end = line.index('"', start)
    depth_text, kind = line[start + len(MARKER) : end].split(":")
    nested = nested_text(int(depth_text), kind)
    if line[:start].endswith('"text":"'):
        return line[:start] + nested.replace('"', '\\"') + line[end:]
    return line[: start - 1] + nested + line[end + 1 :]


async def main() -> None:
    server = Server("deep", on_list_tools=on_list_tools, on_call_tool=on_call_tool)
    to_server, server_reads = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    server_writes, from_server = anyio.create_memory_object_stream[SessionMessage](16)
    stdin = anyio.wrap_file(sys.stdin)
    stdout = anyio.wrap_file(sys.stdout)

    async def read() -> None:
        async with to_server:
            async for line in stdin:
                message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                await to_server.send(SessionMessage(message))

    async def write() -> None:
        async with from_server:
            async for outgoing in from_server:
                line = outgoing.message.model_dump_json(by_alias=True, exclude_unset=True)
                await stdout.write(expand(line) + "\n")
                await stdout.flush()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(read)
        tasks.start_soon(write)
        await server.run(server_reads, server_writes, server.create_initialization_options())
        tasks.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(main)
