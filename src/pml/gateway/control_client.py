"""Asking a running gateway over its control socket (the client side; standard library only,
so ``pml status`` stays quick).

    answer = ask_gateway(gateway.control_socket)   # {"status": {...}} or raises
    # ControlUnavailable: no socket, nobody listening, too slow, or an answer that is not ours

The protocol is one JSON line each way: the client sends ``{"ask": "status"}``, the gateway
answers one JSON object (``{"status": {...}}`` or ``{"error": {...}}``) and closes. Both
sides bound the sizes and the time they wait (``control.py`` is the serving side).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any, Final, cast

PROTOCOL: Final = 1
MAX_REQUEST_BYTES: Final = 1024  # a request is a short line; a longer one is refused
MAX_ANSWER_BYTES: Final = 2_000_000  # the snapshot is bounded well below this
ASK_TIMEOUT_S: Final = 3.0  # connect, send and read the whole answer
# sun_path holds 108 bytes with its NUL; a longer path is reached through the directory's fd.
MAX_SOCKET_PATH: Final = 107


class ControlUnavailable(Exception):
    """The gateway could not be asked (why, in one line)."""


@contextlib.contextmanager
def socket_address(path: Path) -> Generator[str]:
    """An address ``bind``/``connect`` accept for ``path``: the path itself, or, when it is
    too long for a Unix socket address, the same file reached through an open descriptor of
    its directory (``/proc/self/fd/N/name``, Linux)."""
    text = os.fsdecode(path)
    if len(os.fsencode(text)) <= MAX_SOCKET_PATH:
        yield text
        return
    try:
        directory = os.open(path.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as error:
        raise ControlUnavailable(f"cannot open {path.parent}: {error.strerror}") from None
    try:
        short = f"/proc/self/fd/{directory}/{path.name}"
        if len(os.fsencode(short)) > MAX_SOCKET_PATH or not Path("/proc/self/fd").is_dir():
            raise ControlUnavailable("the control socket's path is too long")
        yield short
    finally:
        os.close(directory)


def ask_gateway(
    path: Path, ask: str = "status", timeout_s: float = ASK_TIMEOUT_S
) -> dict[str, Any]:
    """Send one request to the control socket at ``path``; its JSON answer (an object).

    Raises ``ControlUnavailable`` when there is no socket, nobody answers within
    ``timeout_s``, or the answer is too big or not a JSON object.
    """
    deadline = time.monotonic() + timeout_s
    request = json.dumps({"ask": ask, "protocol": PROTOCOL}).encode() + b"\n"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        try:
            with socket_address(path) as address:
                sock.connect(address)
            sock.sendall(request)
            sock.shutdown(socket.SHUT_WR)
            data = _read_all(sock, deadline)
        except FileNotFoundError:
            raise ControlUnavailable("its control socket is not open (yet)") from None
        except ConnectionRefusedError:
            raise ControlUnavailable("nobody listens on its control socket") from None
        except TimeoutError:
            raise ControlUnavailable(f"no answer within {timeout_s:g} s") from None
        except OSError as error:
            raise ControlUnavailable(f"cannot ask it: {error.strerror or error}") from None
    try:
        loaded: object = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ControlUnavailable("its answer is not JSON") from None
    if not isinstance(loaded, dict):
        raise ControlUnavailable("its answer is not a JSON object")
    return cast(dict[str, Any], loaded)


def _read_all(sock: socket.socket, deadline: float) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        sock.settimeout(left)
        chunk = sock.recv(65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            raise ControlUnavailable("its answer is too big")
        chunks.append(chunk)
