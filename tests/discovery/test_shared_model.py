"""The shared embedding process (``embed_service``) and its client (``SharedModel``): real
processes started by the client on a Unix socket in a temporary run directory, the real
model; the vectors must be those of the model in this process."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import struct
import tempfile
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from pml.discovery.embed_service import MAX_CONNECTIONS, answers, bind_once
from pml.discovery.embed_wire import MAX_TEXT_CHARS, MAX_TEXTS, recv_frame, send_frame
from pml.discovery.embedder import DeferredMiniLm, load_embedder
from pml.discovery.minilm import DIM, MODEL_ID, installed_model_dir
from pml.discovery.shared_model import SharedModel, socket_path, start_service

pytestmark = pytest.mark.skipif(installed_model_dir() is None, reason="model not installed")

TEXTS = ["read a file", "list open pull requests", "", "héllo wörld 日本語 🚀"]
IDLE_S = 3.0


def _own() -> DeferredMiniLm:
    own = load_embedder("minilm")
    assert isinstance(own, DeferredMiniLm)
    return own


@pytest.fixture
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A short run directory (a socket path must fit 108 bytes); its process is stopped."""
    directory = Path(f"/tmp/pml-em-{os.getpid()}-{time.monotonic_ns() % 10**9}")
    directory.mkdir(mode=0o700)
    yield directory
    path = socket_path(directory)
    assert path is not None
    for pid in _service_pids(path):
        os.kill(pid, signal.SIGTERM)
    _wait(lambda: not _service_pids(path), 10.0)
    for item in directory.iterdir():
        item.unlink()
    directory.rmdir()


def _service_pids(path: Path) -> list[int]:
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if os.fsencode(path) in argv and b"pml.discovery.embed_service" in argv:
                found.append(int(entry.name))
    return found


def _wait(condition: object, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return True
        time.sleep(0.05)
    return False


def _shared(run_dir: Path, **options: object) -> SharedModel:
    path = socket_path(run_dir)
    assert path is not None
    start = partial(start_service, idle_s=IDLE_S)
    return SharedModel(path, own=_own, start=start, **options)  # pyright: ignore[reportArgumentType]


def _served(run_dir: Path) -> tuple[SharedModel, Path]:
    """A model whose process runs (one embedding done) and the socket it serves on."""
    model = _shared(run_dir)
    model.embed(["warm"])
    path = socket_path(run_dir)
    assert path is not None
    return model, path


def test_the_shared_process_gives_the_vectors_of_the_model_in_this_process(run_dir: Path) -> None:
    model = _shared(run_dir)
    assert model.process == "the shared embedding process"  # not reached yet
    shared = model.embed(TEXTS)
    assert model.shared
    path = socket_path(run_dir)
    assert path is not None
    assert model.process == f"the shared embedding process (pid {_service_pids(path)[0]})"
    assert (model.model_id, model.dim) == (MODEL_ID, DIM)
    np.testing.assert_array_equal(shared, _own().embed(TEXTS))
    assert shared.dtype == np.float32
    assert shared.shape == (len(TEXTS), DIM)
    assert np.allclose(np.linalg.norm(shared[[0, 1, 3]], axis=1), 1.0)
    assert not shared[2].any()  # a text without tokens stays a zero row
    assert np.array_equal(model.embed([]), np.zeros((0, DIM), dtype=np.float32))


def test_a_lone_surrogate_travels_as_a_replacement_character(run_dir: Path) -> None:
    model = _shared(run_dir)
    vectors = model.embed(["abc \ud800 def"])
    np.testing.assert_array_equal(vectors, _own().embed(["abc \ufffd def"]))
    assert model.shared


def test_many_and_long_texts_travel_in_bounded_frames_with_the_same_vectors(
    run_dir: Path,
) -> None:
    texts = [f"tool {i} reads files" for i in range(MAX_TEXTS * 2 + 3)]
    texts[5] = "word " * 20_000  # longer than a frame takes: cut, same first 256 tokens
    model = _shared(run_dir)
    np.testing.assert_array_equal(model.embed(texts), _own().embed(texts))
    assert model.shared


def test_two_gateways_use_one_process_which_stops_once_unused(run_dir: Path) -> None:
    first, second = _shared(run_dir), _shared(run_dir)
    first.embed(["a"])
    second.embed(["b"])
    path = socket_path(run_dir)
    assert path is not None
    assert len(_service_pids(path)) == 1
    assert path.exists()
    assert (path.stat().st_mode & 0o777) == 0o600
    for model in (first, second):  # the gateways went away: their connections close
        model.close()
    assert _wait(lambda: not _service_pids(path), IDLE_S + 10)
    assert not path.exists()


def test_a_process_that_died_is_started_again_on_the_next_call(run_dir: Path) -> None:
    model = _shared(run_dir)
    model.embed(["first"])
    path = socket_path(run_dir)
    assert path is not None
    (pid,) = _service_pids(path)
    os.kill(pid, signal.SIGKILL)
    assert _wait(lambda: not _service_pids(path), 5.0)
    np.testing.assert_array_equal(model.embed(["again"]), _own().embed(["again"]))
    assert model.shared
    assert _service_pids(path) != [pid]


def test_a_process_that_cannot_start_leaves_the_model_in_this_process(
    run_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = socket_path(run_dir)
    assert path is not None
    model = SharedModel(path, own=_own, start=lambda _path: None, wait_s=0.3)
    with caplog.at_level(logging.WARNING, logger="pml.discovery.shared_model"):
        vectors = model.embed(TEXTS)
    np.testing.assert_array_equal(vectors, _own().embed(TEXTS))
    assert not model.shared
    assert model.process.startswith("this process (the shared embedding process could not")
    assert "the shared embedding process cannot be used" in caplog.text
    assert "did not answer within 0.3 s" in caplog.text


def test_a_process_that_never_answers_is_given_up_after_the_wait(run_dir: Path) -> None:
    path = socket_path(run_dir)
    assert path is not None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as mute:
        mute.bind(str(path))
        mute.listen(4)  # connections are accepted by the kernel, never answered
        model = SharedModel(path, own=_own, start=lambda _path: None, wait_s=0.5)
        started = time.monotonic()
        vectors = model.embed(["read a file"])
        assert time.monotonic() - started < 5.0
    np.testing.assert_array_equal(vectors, _own().embed(["read a file"]))
    assert not model.shared


def test_a_process_serving_another_model_is_not_used(run_dir: Path) -> None:
    path = socket_path(run_dir)
    assert path is not None
    listener = bind_once(path)
    assert listener is not None
    with listener:
        model = SharedModel(path, own=_own, start=lambda _path: None, wait_s=2.0)

        def impostor() -> None:
            conn, _ = listener.accept()
            with conn:
                recv_frame(conn)
                send_frame(conn, {"ok": True, "model_id": "other/1", "dim": DIM})

        thread = threading.Thread(target=impostor)
        thread.start()
        vectors = model.embed(["x"])
        thread.join(5)
    np.testing.assert_array_equal(vectors, _own().embed(["x"]))
    assert not model.shared


def test_only_one_process_binds_a_socket_and_a_stale_one_is_replaced(run_dir: Path) -> None:
    path = run_dir / "s.sock"
    first = bind_once(path)
    assert first is not None
    with first:
        assert answers(path)
        assert bind_once(path) is None  # served already: a second process leaves
    assert path.exists()
    assert not answers(path)
    again = bind_once(path)
    assert again is not None
    with again:
        assert answers(path)


def _raw(path: Path) -> socket.socket:
    """A plain connection (retried while the listen backlog is full)."""
    deadline = time.monotonic() + 10
    while True:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(10)
        try:
            conn.connect(str(path))
        except BlockingIOError:
            conn.close()
            assert time.monotonic() < deadline, "the process never accepted"
            time.sleep(0.02)
            continue
        return conn


def _frame(header: bytes, payload: bytes = b"") -> bytes:
    return struct.pack(">II", len(header), len(payload)) + header + payload


HOSTILE_FRAMES = {
    "huge-lengths": struct.pack(">II", 2**31, 2**31),
    "header-over-bound": struct.pack(">II", 64 * 2**20, 0),
    "not-json": _frame(b"{oops"),
    "not-utf8": _frame(b"\xff\xfe\x00"),
    "json-list": _frame(b"[]"),
    "deep-json": _frame(b"[" * 100_000 + b"]" * 100_000),
    "unknown-op": _frame(b'{"op":"shutdown"}'),
    "texts-not-list": _frame(b'{"op":"embed","texts":"abc"}'),
    "text-not-str": _frame(b'{"op":"embed","texts":[1, null]}'),
    "injection": _frame(b'{"op":"embed\'; DROP TABLE x;--","texts":[]}'),
    "payload-in-request": _frame(b'{"op":"hello"}', b"\x00" * 10),
    "cut-short": struct.pack(">II", 100, 0) + b'{"op":',
}


@pytest.mark.parametrize("frame", list(HOSTILE_FRAMES.values()), ids=list(HOSTILE_FRAMES))
def test_a_hostile_peer_gets_an_error_or_a_closed_connection_and_others_are_served(
    run_dir: Path, frame: bytes
) -> None:
    model, path = _served(run_dir)
    with _raw(path) as conn:
        conn.sendall(frame)
        conn.shutdown(socket.SHUT_WR)
        try:
            header, _ = recv_frame(conn)
            assert header["ok"] is False
            assert isinstance(header["error"], str)
        except EOFError:
            pass  # closed without an answer
    np.testing.assert_array_equal(model.embed(TEXTS), _own().embed(TEXTS))
    assert model.shared


@pytest.mark.parametrize(
    "texts",
    [["x"] * (MAX_TEXTS + 1), ["y" * (MAX_TEXT_CHARS + 1)]],
    ids=["too-many", "too-long"],
)
def test_a_request_over_the_bounds_is_refused_by_the_process(
    run_dir: Path, texts: list[str]
) -> None:
    model, path = _served(run_dir)
    with _raw(path) as conn:
        send_frame(conn, {"op": "embed", "texts": texts})
        header, payload = recv_frame(conn)
    assert header["ok"] is False
    assert payload == b""
    assert "at most" in header["error"]
    np.testing.assert_array_equal(model.embed(["after"]), _own().embed(["after"]))


def test_a_run_directory_too_deep_for_a_socket_puts_it_in_a_private_temporary_one(
    tmp_path: Path,
) -> None:
    deep = tmp_path / ("d" * 120)
    path = socket_path(deep)
    assert path is not None
    assert path.parent == Path(tempfile.gettempdir()) / f"pml-{os.getuid()}"
    assert path != socket_path(tmp_path / ("e" * 120))  # each run directory its own
    assert path.parent.stat().st_uid == os.getuid()
    assert not path.parent.stat().st_mode & 0o022


def test_a_run_directory_others_may_write_to_is_not_used(tmp_path: Path) -> None:
    shared = tmp_path / "run"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    path = socket_path(shared)
    assert path is not None
    assert path.parent != shared


def test_the_hashing_embedder_never_uses_the_shared_process(tmp_path: Path) -> None:
    assert load_embedder("hashing", shared_in=tmp_path).model_id.startswith("hashing")
    assert not list(tmp_path.iterdir())


def _closed(conn: socket.socket) -> bool:
    conn.setblocking(False)
    try:
        return conn.recv(1) == b""
    except BlockingIOError:
        return False


def test_connections_past_the_bound_are_closed_and_the_process_goes_on(run_dir: Path) -> None:
    model, path = _served(run_dir)  # its connection is one of the bound
    extra = MAX_CONNECTIONS + 5
    conns = [_raw(path) for _ in range(extra)]
    try:
        expected = extra - (MAX_CONNECTIONS - 1)
        open_ones, closed = list(conns), 0
        deadline = time.monotonic() + 10
        while closed < expected and time.monotonic() < deadline:
            time.sleep(0.1)
            for conn in list(open_ones):
                conn.setblocking(False)
                with contextlib.suppress(BlockingIOError):  # nothing to read: open, served
                    if conn.recv(1) == b"":
                        closed += 1
                        open_ones.remove(conn)
        time.sleep(0.3)  # and no more than those
        assert closed + sum(_closed(conn) for conn in open_ones) == expected
    finally:
        for conn in conns:
            conn.close()
    np.testing.assert_array_equal(model.embed(["after"]), _own().embed(["after"]))
    assert model.shared
