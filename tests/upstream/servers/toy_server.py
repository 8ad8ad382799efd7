"""A small stdio MCP server for the upstream pool's tests.

    python toy_server.py [--legacy] [--fail-start] [--tag TAG]
                         [--http PORT [--header K=V] [--json]]  (--legacy too)

Tools: ``echo(text)``, ``add(a, b)``, ``pid()``, ``env()``, ``crash()`` (the process exits at once),
``hang()`` (never answers) and ``grow()`` (adds a tool ``extra_<n>`` and announces that the
tool list changed, on either protocol generation). ``--legacy`` refuses ``server/discover``
so that clients fall back to the 2025-11-25 handshake; ``--fail-start`` writes an error to
stderr and exits before serving; ``--tag`` only marks the command line (tests look for
leaked processes by it). ``--http`` serves streamable HTTP at ``http://127.0.0.1:PORT/mcp``
instead of stdio, answering 401 to requests without the ``--header`` given; ``--json``
answers each request with one JSON body, and ``--legacy`` makes clients use the 2025-11-25
handshake, whose answers are event streams. ``big(size)`` (not listed) answers ``size``
bytes of text.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
from mcp.server import NotificationOptions, Server
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import SessionMessage
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

OBJECT = {"type": "object"}
BASE_TOOLS = [
    types.Tool(
        name="echo",
        description="Echo the text back.",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}},
    ),
    types.Tool(
        name="add",
        description="Add two numbers.",
        input_schema={
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
    ),
    types.Tool(name="pid", description="The server's process id.", input_schema=OBJECT),
    types.Tool(
        name="env", description="The working directory and environment.", input_schema=OBJECT
    ),
    types.Tool(name="crash", description="Exit the process at once.", input_schema=OBJECT),
    types.Tool(name="hang", description="Never answer.", input_schema=OBJECT),
    types.Tool(name="grow", description="Add a tool and announce it.", input_schema=OBJECT),
]


def text(value: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=value)])


def build_server() -> Server[Any]:
    tools = list(BASE_TOOLS)
    bus = InMemorySubscriptionBus()

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        args = params.arguments or {}
        if params.name == "echo":
            return text(str(args.get("text", "")))
        if params.name == "add":
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=str(args["a"] + args["b"]))],
                structured_content={"sum": args["a"] + args["b"]},
            )
        if params.name == "pid":
            return text(str(os.getpid()))
        if params.name == "env":
            return text(json.dumps({"cwd": os.getcwd(), "env": dict(os.environ)}))
        if params.name == "crash":
            print("toy server: crashing on purpose", file=sys.stderr, flush=True)
            os._exit(1)
        if params.name == "hang":
            await anyio.sleep_forever()
        if params.name == "grow":
            name = f"extra_{len(tools) - len(BASE_TOOLS) + 1}"
            tools.append(types.Tool(name=name, description="Added by grow.", input_schema=OBJECT))
            if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
                await bus.publish(ToolsListChanged())
            else:
                await ctx.session.send_tool_list_changed()
            return text(name)
        if params.name == "big":  # not listed: only the HTTP bound's tests call it
            return text("x" * int(args.get("size", 0)))
        if params.name.startswith("extra_"):
            return text(params.name)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text="no")], is_error=True
        )

    return Server(
        "toy",
        version="1.0.0",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_subscriptions_listen=ListenHandler(bus),
    )


@asynccontextmanager
async def refuse_discover(
    read: ReadStream[SessionMessage | Exception], write: WriteStream[SessionMessage]
) -> AsyncIterator[ReadStream[SessionMessage | Exception]]:
    """A read stream that answers ``server/discover`` itself with METHOD_NOT_FOUND."""
    send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](16)

    async def pump() -> None:
        async with send:
            async for item in read:
                message = item.message if isinstance(item, SessionMessage) else None
                if (
                    isinstance(message, types.JSONRPCRequest)
                    and message.method == "server/discover"
                ):
                    error = types.ErrorData(code=types.METHOD_NOT_FOUND, message="Method not found")
                    reply = types.JSONRPCError(jsonrpc="2.0", id=message.id, error=error)
                    await write.send(SessionMessage(reply))
                    continue
                await send.send(item)

    async with anyio.create_task_group() as tg:
        tg.start_soon(pump)
        yield receive
        tg.cancel_scope.cancel()


async def serve_http(
    server: Server[Any], port: int, header: str, *, json_body: bool, legacy: bool
) -> None:
    import uvicorn
    from starlette.requests import Request
    from starlette.responses import JSONResponse, PlainTextResponse, Response
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    app = server.streamable_http_app(json_response=json_body)
    name, _, value = header.partition("=")

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and name and Request(scope).headers.get(name) != value:
            response: Response = PlainTextResponse("missing header", status_code=401)
            await response(scope, receive, send)
            return
        if scope["type"] == "http" and legacy and scope["method"] == "POST":
            body = await Request(scope, receive).body()
            message = json.loads(body or b"{}")
            if isinstance(message, dict) and message.get("method") == "server/discover":
                error = {"code": types.METHOD_NOT_FOUND, "message": "Method not found"}
                reply = {"jsonrpc": "2.0", "id": message.get("id"), "error": error}
                await JSONResponse(reply)(scope, receive, send)
                return

            replayed = False

            async def replay() -> Message:  # the body once, then what the client sends
                nonlocal replayed
                if replayed:
                    return await receive()
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}

            await inner(scope, replay, send)
            return
        await inner(scope, receive, send)

    inner: ASGIApp = app
    config = uvicorn.Config(guarded, host="127.0.0.1", port=port, log_level="warning")
    await uvicorn.Server(config).serve()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--legacy", action="store_true")
    parser.add_argument("--fail-start", action="store_true")
    parser.add_argument("--tag", default="")
    parser.add_argument("--http", type=int, default=0)
    parser.add_argument("--header", default="")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    if options.fail_start:
        print("toy server: cannot start, bad configuration", file=sys.stderr, flush=True)
        sys.exit(3)
    server = build_server()
    if options.http:
        await serve_http(
            server, options.http, options.header, json_body=options.json, legacy=options.legacy
        )
        return
    async with stdio_server() as (read, write):
        init = server.create_initialization_options(NotificationOptions(tools_changed=True))
        if options.legacy:
            async with refuse_discover(read, write) as filtered:
                await server.run(filtered, write, init)
        else:
            await server.run(read, write, init)


if __name__ == "__main__":
    anyio.run(main)
