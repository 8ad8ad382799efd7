"""The gateway's control socket: ``pml status`` asks the running process what it sees now.

    with announce() as announcement:                     # <run dir>/<key>-<pid>.json
        async with open_gateway(settings) as gateway, answering_status(announcement, gateway):
            ...                                          # <run dir>/<key>-<pid>.sock, 0600

A Unix socket beside the process's announcement file (``gateway/running.py``), mode 0600 in
the private run directory, and only a peer of the same user is answered (``SO_PEERCRED``
where the system has it). One JSON line each way (``control_client.py``). Hostile or broken
clients cannot hold the gateway: a request is at most ``MAX_REQUEST_BYTES`` and must arrive
within ``IO_TIMEOUT_S``, the answer must be taken within the same time, at most
``MAX_CLIENTS`` are served at once (the others are closed at once), and nothing a client
sends reaches anything but a JSON parser. When the socket cannot be opened, the gateway
serves all the same and logs why once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import stat
import struct
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, cast

import anyio
from anyio.abc import SocketAttribute, SocketStream

from pml.gateway.control_client import (
    MAX_REQUEST_BYTES,
    PROTOCOL,
    ControlUnavailable,
    socket_address,
)
from pml.gateway.control_snapshot import ServingProcess, status_snapshot
from pml.gateway.running import control_socket_path

if TYPE_CHECKING:
    from pml.gateway.server import Gateway

logger = logging.getLogger(__name__)

IO_TIMEOUT_S: Final = 2.0  # to send the request, and to take the answer
ANSWER_TIMEOUT_S: Final = 5.0  # to build the answer (the database read is bounded inside)
MAX_CLIENTS: Final = 8


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}, "protocol": PROTOCOL}


class _ControlServer:
    """Answers each connection with one JSON object, then closes it."""

    def __init__(self, gateway: Gateway, process: ServingProcess) -> None:
        self._gateway = gateway
        self._process = process
        self._active = 0

    async def handle(self, stream: SocketStream) -> None:
        async with stream:
            if self._active >= MAX_CLIENTS or not _same_user(stream):
                return
            self._active += 1
            try:
                await self._answer(stream)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                pass  # the client went away; nothing to tell anyone
            except Exception:  # a connection's handler: whatever happens, the gateway serves on
                logger.exception("the control socket could not answer a request")
            finally:
                self._active -= 1

    async def _answer(self, stream: SocketStream) -> None:
        request: bytes | None = None
        with anyio.move_on_after(IO_TIMEOUT_S) as reading:
            request = await _read_request(stream)
        if reading.cancelled_caught:
            return  # a client too slow to ask is not answered
        answer = await self._reply(request)
        data = json.dumps(answer, ensure_ascii=False, default=str).encode() + b"\n"
        with anyio.move_on_after(IO_TIMEOUT_S):
            await stream.send(data)

    async def _reply(self, request: bytes | None) -> dict[str, Any]:
        if request is None:
            return _error(
                "INVALID_INPUT", f"a request is one line of at most {MAX_REQUEST_BYTES} bytes"
            )
        try:
            loaded: object = json.loads(request.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return _error("INVALID_INPUT", "a request is a JSON object")
        if not isinstance(loaded, dict):
            return _error("INVALID_INPUT", "a request is a JSON object")
        ask: object = cast(dict[str, Any], loaded).get("ask")
        if ask != "status":
            return _error("INVALID_INPUT", 'the only request is {"ask": "status"}')
        snapshot: dict[str, Any] | None = None
        with anyio.move_on_after(ANSWER_TIMEOUT_S):
            snapshot = await status_snapshot(self._gateway, self._process)
        if snapshot is None:
            return _error("TIMEOUT", "the gateway could not build its status in time")
        return {"status": snapshot, "protocol": PROTOCOL}


async def _read_request(stream: SocketStream) -> bytes | None:
    """The first line the client sends (or all it sent before closing its side); None when
    it is longer than ``MAX_REQUEST_BYTES``."""
    buffer = b""
    while b"\n" not in buffer:
        try:
            chunk = await stream.receive(MAX_REQUEST_BYTES + 1)
        except anyio.EndOfStream:
            break
        buffer += chunk
        if len(buffer) > MAX_REQUEST_BYTES and b"\n" not in buffer[: MAX_REQUEST_BYTES + 1]:
            return None
    line = buffer.split(b"\n", 1)[0]
    return line if len(line) <= MAX_REQUEST_BYTES else None


def _same_user(stream: SocketStream) -> bool:
    """Whether the peer runs as this process's user (True where the system cannot say: the
    socket's mode 0600 in a 0700 directory is then the only gate)."""
    if not hasattr(socket, "SO_PEERCRED"):
        return True
    raw = stream.extra(SocketAttribute.raw_socket)
    try:
        credentials = raw.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return False
    _pid, uid, _gid = struct.unpack("3i", credentials)
    return uid == os.getuid()


def _serving_process(announcement: Path) -> ServingProcess | None:
    """This process as its own announcement file names it (None when it cannot be read)."""
    try:
        loaded: object = json.loads(announcement.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(loaded, dict):
        return None
    fields = cast(dict[str, Any], loaded)
    transport, config, started = (
        fields.get("transport"),
        fields.get("config"),
        fields.get("started_at"),
    )
    if not (isinstance(transport, str) and isinstance(config, str)):
        return None
    if not isinstance(started, int | float) or isinstance(started, bool):
        return None
    return ServingProcess(transport, config, float(started))


def _private_directory(directory: Path) -> bool:
    """Whether ``directory`` is ours and closed to others (made so when it is ours)."""
    try:
        found = directory.stat()
        if found.st_uid != os.getuid() or not stat.S_ISDIR(found.st_mode):
            return False
        if found.st_mode & 0o077:
            directory.chmod(0o700)
    except OSError:
        return False
    return True


@asynccontextmanager
async def answering_status(announcement: object, gateway: Gateway) -> AsyncGenerator[Path | None]:
    """Serve the control socket beside ``announcement`` (what the announce block gave: the
    file's path, or None when it was not written) while the block runs; yields the socket's
    path (None when there is no announcement or the socket cannot be opened)."""
    process = _serving_process(announcement) if isinstance(announcement, Path) else None
    if not isinstance(announcement, Path) or process is None:
        yield None
        return
    path = control_socket_path(announcement)
    if not _private_directory(path.parent):
        logger.warning("no control socket: %s is not a private directory of this user", path.parent)
        yield None
        return
    try:
        with socket_address(path) as address:
            listener = await anyio.create_unix_listener(address, mode=0o600)
    except (OSError, ControlUnavailable) as error:
        logger.warning(
            "no control socket at %s (pml status will not see this gateway live): %s", path, error
        )
        yield None
        return
    server = _ControlServer(gateway, process)
    try:
        async with listener, anyio.create_task_group() as group:
            group.start_soon(listener.serve, server.handle)
            try:
                yield path
            finally:
                group.cancel_scope.cancel()
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
