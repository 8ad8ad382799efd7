"""Answering an agent's opening request while ``pml serve --stdio`` is still starting.

An MCP client spawns the gateway and sends its opening request at once: ``initialize``
(2025-11-25 and older) or ``server/discover`` (2026-07-28). Importing the gateway and
opening it takes longer than a client should wait for that answer, so the command starts an
``EarlyAnswers`` thread first (this module needs the standard library only): it reads
stdin, answers a well-formed opening request from ``HELLO`` at once, and keeps every byte
it read. When the gateway is ready to serve, ``handover()`` stops the thread and returns the
bytes and the ids it answered: the serving loop reads those bytes first (the SDK server
then sees the whole conversation, opening included) and drops its own answer to each id
answered here, so the client gets exactly one answer per request.

    early = EarlyAnswers.start()          # None when stdin/stdout are not pipes
    ...                                   # heavy imports, opening the gateway
    handed = early.handover()             # HandedOver(pending=b"...", answered={1: {...}})

``HELLO`` must equal what the gateway's SDK server answers (tests compare both); anything
else — another method, a malformed request, a protocol version not known here — is left to
the SDK server after the hand-over.
"""

from __future__ import annotations

import json
import logging
import os
import select
import stat
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Final, cast

from pml import __version__, wire_json

logger = logging.getLogger(__name__)

INSTRUCTIONS: Final = (
    "PML is a gateway to many MCP servers that learns reusable capabilities. Use pml_discover "
    "to find tools and capabilities for an intent, pml_execute to run a Python snippet that "
    "calls them (successful snippets become capabilities) or a capability by name, and the "
    "cap_* tools to list, look up, rename and curate capabilities."
)
SERVER_INFO: Final = {"name": "pml", "title": "PML gateway", "version": __version__}
# What the gateway's server declares (tests check it against the SDK's own answer).
CAPABILITIES: Final = {
    "completions": {},
    "logging": {},
    "prompts": {"listChanged": True},
    "resources": {"listChanged": True, "subscribe": True},
    "tools": {"listChanged": True},
}
HANDSHAKE_VERSIONS: Final = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSIONS: Final = ("2026-07-28",)
PROTOCOL_VERSION_KEY: Final = "io.modelcontextprotocol/protocolVersion"
SERVER_INFO_KEY: Final = "io.modelcontextprotocol/serverInfo"
CLIENT_KEYS_INITIALIZE: Final = ("clientInfo", "capabilities")
CLIENT_KEYS_DISCOVER: Final = (
    "io.modelcontextprotocol/clientInfo",
    "io.modelcontextprotocol/clientCapabilities",
)
MAX_OPENING_BYTES: Final = 1024 * 1024  # an opening line longer than this is left to the SDK
POLL_S: Final = 0.05


def opening_answer(line: bytes) -> tuple[int | str, dict[str, Any]] | None:
    """``(id, result)`` of the SDK's answer to ``line`` if it is a well-formed opening
    request answered here, else ``None``."""
    if len(line) > MAX_OPENING_BYTES or b"jsonrpc" not in line:
        return None
    try:
        decoded: object = wire_json.loads(line)  # deep nesting: a ValueError, never a crash
    except ValueError:
        return None
    message = _object(decoded)
    if message is None or message.get("jsonrpc") != "2.0":
        return None
    request_id = message.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, int | str):
        return None
    params = _object(message.get("params", {}))
    if params is None:
        return None
    if message.get("method") == "initialize":
        result = _initialize_result(params)
    elif message.get("method") == "server/discover":
        result = _discover_result(params)
    else:
        return None
    return None if result is None else (request_id, result)


def _initialize_result(params: dict[str, Any]) -> dict[str, Any] | None:
    asked = params.get("protocolVersion")
    if not isinstance(asked, str) or not _plausible_client(params, CLIENT_KEYS_INITIALIZE):
        return None
    return {
        "capabilities": CAPABILITIES,
        "instructions": INSTRUCTIONS,
        "protocolVersion": asked if asked in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1],
        "serverInfo": SERVER_INFO,
    }


def _discover_result(params: dict[str, Any]) -> dict[str, Any] | None:
    meta = _object(params.get("_meta"))
    if meta is None or meta.get(PROTOCOL_VERSION_KEY) not in MODERN_VERSIONS:
        return None
    if not _plausible_client(meta, CLIENT_KEYS_DISCOVER):
        return None
    return {
        "cacheScope": "private",
        "capabilities": CAPABILITIES,
        "instructions": INSTRUCTIONS,
        "resultType": "complete",
        "supportedVersions": list(MODERN_VERSIONS),
        "ttlMs": 0,
        "_meta": {SERVER_INFO_KEY: SERVER_INFO},
    }


def _plausible_client(holder: dict[str, Any], keys: tuple[str, str]) -> bool:
    """Whether the client's info and capabilities have the shape the SDK validates (its
    answer to anything else is left to it): ``{name, version}`` strings, object capabilities."""
    info, capabilities = _object(holder.get(keys[0])), _object(holder.get(keys[1]))
    if info is None or capabilities is None:
        return False
    if not all(isinstance(info.get(key), str) for key in ("name", "version")):
        return False
    return all(isinstance(value, dict) for value in capabilities.values())


def _object(value: object) -> dict[str, Any] | None:
    """``value`` as a JSON object, or ``None`` when it is not one."""
    return cast(dict[str, Any], value) if isinstance(value, dict) else None


Result = dict[str, Any]


@dataclass(slots=True)
class HandedOver:
    """What the early reader took from stdin, and the results it answered, by request id."""

    pending: bytes = b""
    answered: dict[int | str, dict[str, Any]] = field(
        default_factory=dict[int | str, dict[str, Any]]
    )
    started_at: float | None = None  # when the process began serving (monotonic clock)


class EarlyAnswers:
    """The thread answering the opening request before the gateway serves (see module)."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.started_at = time.monotonic()  # anyio.current_time()'s clock on asyncio
        self._read_fd = read_fd
        self._write_fd = write_fd
        self._buffer = bytearray()
        self._scanned = 0  # bytes of _buffer already looked at for an opening request
        self._answered: dict[int | str, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pml-early-stdio", daemon=True)

    @classmethod
    def start(cls, read_fd: int = 0, write_fd: int = 1) -> EarlyAnswers | None:
        """Start answering on ``read_fd``/``write_fd`` (``None`` unless both are pipes)."""
        if not (is_pipe(read_fd) and is_pipe(write_fd)):
            return None
        early = cls(read_fd, write_fd)
        early._thread.start()
        return early

    def handover(self) -> HandedOver:
        """Stop reading; what was read (unanswered or not) and the ids answered."""
        self._stop.set()
        self._thread.join()
        return HandedOver(bytes(self._buffer), dict(self._answered), self.started_at)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                ready, _, _ = select.select([self._read_fd], [], [], POLL_S)
                if not ready:
                    continue
                chunk = os.read(self._read_fd, 65536)
                if not chunk:
                    return  # the client closed stdin: the serving loop will see the end
                self._buffer += chunk
                self._answer_complete_lines()
        except OSError as error:  # the serving loop meets the same descriptor's trouble
            logger.debug("early stdio reader stopped: %s", error)

    def _answer_complete_lines(self) -> None:
        while (end := self._buffer.find(b"\n", self._scanned)) >= 0:
            line = bytes(self._buffer[self._scanned : end])
            self._scanned = end + 1
            found = opening_answer(line)
            if found is None or found[0] in self._answered:
                continue
            request_id, result = found
            answer = {"jsonrpc": "2.0", "id": request_id, "result": result}
            _write_all(self._write_fd, json.dumps(answer, separators=(",", ":")).encode() + b"\n")
            self._answered[request_id] = result


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            select.select([], [fd], [], POLL_S)
            continue
        view = view[written:]


def is_pipe(fd: int) -> bool:
    """Whether ``fd`` is a pipe or a socket (what MCP clients give a stdio server)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)
