"""The shared embedding process: one copy of the model for every local gateway of a user.

    python -m pml.discovery.embed_service --socket PATH [--idle-s 120] [--detach]

Each ``pml serve --stdio`` (one per agent window) would otherwise load its own copy of the
model, ~70 MB of its memory. This process loads it once and answers embed requests on the
Unix socket ``PATH`` (mode 0600, in the user's own run directory), for peers of its own
user only. It stops by itself once no gateway has been connected for ``--idle-s`` seconds,
and removes its socket. A second process started for the same socket finds it answered and
leaves at once, so gateways may start it concurrently. ``--detach`` forks it away from the
gateway that starts it (its own session; never a child the gateway must wait for).

The wire is ``embed_wire``: ``{"op": "hello"}`` answers the model's id, its dimension and
this process's pid; ``{"op": "embed", "texts": [...]}`` answers the rows as float32 bytes.
A malformed request is answered with ``{"ok": false, "error": ...}`` and the connection is
closed; nothing a peer sends can stop the process.
"""

from __future__ import annotations

import argparse
import fcntl
import logging
import os
import signal
import socket
import stat
import struct
import sys
import threading
import time
from collections.abc import Generator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

from pml.discovery.embed_wire import WireError, checked_texts, recv_frame, send_frame
from pml.freed_memory import release_freed_memory

if TYPE_CHECKING:  # numpy comes with the model: a process that leaves at once never loads it
    import numpy as np
    from numpy.typing import NDArray

logger = logging.getLogger("pml.embed_service")

IDLE_S: Final = 120.0
MAX_CONNECTIONS: Final = 64  # one per concurrent embedding of each gateway: a few each
_POLL_S: Final = 0.5
_LARGE_REQUEST_CHARS: Final = 1 << 16


class Model(Protocol):
    """What the service needs of the model (``MiniLmEmbedder``)."""

    model_id: str
    dim: int

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]: ...


class EmbedService:
    """Serves ``model`` on a bound, listening Unix socket until idle for ``idle_s``."""

    def __init__(self, model: Model, listener: socket.socket, *, idle_s: float) -> None:
        self._model = model
        self._listener = listener
        self._idle_s = idle_s
        self._connected = 0
        self._last_left = time.monotonic()
        self._lock = threading.Lock()

    def serve(self) -> None:
        """Accept connections until no peer has been connected for ``idle_s``."""
        self._listener.settimeout(_POLL_S)
        while not self._idle():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError as error:
                logger.warning("accept failed: %s", error)
                time.sleep(_POLL_S)
                continue
            with self._lock:
                full = self._connected >= MAX_CONNECTIONS
                if not full:
                    self._connected += 1
            if full or not _same_user(conn):
                if not full:
                    self._left()
                conn.close()
                continue
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _idle(self) -> bool:
        with self._lock:
            return self._connected == 0 and time.monotonic() - self._last_left >= self._idle_s

    def _answer(self, conn: socket.socket) -> None:
        try:
            with conn:
                conn.settimeout(None)
                while self._one(conn):
                    pass
        finally:
            self._left()

    def _left(self) -> None:
        with self._lock:
            self._connected -= 1
            self._last_left = time.monotonic()

    def _one(self, conn: socket.socket) -> bool:
        """Answer one request; False when the connection is done."""
        try:
            header, payload = recv_frame(conn)
        except (EOFError, OSError):
            return False
        except WireError as error:
            _refuse(conn, error.message)
            return False
        if payload:
            _refuse(conn, "a request carries no payload")
            return False
        try:
            if header.get("op") == "hello":
                model = self._model
                hello = {"ok": True, "model_id": model.model_id, "dim": model.dim}
                send_frame(conn, {**hello, "pid": os.getpid()})
                return True
            if header.get("op") != "embed":
                _refuse(conn, "unknown op: expected 'hello' or 'embed'")
                return False
            texts = checked_texts(header)
        except WireError as error:
            _refuse(conn, error.message)
            return False
        except OSError:
            return False
        return self._embed(conn, texts)

    def _embed(self, conn: socket.socket, texts: list[str]) -> bool:
        try:
            rows = self._model.embed(texts)
        except Exception as error:  # the model failing on one request stops nothing
            logger.exception("embedding failed")
            _refuse(conn, f"embedding failed: {type(error).__name__}")
            return False
        if sum(len(text) for text in texts) > _LARGE_REQUEST_CHARS:
            release_freed_memory()  # the tokenizer's buffers for long texts, not kept
        data = rows.astype("<f4", copy=False).tobytes()
        try:
            send_frame(conn, {"ok": True, "rows": len(texts), "dim": self._model.dim}, data)
        except OSError:
            return False
        return True


def _refuse(conn: socket.socket, message: str) -> None:
    with suppress(OSError, WireError):
        send_frame(conn, {"ok": False, "error": message[:500]})


def _same_user(conn: socket.socket) -> bool:
    """The peer runs as this process's user (Linux ``SO_PEERCRED``; elsewhere the socket's
    0600 mode in a 0700 directory is the check)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return True
    try:
        raw = conn.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i"))
    except OSError:
        return False
    _pid, uid, _gid = struct.unpack("3i", raw)
    return uid == os.geteuid()


def answers(path: Path, timeout_s: float = 1.0) -> bool:
    """Something accepts connections on the Unix socket ``path``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(timeout_s)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


@contextmanager
def locked(path: Path) -> Generator[None]:
    """Hold the lock file beside the socket ``path``: one process at a time checks whether
    it is served, loads the model and binds it."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    descriptor = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # closing releases the lock


def bind(path: Path) -> socket.socket:
    """A listening socket at ``path`` (mode 0600), replacing a socket file that a process
    which died left; the caller holds ``locked(path)`` and found nobody answering."""
    with suppress(FileNotFoundError):
        if stat.S_ISSOCK(path.lstat().st_mode):
            path.unlink()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        old_mask = os.umask(0o177)
        try:
            listener.bind(str(path))
        finally:
            os.umask(old_mask)
        listener.listen(64)
    except OSError:
        listener.close()
        raise
    return listener


def bind_once(path: Path) -> socket.socket | None:
    """A listening socket at ``path``, or None when another process already serves it."""
    with locked(path):
        return None if answers(path) else bind(path)


def _remove_if_ours(path: Path, inode: int) -> None:
    """Remove the socket file unless another process has bound a new one there since."""
    with suppress(OSError):
        if path.lstat().st_ino == inode:
            path.unlink()


def _load_model() -> Model:
    from pml.discovery.minilm import checked_model, minilm_from

    return minilm_from(*checked_model())


def _exit_now(_number: int, _frame: object) -> None:
    sys.exit(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pml.discovery.embed_service")
    parser.add_argument("--socket", required=True, type=Path)
    parser.add_argument("--idle-s", type=float, default=IDLE_S)
    parser.add_argument("--detach", action="store_true")
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    if options.detach and os.fork() > 0:
        os._exit(0)  # the gateway's child ends here; the grandchild serves
    with suppress(OSError):
        os.setsid()
    signal.signal(signal.SIGTERM, _exit_now)  # SIGTERM also removes the socket
    path: Path = options.socket
    with locked(path):  # a second process started meanwhile waits here, then leaves
        if answers(path):
            return 0
        model = _load_model()  # before binding: a gateway connects only to a ready model
        listener = bind(path)
    inode = path.lstat().st_ino
    try:
        EmbedService(model, listener, idle_s=options.idle_s).serve()
    finally:
        _remove_if_ours(path, inode)
        listener.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
