"""``pml serve --stdio``'s transport: the protocol on stdin/stdout as asyncio pipes.

    async with claim_stdio() as pipes:            # None when stdin/stdout are not pipes
        if pipes is not None:
            await serve_on_pipes(server, pipes, lane=lane)

The SDK's stdio server reads and writes through worker threads (one hand-off per line read
and per line written). A gateway sits on the hot path of every tool call, so here stdin and
stdout are non-blocking pipes on the event loop, and each line is offered first to a
``Lane`` (the pass-through fast lane), which may answer it itself; every other line is
parsed and handed to the SDK server exactly as its own stdio transport would.

Like the SDK, serving claims the descriptors: fd 0 reads the null device and fd 1 writes to
stderr while the protocol owns private duplicates, so nothing a handler or a child prints
can corrupt the wire. Both are restored (and set back to blocking) on exit. Terminals and
files are left to the SDK's threaded transport (``claim_stdio`` yields ``None``): making a
terminal non-blocking would outlive PML in the user's shell.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import time
from collections.abc import AsyncGenerator, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any, Final, Protocol

import anyio
import anyio.abc
import anyio.lowlevel
import mcp_types
from mcp.server import Server
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from pml import wire_json
from pml.gateway.early_stdio import is_pipe
from pml.wire_ids import leading_id

logger = logging.getLogger(__name__)

# The longest protocol line accepted (a base64 image, a large file): beyond it the line is
# skipped and reported as a parse error, never buffered without bound.
MAX_LINE_BYTES: Final = 64 * 1024 * 1024


class Lane(Protocol):
    """A fast path for some incoming lines (see ``pml.gateway.fast_lane``)."""

    def take(self, line: bytes, tasks: anyio.abc.TaskGroup) -> bool:
        """Whether ``line`` is answered by the lane (in a task of ``tasks``), not the server."""
        ...

    def sent(self, message: mcp_types.JSONRPCMessage) -> None:
        """Called with each message the server writes (the lane learns the session's era)."""
        ...


@dataclass(slots=True)
class Pipes:
    """The protocol's ends of stdin and stdout, on the running event loop."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    def write_line(self, data: bytes) -> None:
        """Queue one protocol line (``data`` without its newline); never blocks."""
        self.writer.write(data + b"\n")


@asynccontextmanager
async def claim_stdio(
    stdin_fd: int = 0, stdout_fd: int = 1, *, pending: bytes = b""
) -> AsyncGenerator[Pipes | None]:
    """Own the two descriptors for the protocol while the block runs (``None``: not pipes);
    ``pending``: bytes already read from stdin (``early_stdio``), read first."""
    if not (is_pipe(stdin_fd) and is_pipe(stdout_fd)):
        yield None
        return
    wire_in = fcntl.fcntl(stdin_fd, fcntl.F_DUPFD_CLOEXEC, 3)
    wire_out = fcntl.fcntl(stdout_fd, fcntl.F_DUPFD_CLOEXEC, 3)
    _divert(stdin_fd, os.open(os.devnull, os.O_RDONLY))
    _divert(stdout_fd, os.dup(2))
    try:
        async with open_pipes(wire_in, wire_out, pending=pending) as pipes:
            yield pipes
    finally:
        for fd, wire in ((stdin_fd, wire_in), (stdout_fd, wire_out)):
            with suppress(OSError):
                os.dup2(wire, fd)
                os.set_blocking(fd, True)
            with suppress(OSError):
                os.close(wire)


def _divert(fd: int, target: int) -> None:
    try:
        os.dup2(target, fd)
    finally:
        os.close(target)


@asynccontextmanager
async def open_pipes(read_fd: int, write_fd: int, *, pending: bytes = b"") -> AsyncGenerator[Pipes]:
    """Asyncio streams over two pipe descriptors (duplicated: the caller keeps its own);
    ``pending`` is read before what the read descriptor gives."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
    if pending:
        reader.feed_data(pending)
    read_file = os.fdopen(os.dup(read_fd), "rb", buffering=0)
    write_file = os.fdopen(os.dup(write_fd), "wb", buffering=0)
    read_transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), read_file
    )
    write_transport, write_protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, write_file
    )
    writer = asyncio.StreamWriter(write_transport, write_protocol, reader, loop)
    try:
        yield Pipes(reader, writer)
    finally:
        read_transport.close()
        with suppress(OSError, ConnectionError):
            await asyncio.wait_for(writer.drain(), timeout=1.0)
        write_transport.close()


async def serve_on_pipes(
    server: Server[Any],
    pipes: Pipes,
    *,
    lane: Lane | None = None,
    answered: Mapping[int | str, dict[str, Any]] | None = None,
) -> None:
    """Run ``server`` on ``pipes`` until the client closes stdin (or the caller cancels);
    ``answered``: results already sent for these request ids (``early_stdio``): the lane
    learns from them as from the server's own answers, which are then dropped once."""
    early = dict(answered or {})  # until the request is read again
    already = set(early)  # until the server's answer is dropped
    to_server, server_reads = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    server_writes, from_server = anyio.create_memory_object_stream[SessionMessage](0)

    async def read_lines(tasks: anyio.abc.TaskGroup) -> None:
        async with to_server:
            while (line := await _read_line(pipes.reader)) is not None:
                # Backpressure: a client that does not read its answers stops being read.
                # Waiting for stdout to drain (and a turn of the loop, so answers already
                # under way are written) bounds what unread answers and requests hold.
                await pipes.writer.drain()
                await anyio.lowlevel.checkpoint()
                if isinstance(line, _Overlong):
                    pipes.write_line(_error_line(mcp_types.PARSE_ERROR, str(line)))
                    continue
                if wire_json.text_too_deep(line):  # before any parser (they recurse)
                    _refusals.note("a message nested too deep was refused")
                    message_id = leading_id(line)  # so that the client's call ends
                    pipes.write_line(
                        _error_line(mcp_types.PARSE_ERROR, wire_json.TOO_DEEP_MESSAGE, message_id)
                    )
                    continue
                if lane is not None and lane.take(line, tasks):
                    continue
                try:
                    message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                except ValueError as error:  # JSON-RPC asks for an answer, the SDK gives none
                    pipes.write_line(_malformed_answer(line, error))
                    continue
                if isinstance(message, mcp_types.JSONRPCNotification) and _has_id(line):
                    # An id the SDK could not take (``true``, ``1.5``, ``null``) made the
                    # request pass for a notification, which nobody would ever answer.
                    pipes.write_line(_malformed_answer(line, ValueError("invalid id")))
                    continue
                if early and isinstance(message, mcp_types.JSONRPCRequest) and lane is not None:
                    result = early.pop(message.id, None)
                    if result is not None:  # the client has this answer: so does the lane
                        lane.sent(
                            mcp_types.JSONRPCResponse(jsonrpc="2.0", id=message.id, result=result)
                        )
                await to_server.send(SessionMessage(message))

    async def write_lines() -> None:
        async with from_server:
            async for outgoing in from_server:
                message = outgoing.message
                if lane is not None:
                    lane.sent(message)
                if already and _answer_id(message) in already:
                    already.discard(_answer_id(message))
                    continue
                pipes.write_line(
                    message.model_dump_json(by_alias=True, exclude_unset=True).encode()
                )
                await pipes.writer.drain()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(write_lines)
        tasks.start_soon(read_lines, tasks)
        await server.run(server_reads, server_writes, server.create_initialization_options())
        tasks.cancel_scope.cancel()


def _answer_id(message: mcp_types.JSONRPCMessage) -> object:
    is_answer = isinstance(message, mcp_types.JSONRPCResponse | mcp_types.JSONRPCError)
    return message.id if is_answer else None


class _Refusals:
    """Warnings about refused lines, at most one a second (the rest counted into the next):
    a flood of bad lines must not become a flood of log."""

    def __init__(self, interval_s: float = 1.0) -> None:
        self._interval_s = interval_s
        self._last = -interval_s
        self._skipped = 0

    def note(self, what: str) -> None:
        now = time.monotonic()
        if now - self._last < self._interval_s:
            self._skipped += 1
            return
        more = (
            f" ({self._skipped} more refused lines since the last warning)" if self._skipped else ""
        )
        logger.warning("stdio: %s%s", what[:300], more)
        self._last, self._skipped = now, 0


_refusals = _Refusals()


class _Overlong(ValueError):
    """A line longer than ``MAX_LINE_BYTES`` (skipped)."""


async def _read_line(reader: asyncio.StreamReader) -> bytes | _Overlong | None:
    """The next line (without its newline), an over-long line's error, or ``None`` at the end."""
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as end:
        return end.partial or None
    except asyncio.LimitOverrunError as overrun:
        await _skip_line(reader, overrun.consumed)
        return _Overlong(f"Parse error: a message over {MAX_LINE_BYTES} bytes was skipped")
    return line[:-1]


async def _skip_line(reader: asyncio.StreamReader, consumed: int) -> None:
    await reader.readexactly(consumed)
    while True:
        try:
            await reader.readuntil(b"\n")
            return
        except asyncio.LimitOverrunError as overrun:
            await reader.readexactly(overrun.consumed)
        except asyncio.IncompleteReadError:
            return


def _malformed_answer(line: bytes, error: ValueError) -> bytes:
    """JSON-RPC's answer to a line that is not JSON (parse error) or not a message."""
    try:
        value: object = wire_json.loads(line)
    except ValueError:
        _refusals.note("a line that is not JSON was answered with a parse error")
        return _error_line(mcp_types.PARSE_ERROR, "Parse error: the message is not JSON")
    request_id = value.get("id") if isinstance(value, dict) else None  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    if isinstance(request_id, bool) or not isinstance(request_id, int | str):
        request_id = None
    detail = error.errors()[0]["msg"] if isinstance(error, ValidationError) else str(error)
    _refusals.note(f"an invalid JSON-RPC message was refused: {detail}")
    return _error_line(
        mcp_types.INVALID_REQUEST,
        f"Invalid request: not a JSON-RPC 2.0 message ({detail})",
        request_id,
    )


def _has_id(line: bytes) -> bool:
    if b'"id"' not in line:
        return False
    try:
        value: object = wire_json.loads(line)
    except ValueError:
        return False
    return isinstance(value, dict) and "id" in value


def _error_line(code: int, message: str, request_id: int | str | None = None) -> bytes:
    answer = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
    return json.dumps(answer, ensure_ascii=False).encode()
