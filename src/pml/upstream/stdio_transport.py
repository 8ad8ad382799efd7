"""PML's stdio transport to an upstream server: its lines read in linear time, and bounded.

    async with Client(stdio_transport("uvx", ["mcp-server-time"], env=env)) as client:
        result = await client.call_tool("get_current_time", {"timezone": "UTC"})

(``open_client`` in ``pml.upstream.transport`` is the usual way in.) It behaves as the SDK's
``stdio_client`` does: the server runs in a session of its own, each message is one JSON
line each way, a line that is not a message reaches the session as its parse error, and on
exit stdin is closed, the server given ``STOP_GRACE_S`` to leave, then its process group is
signalled (SIGTERM, SIGKILL ``FORCE_KILL_S`` later). What differs:

- **Linear time.** The SDK splits ``buffer + chunk`` on every chunk, so one 27 MB line cost
  19 s of the event loop (every other call waited). Here a chunk is searched for its
  newlines once and appended to a ``bytearray``; a line is parsed from bytes, once.
- **A bound.** A line longer than ``MAX_LINE_BYTES`` is never held whole: past the bound
  its bytes are counted and dropped up to its newline, keeping its first and last bytes.
  An answer (``result``/``error`` before the first nested value) whose id shows at either
  end fails its call at once (``the upstream server's answer is larger than N bytes...``);
  anything else over the bound is logged and skipped.
- **Bad bytes.** Invalid UTF-8 is one line's parse error, not the end of the transport
  (the SDK's decoder raised); blank lines are skipped; warnings are one a second at most.

Why 64 MiB: a tool result over ``[sandbox] max_tool_result_bytes`` (10 MB by default) is
refused anyway, pass-through calls included. That limit counts a string's UTF-8 bytes, and
escaping makes its line at most six times longer (``\\u0001`` for a control character), so
a line over 64 MiB holds a result PML would refuse; 64 MiB is also the longest line PML's
own stdio accepts from its clients (``pml.gateway.stdio.MAX_LINE_BYTES``). A gateway that
raises the result limit passes ``line_bound(max_tool_result_bytes)`` as ``max_line_bytes``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TextIO

import anyio
import anyio.abc
import anyio.lowlevel
import mcp_types
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import SessionMessage

from pml.wire_ids import HEAD_BYTES, is_answer, leading_id, trailing_id

logger = logging.getLogger(__name__)

MAX_LINE_BYTES: Final = 64 * 1024 * 1024
# How long a child may take to exit after its stdin closes before it is signalled. The
# SDK's default (2 s) is exactly the grace PML's own MCP client gives PML, so a busy child
# could outlive a PML killed at the end of that grace. PML must be done well inside.
STOP_GRACE_S: Final = 0.5
FORCE_KILL_S: Final = 2.0  # from SIGTERM to SIGKILL of the server's process group
REAP_S: Final = 2.0  # for the event loop to see a killed server gone
FLUSH_S: Final = 0.5  # for messages already accepted to reach the server's stdin
READ_BYTES: Final = 1024 * 1024  # at most this much per read (a pipe gives far less)
TAIL_BYTES: Final = 512  # the end of an over-long line kept for its id
_EXIT_POLL_S: Final = 0.01
_ESCAPING: Final = 6  # the most a JSON string's escapes lengthen its UTF-8 bytes
_ENVELOPE_BYTES: Final = 64 * 1024

TransportStreams = tuple[ReadStream[SessionMessage | Exception], WriteStream[SessionMessage]]


def line_bound(max_result_bytes: int) -> int:
    """The line bound for a result limit: ``MAX_LINE_BYTES``, or more for a larger limit."""
    return max(MAX_LINE_BYTES, _ESCAPING * max_result_bytes + _ENVELOPE_BYTES)


@dataclass(frozen=True, slots=True)
class Overlong:
    """A line longer than the bound: its first and last bytes, and its whole size."""

    head: bytes
    tail: bytes
    size: int


class LineSplitter:
    """Cuts a byte stream into lines (without ``\\n``), each byte looked at once; a line
    over ``max_bytes`` comes out as an ``Overlong`` and is never held whole."""

    def __init__(self, max_bytes: int = MAX_LINE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._line = bytearray()  # the line so far; once over the bound, its head only
        self._tail = bytearray()  # once over the bound, the line's last bytes
        self._size = 0
        self._over = False

    def feed(self, chunk: bytes) -> list[bytes | Overlong]:
        """The lines that ``chunk`` completes."""
        lines: list[bytes | Overlong] = []
        view = memoryview(chunk)
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if self._size == 0 and end - start <= self.max_bytes:
                lines.append(chunk[start:end])  # a whole line in the chunk: one copy
            else:
                self._add(view[start:end])
                lines.append(self._finish())
            start = end + 1
        self._add(view[start:])
        return lines

    def _add(self, piece: memoryview) -> None:
        if not piece:
            return
        self._size += len(piece)
        if not self._over:
            if self._size <= self.max_bytes:
                self._line += piece
                return
            self._over = True
            self._tail = self._line[-TAIL_BYTES:]
            del self._line[HEAD_BYTES:]
        if len(self._line) < HEAD_BYTES:
            self._line += piece[: HEAD_BYTES - len(self._line)]
        self._tail += piece[-TAIL_BYTES:]
        del self._tail[:-TAIL_BYTES]

    def _finish(self) -> bytes | Overlong:
        line, size = bytes(self._line), self._size
        self._line.clear()
        self._size = 0
        if not self._over:
            return line
        self._over = False
        tail = bytes(self._tail)
        self._tail.clear()
        return Overlong(line, tail, size)


class _Warnings:
    """At most one warning a second (the rest counted into the next): a flood of bad lines
    must not become a flood of log."""

    def __init__(self, interval_s: float = 1.0) -> None:
        self._interval_s = interval_s
        self._last = -interval_s
        self._skipped = 0

    def note(self, message: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._last < self._interval_s:
            self._skipped += 1
            return
        more = f" ({self._skipped} more since the last warning)" if self._skipped else ""
        logger.warning(message + "%s", *args, more)
        self._last, self._skipped = now, 0


_warnings = _Warnings()


def too_large_message(max_bytes: int) -> str:
    """The error a call gets when its answer's line is over the bound."""
    return (
        f"the upstream server's answer is larger than {max_bytes} bytes, the most PML reads"
        " in one message (it was dropped)"
    )


def session_item(line: bytes | Overlong, max_bytes: int) -> SessionMessage | Exception | None:
    """What the session reads for one line: its message, its parse error (as the SDK gives
    it), an error answer for an over-long answer's call, or ``None`` (skipped)."""
    if isinstance(line, Overlong):
        request_id = None
        if is_answer(line.head):
            request_id = leading_id(line.head)
            if request_id is None:
                request_id = trailing_id(line.tail)
        _warnings.note(
            "upstream: a %d-byte message (over %d) was skipped%s",
            line.size,
            max_bytes,
            f"; its call {request_id!r} fails" if request_id is not None else "",
        )
        if request_id is None:
            return None
        error = mcp_types.ErrorData(
            code=mcp_types.INTERNAL_ERROR, message=too_large_message(max_bytes)
        )
        return SessionMessage(mcp_types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))
    if not line or line.isspace():
        return None  # blank lines (a stray print) mean nothing
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as error:  # passed on: ``results_wire.readable`` answers deep ones
        _warnings.note("upstream: a line that is not a JSON-RPC message: %r", line[:200])
        return error


@asynccontextmanager
async def stdio_transport(
    command: str,
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str],
    cwd: str | Path | None = None,
    errlog: TextIO | int | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
    stop_grace_s: float = STOP_GRACE_S,
) -> AsyncGenerator[TransportStreams]:
    """Start ``command args`` (``env`` exactly, no more) and yield the session's streams."""
    process = await anyio.open_process(
        [command, *args], env=dict(env), cwd=cwd, stderr=errlog, start_new_session=True
    )
    # No await until the task group is entered, or a cancellation would leak the process.
    to_session, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    stdin, stdout = process.stdin, process.stdout
    assert stdin is not None
    assert stdout is not None
    writer_done = anyio.Event()
    shutting_down = False

    async def read_stdout() -> None:
        splitter = LineSplitter(max_line_bytes)
        try:
            async with to_session:
                try:
                    while True:
                        try:
                            chunk = await stdout.receive(READ_BYTES)
                        except anyio.EndOfStream:
                            return  # an unfinished last line is no message
                        # One chunk at a time: no read-ahead while a delivery waits.
                        for line in splitter.feed(chunk):
                            item = session_item(line, max_line_bytes)
                            if item is None:
                                continue
                            try:
                                await to_session.send(item)
                            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                                return  # the session is gone; only the drain is left
                finally:
                    await _drain(stdout)
        except anyio.ClosedResourceError:
            pass  # the shutdown closed stdout under the read
        except (anyio.BrokenResourceError, OSError):
            if not shutting_down:
                logger.exception("reading an upstream server's stdout failed")

    async def write_stdin() -> None:
        try:
            async with from_session:
                async for outgoing in from_session:
                    text = outgoing.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await stdin.send(text.encode() + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            # The server may live on: end the session's reads rather than leave calls waiting.
            await to_session.aclose()
        finally:
            writer_done.set()

    async def shutdown() -> None:
        read_stream.close()  # the reader drains instead: a server blocked on stdout can stop
        write_stream.close()
        with anyio.move_on_after(FLUSH_S):
            await writer_done.wait()
        await _stop(process, stop_grace_s)
        for stream in (read_stream, write_stream, to_session, from_session):
            await stream.aclose()
        await anyio.lowlevel.checkpoint()  # the pipe tasks leave by their own paths first

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(read_stdout)
        tasks.start_soon(write_stdin)
        try:
            yield read_stream, write_stream
        finally:
            shutting_down = True
            with anyio.CancelScope(shield=True):  # every wait inside is bounded
                await shutdown()
            tasks.cancel_scope.cancel()  # a survivor may hold a pipe open
    await anyio.lowlevel.cancel_shielded_checkpoint()


async def _drain(stdout: anyio.abc.ByteReceiveStream) -> None:
    """Read and drop what the server still writes, so that it is never blocked on a full
    pipe when it should be exiting (ends when the pipe closes)."""
    with (
        anyio.CancelScope(shield=True),
        suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError),
    ):
        while True:
            await stdout.receive(READ_BYTES)


async def _stop(process: anyio.abc.Process, grace_s: float) -> None:
    """Close stdin, wait ``grace_s``, then signal the server's process group (MCP's order)."""
    assert process.stdin is not None
    assert process.stdout is not None
    await _close(process.stdin)
    if not await _exited(process, grace_s):
        await terminate_posix_process_tree(process, FORCE_KILL_S)
        if not await _exited(process, REAP_S):
            logger.warning("upstream server process %d survived SIGKILL; left behind", process.pid)
    await _close(process.stdout)  # a survivor may hold it open: unblock the reader anyway
    # asyncio's subprocess transport would stay open (and warn when collected) while a
    # grandchild holds a pipe; nothing public reaches it.
    transport = getattr(getattr(process, "_process", None), "_transport", None)
    close = getattr(transport, "close", None)
    if callable(close):
        with suppress(PermissionError):
            close()


async def _close(stream: anyio.abc.AsyncResource) -> None:
    with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await stream.aclose()


async def _exited(process: anyio.abc.Process, timeout_s: float) -> bool:
    """Whether the process ended within ``timeout_s`` (polled: ``wait()`` would also wait
    for the pipes' end, which a grandchild holding them never gives)."""
    deadline = anyio.current_time() + timeout_s
    while process.returncode is None:
        if anyio.current_time() >= deadline:
            return False
        await anyio.sleep(_EXIT_POLL_S)
    return True
