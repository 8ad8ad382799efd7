"""An upstream MCP server over streamable HTTP on loopback that records what it received.

    with recording_upstream() as upstream:           # http://127.0.0.1:PORT/mcp
        ... [servers.rec] url = upstream.url ...
        assert upstream.calls[0].meta["traceparent"].startswith("00-")

Built with the SDK's ``Server`` and served by uvicorn from a thread of its own (so sync
and async tests alike can use it). Its ``echo`` tool answers its ``text``; each
``tools/call`` is recorded with the ``_meta`` it carried and the HTTP headers of its POST.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types
import uvicorn
from mcp.server import Server, ServerRequestContext
from starlette.types import Message, Receive, Scope, Send

from pml.gateway.http import listen_socket

START_S = 10.0


@dataclass(frozen=True, slots=True)
class ReceivedCall:
    """One ``tools/call`` as the upstream saw it."""

    tool: str
    meta: dict[str, Any]
    headers: dict[str, str]


@dataclass
class RecordingUpstream:
    url: str = ""
    calls: list[ReceivedCall] = field(default_factory=list[ReceivedCall])
    # The headers of each POST whose JSON-RPC body is a tools/call, in arrival order.
    call_headers: list[dict[str, str]] = field(default_factory=list[dict[str, str]])


def _server(record: RecordingUpstream) -> Server[Any]:
    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        schema = {"type": "object", "properties": {"text": {"type": "string"}}}
        echo = mcp_types.Tool(name="echo", description="Echo text", input_schema=schema)
        return mcp_types.ListToolsResult(tools=[echo])

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        headers = record.call_headers[-1] if record.call_headers else {}
        meta = dict(params.meta or {})
        record.calls.append(ReceivedCall(params.name, meta, headers))
        text = str((params.arguments or {}).get("text", ""))
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text=text)])

    return Server("rec", on_list_tools=list_tools, on_call_tool=call_tool)


def _recording(app: Any, record: RecordingUpstream) -> Any:
    """ASGI wrapper noting the headers of every POST carrying a ``tools/call``."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        with contextlib.suppress(ValueError):
            if json.loads(body).get("method") == "tools/call":
                headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
                record.call_headers.append(headers)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await app(scope, replay, send)

    return wrapped


class _Uvicorn(uvicorn.Server):
    """uvicorn, telling a thread when it serves."""

    def __init__(self, config: uvicorn.Config, started: threading.Event) -> None:
        super().__init__(config)
        self._started = started

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self._started.set()


@contextlib.contextmanager
def recording_upstream() -> Iterator[RecordingUpstream]:
    """The server on a free loopback port until the block ends."""
    record = RecordingUpstream()
    sock = listen_socket("127.0.0.1", 0)
    record.url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    app = _recording(_server(record).streamable_http_app(host="127.0.0.1"), record)
    started = threading.Event()
    server = _Uvicorn(uvicorn.Config(app, log_level="warning", lifespan="on"), started)
    thread = threading.Thread(
        target=anyio.run, args=(server.serve, [sock]), name="rec-upstream", daemon=True
    )
    thread.start()
    try:
        if not started.wait(START_S):
            raise AssertionError("the recording upstream did not start")
        yield record
    finally:
        server.should_exit = True
        thread.join(timeout=START_S)
        sock.close()
