"""Opening one MCP client session to one upstream server: stdio, streamable HTTP, in-process.

Everything a session holds (the child process, its stderr reader, the HTTP client, the
``subscriptions/listen`` stream) is entered on the caller's ``AsyncExitStack``, so closing
the stack closes the session and stops the process (stdio is PML's own transport, see
``pml.upstream.stdio_transport``: linear-time, bounded lines). The read side of the transport is
watched: when the server goes away (process died, connection closed) ``on_closed`` runs at
once, without waiting for a call to fail.

    async with AsyncExitStack() as stack:
        client = await open_client(stack, settings, on_message=handler, on_closed=lost,
                                   stderr=StderrTail("time"))
        tools = await fetch_tools(client)
        result = await client.call_tool("echo", {"text": "hi"})
"""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from types import TracebackType
from typing import Any, Final

import anyio
import httpx2
import mcp_types
from mcp import Client
from mcp.client.session import MessageHandlerFnT
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError
from mcp.server import Server
from mcp.shared._stream_protocols import ReadStream
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from pml.config import ServerSettings
from pml.upstream.events import NO_CALLBACKS, ClientCallbacks
from pml.upstream.http_bounds import BoundedTransport
from pml.upstream.results_wire import readable
from pml.upstream.stderr_lines import meaningful_line
from pml.upstream.stdio_transport import MAX_LINE_BYTES, TransportStreams, stdio_transport

logger = logging.getLogger(__name__)

UpstreamTarget = ServerSettings | Server[Any]

# What a child process inherits from the gateway: enough to find programs, write temp files
# and decode text, never the gateway's own secrets. The server's ``env`` is merged over it.
INHERITED_ENV_VARS: Final = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LANGUAGE", "LC_ALL",
    "LC_CTYPE", "TMPDIR", "TZ", "SYSTEMROOT", "APPDATA", "LOCALAPPDATA", "USERPROFILE",
)  # fmt: skip
MAX_TOOL_PAGES: Final = 100
STDERR_TAIL_BYTES: Final = 8192
STDERR_HEAD_LINES: Final = 40
HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)


def inherited_environment() -> dict[str, str]:
    """The minimal environment a stdio server starts with (before its own ``env``)."""
    # The one place upstream code reads the environment: a child process needs PATH & co.
    return {
        key: value
        for key in INHERITED_ENV_VARS
        if (value := os.environ.get(key)) is not None and not value.startswith("()")
    }


def transport_kind(target: UpstreamTarget) -> str:
    """``stdio``, ``http``, ``sse`` or ``in-process``."""
    if isinstance(target, Server):
        return "in-process"
    if target.url is None:
        return "stdio"
    return "sse" if target.type == "sse" else "http"


class StderrTail:
    """Reads a child's stderr pipe: keeps the last lines (for errors), logs them at DEBUG."""

    def __init__(self, server: str) -> None:
        self._server = server
        self._fd: int | None = None
        self._buffer = bytearray()
        self._lines: deque[str] = deque(maxlen=20)
        self._head: list[str] = []  # the first lines: a crash's reason may scroll out of the tail

    def attach(self, fd: int) -> None:
        """Read from ``fd`` (the read end of the pipe, made non-blocking) from now on."""
        os.set_blocking(fd, False)
        self._fd = fd

    def close(self) -> None:
        """Read what is left and close the pipe."""
        fd, self._fd = self._fd, None
        if fd is not None:
            self._drain(fd)
            os.close(fd)

    async def run(self) -> None:
        """Read until the end of file (every writer, the child and its children, is gone)."""
        while (fd := self._fd) is not None:
            await anyio.wait_readable(fd)
            if not self._drain(fd):
                return

    def text(self, lines: int = 3) -> str:
        """The last few non-empty lines, joined for a one-line message."""
        if self._fd is not None:
            self._drain(self._fd)
        pending = self._buffer.decode("utf-8", "replace").strip()
        recent = [*self._lines, *([pending[:500]] if pending else [])]
        return " | ".join(recent[-lines:])

    def reason(self) -> str:
        """The line of stderr that says why the server failed (``meaningful_line``)."""
        self.text()  # reads what is pending
        return meaningful_line([*self._head, *self._lines])

    def _drain(self, fd: int) -> bool:
        """Read what the pipe holds now; False at the end of file."""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not chunk:
                return False
            self._feed(chunk)

    def _feed(self, chunk: bytes) -> None:
        self._buffer += chunk
        *complete, rest = self._buffer.split(b"\n")
        self._buffer = bytearray(rest[-STDERR_TAIL_BYTES:])
        for raw in complete:
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                logger.debug("[%s] %s", self._server, line)
                self._lines.append(line[:500])
                if len(self._head) < STDERR_HEAD_LINES:
                    self._head.append(line[:500])


class _WatchedReadStream:
    """A transport read stream that reports its end (the server went away) once."""

    def __init__(
        self, inner: ReadStream[SessionMessage | Exception], on_end: Callable[[], None]
    ) -> None:
        self._inner = inner
        self._on_end: Callable[[], None] | None = on_end

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    def _ended(self) -> None:
        if self._on_end is not None:
            on_end, self._on_end = self._on_end, None
            on_end()

    async def receive(self) -> SessionMessage | Exception:
        try:
            return readable(await self._inner.receive())  # an answer too deep: an error
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._ended()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _WatchedReadStream:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _WatchedReadStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.aclose()


@asynccontextmanager
async def _watched(
    transport: AbstractAsyncContextManager[TransportStreams], on_closed: Callable[[], None]
) -> AsyncGenerator[TransportStreams]:
    async with transport as (read_stream, write_stream):
        yield _WatchedReadStream(read_stream, on_closed), write_stream


async def open_client(
    stack: AsyncExitStack,
    target: UpstreamTarget,
    *,
    on_message: MessageHandlerFnT,
    on_closed: Callable[[], None],
    stderr: StderrTail,
    callbacks: ClientCallbacks = NO_CALLBACKS,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> Client:
    """Connect to ``target`` with every resource entered on ``stack`` (raises on failure).
    ``callbacks`` answer the server's sampling, elicitation and roots requests and take its
    log messages (each one given declares the matching client capability); a stdio line,
    an HTTP answer or one event of its streams over ``max_line_bytes`` is dropped (see
    ``line_bound``; ``pml.upstream.http_bounds``)."""

    def client(transport: Any) -> Client:
        return Client(
            transport,
            cache=None,
            message_handler=on_message,
            sampling_callback=callbacks.sampling,
            sampling_capabilities=callbacks.sampling_capabilities,
            elicitation_callback=callbacks.elicitation,
            list_roots_callback=callbacks.list_roots,
            logging_callback=callbacks.logging,
        )

    if isinstance(target, Server):
        return await stack.enter_async_context(client(target))
    if target.url is None:
        assert target.command is not None  # ServerSettings guarantees command or url
        read_fd, write_fd = os.pipe()
        stderr.attach(read_fd)
        stack.callback(stderr.close)
        errlog = os.fdopen(write_fd, "w")
        stack.callback(errlog.close)
        readers = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(readers.cancel_scope.cancel)  # a grandchild may keep the pipe open
        readers.start_soon(stderr.run)
        stdio = stdio_transport(
            target.command,
            target.args,
            env=inherited_environment() | dict(target.env),
            cwd=target.cwd,
            errlog=errlog,
            max_line_bytes=max_line_bytes,
        )
        transport = _watched(stdio, on_closed)
        try:
            return await stack.enter_async_context(client(transport))
        finally:
            errlog.close()  # the child holds its own copy; ours would hide the end of file
    if target.type == "sse":
        transport = _watched(sse_client(target.url, headers=dict(target.headers)), on_closed)
    else:
        http = await stack.enter_async_context(
            httpx2.AsyncClient(
                headers=dict(target.headers),
                timeout=HTTP_TIMEOUT,
                event_hooks=_trace_hooks(),
                transport=BoundedTransport(max_line_bytes),
            )
        )
        streams = streamable_http_client(
            target.url, http_client=http, max_sse_event_size=max_line_bytes
        )
        transport = _watched(streams, on_closed)
    return await stack.enter_async_context(client(transport))


def _trace_hooks() -> dict[str, list[Callable[[httpx2.Request], Awaitable[None]]]]:
    """While traces are exported, each HTTP request also carries a ``traceparent`` header
    (the SDK puts it in ``_meta`` only)."""
    from pml.telemetry import tracing

    if not tracing.active():
        return {}
    from pml.telemetry.propagation import send_trace_context

    return {"request": [send_trace_context]}


async def listen_for_tool_changes(stack: AsyncExitStack, client: Client) -> bool:
    """On 2026-07-28 connections, open the ``subscriptions/listen`` stream that carries
    ``tools/list_changed`` (the events then reach the client's message handler)."""
    if client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False  # 2025-11-25 and older send the notification on the session itself
    capability = client.server_capabilities.tools
    if capability is None or not capability.list_changed:
        return False
    try:
        await stack.enter_async_context(client.listen(tools_list_changed=True))
    except (MCPError, ListenNotSupportedError) as error:
        logger.info("upstream does not stream tool changes: %s", error)
        return False
    return True


async def fetch_tools(client: Client) -> list[mcp_types.Tool]:
    """Every tool the server lists, across pages (duplicated names: the last one wins)."""
    tools: dict[str, mcp_types.Tool] = {}
    cursor: str | None = None
    for _ in range(MAX_TOOL_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.update((tool.name, tool) for tool in page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return list(tools.values())
