"""The embedding model as served by the shared embedding process (``embed_service``).

    model = SharedModel(socket_path(run_dir), own=lambda: load_embedder("minilm"))
    vectors = model.embed(["read a file"])   # the same rows as the model in this process

The first ``embed`` connects to the process on that socket, starting it when nothing
answers there (it outlives this gateway while other gateways use it, then stops by itself).
Connections are kept for the next calls, one per concurrent caller. Whenever the process
cannot be started, reached or understood, the model is loaded in this process (``own``),
once, with a warning, and serves every later call: discovery never stops for it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np
from numpy.typing import NDArray

from pml.discovery.embed_wire import MAX_TEXT_CHARS, MAX_TEXTS, WireError, recv_frame, send_frame
from pml.discovery.minilm import DIM, MODEL_ID

if TYPE_CHECKING:
    from pml.discovery.embedder import Embedder

logger = logging.getLogger(__name__)

START_WAIT_S: Final = 20.0  # an import and a model build: ~1 s here, far more on a busy host
_KEPT_CONNECTIONS: Final = 4
_MAX_SOCKET_PATH: Final = 100  # sun_path holds 108 bytes on Linux, 104 on macOS
_MAX_LOG_BYTES: Final = 1 << 20
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
SERVICE_MODULE: Final = "pml.discovery.embed_service"


def socket_path(run_dir: Path) -> Path | None:
    """The socket of this installation's shared process for ``run_dir``: in it, or in a
    private directory of this user under the temporary directory when that path is too long
    for a Unix socket (None when neither can be used). Another interpreter, PML version or
    run directory gets its own process."""
    from pml import __version__

    identity = f"{MODEL_ID}|{__version__}|{sys.executable}|{run_dir}"
    name = f"embed-{hashlib.sha256(identity.encode()).hexdigest()[:16]}.sock"
    for directory in (run_dir, Path(tempfile.gettempdir()) / f"pml-{os.getuid()}"):
        path = directory / name
        if len(os.fsencode(path)) <= _MAX_SOCKET_PATH and _private(directory):
            return path
    return None


def _private(directory: Path) -> bool:
    """``directory`` exists or is made (0700), is this user's own and nobody else may add or
    replace files in it (the socket itself is 0600)."""
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        found = directory.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(found.st_mode) and found.st_uid == os.getuid() and not found.st_mode & 0o022


def start_service(path: Path, *, idle_s: float | None = None) -> None:
    """Start the shared process for ``path``, detached (its log beside the socket); it stops
    once no gateway has been connected for ``idle_s`` (default: its own)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    log = path.with_suffix(".log")
    with suppress(OSError):
        if log.stat().st_size > _MAX_LOG_BYTES:
            log.unlink()
    with open(log, "ab") as err:
        launcher = subprocess.Popen(
            [sys.executable, "-m", SERVICE_MODULE, "--socket", str(path), "--detach"]
            + ([] if idle_s is None else ["--idle-s", str(idle_s)]),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )
    launcher.wait(timeout=START_WAIT_S)  # it forks the server and returns at once


class SharedModel:
    """``Embedder`` over the shared process, with the model in this process as fallback."""

    model_id: str = MODEL_ID
    dim: int = DIM

    def __init__(
        self,
        path: Path,
        own: Callable[[], Embedder],
        *,
        start: Callable[[Path], None] = start_service,
        wait_s: float = START_WAIT_S,
    ) -> None:
        self._path = path
        self._own_factory = own
        self._start = start
        self._wait_s = wait_s
        self._own: Embedder | None = None
        self._idle: list[socket.socket] = []
        self._service_pid: int | None = None
        self._lock = threading.Lock()
        self._starting = threading.Lock()

    @property
    def shared(self) -> bool:
        """Whether calls still go to the shared process (False once fallen back)."""
        return self._own is None

    @property
    def process(self) -> str:
        """Where the model runs, for ``pml status``."""
        if self._own is not None:
            return "this process (the shared embedding process could not be used)"
        pid = self._service_pid
        return "the shared embedding process" + (f" (pid {pid})" if pid else "")

    def close(self) -> None:
        """Close the kept connections (a later ``embed`` connects again)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """See ``Embedder.embed``."""
        own = self._own
        if own is not None:
            return own.embed(texts)
        try:
            return self._embed_shared(texts)
        except (OSError, WireError, subprocess.SubprocessError) as error:
            return self._fall_back(error).embed(texts)

    def _fall_back(self, error: Exception) -> Embedder:
        with self._lock:
            if self._own is None:
                logger.warning(
                    "the shared embedding process cannot be used (%s): "
                    "the model is loaded in this process",
                    error,
                )
                self._own = self._own_factory()
            own = self._own
        self.close()
        return own

    def _embed_shared(self, texts: Sequence[str]) -> NDArray[np.float32]:
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for start in range(0, len(texts), MAX_TEXTS):
            batch = texts[start : start + MAX_TEXTS]
            chunk = [_well_formed(text[:MAX_TEXT_CHARS]) for text in batch]
            out[start : start + len(chunk)] = self._ask(chunk)
        return out

    def _ask(self, texts: list[str]) -> NDArray[np.float32]:
        conn, reused = self._checkout()
        try:
            rows = _request(conn, texts)
        except (OSError, WireError):
            conn.close()
            if not reused:
                raise
            conn, _ = self._fresh()  # the process went away since: once more, anew
            try:
                rows = _request(conn, texts)
            except BaseException:
                conn.close()
                raise
        except BaseException:
            conn.close()
            raise
        with self._lock:
            if len(self._idle) < _KEPT_CONNECTIONS and self._own is None:
                self._idle.append(conn)
                return rows
        conn.close()
        return rows

    def _checkout(self) -> tuple[socket.socket, bool]:
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        return self._fresh()

    def _fresh(self) -> tuple[socket.socket, bool]:
        """A new connection whose hello names this model; starts the process if need be."""
        conn = _connect(self._path)
        if conn is None:
            with self._starting:  # one start at a time from this process
                conn = _connect(self._path)
                if conn is None:
                    self._start(self._path)
                    conn = self._wait_for_service()
        try:
            self._service_pid = _check_hello(conn, self._wait_s)
        except BaseException:
            conn.close()
            raise
        return conn, False

    def _wait_for_service(self) -> socket.socket:
        deadline = time.monotonic() + self._wait_s
        while time.monotonic() < deadline:
            conn = _connect(self._path)
            if conn is not None:
                return conn
            time.sleep(0.05)
        raise WireError(f"the shared embedding process did not answer within {self._wait_s:g} s")


def _well_formed(text: str) -> str:
    """``text``, its lone surrogates (which UTF-8 cannot carry) replaced by U+FFFD."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def _connect(path: Path) -> socket.socket | None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(path))
    except (FileNotFoundError, ConnectionRefusedError):
        conn.close()
        return None
    except OSError:
        conn.close()
        raise
    return conn


def _check_hello(conn: socket.socket, timeout_s: float) -> int | None:
    """Check the process serves this model; its pid."""
    conn.settimeout(timeout_s)  # also every later request's: a hung process is given up
    send_frame(conn, {"op": "hello"})
    header, _ = _answer(conn)
    if header.get("model_id") != MODEL_ID or header.get("dim") != DIM:
        raise WireError(f"the shared embedding process serves another model: {header!r:.200}")
    pid = header.get("pid")
    return pid if isinstance(pid, int) and not isinstance(pid, bool) else None


def _request(conn: socket.socket, texts: list[str]) -> NDArray[np.float32]:
    send_frame(conn, {"op": "embed", "texts": texts})
    header, payload = _answer(conn)
    if header.get("ok") is not True:
        raise WireError(f"the shared embedding process refused: {header.get('error')!r:.300}")
    if header.get("rows") != len(texts) or len(payload) != len(texts) * DIM * 4:
        raise WireError("the shared embedding process answered rows of another shape")
    return np.frombuffer(payload, dtype="<f4").reshape(len(texts), DIM).astype(np.float32)


def _answer(conn: socket.socket) -> tuple[dict[str, object], bytes]:
    try:
        return recv_frame(conn)
    except EOFError:
        raise WireError("the shared embedding process closed the connection") from None
