"""The control socket ``pml status`` asks: a real gateway (SQLite file, the real pool over two
in-process upstream servers), the real Unix socket, the real client; hostile clients
(garbage, a huge line, a slow client, a crowd) leave it answering."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import AsyncGenerator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import SocketStream

from pml.gateway.control import IO_TIMEOUT_S, MAX_CLIENTS, answering_status
from pml.gateway.control_client import (
    MAX_REQUEST_BYTES,
    ControlUnavailable,
    ask_gateway,
    socket_address,
)
from pml.gateway.running import announced, running_gateways
from pml.gateway.server import Gateway

pytestmark = pytest.mark.anyio

WAIT_S = 20.0


async def ask(path: Path) -> dict[str, Any]:
    return await anyio.to_thread.run_sync(ask_gateway, path)


@pytest.fixture
async def control(gateway: Gateway, tmp_path: Path) -> AsyncGenerator[Path]:
    """The gateway's control socket, beside its announcement file for ``tmp_path/pml.toml``."""
    config = tmp_path / "pml.toml"
    with announced(tmp_path / "run", config, transport="stdio") as announcement:
        assert announcement is not None
        async with answering_status(announcement, gateway) as path:
            assert path is not None
            yield path


async def raw(path: Path) -> SocketStream:
    with socket_address(path) as address:
        return await anyio.connect_unix(address)


async def answer_of(stream: SocketStream) -> bytes:
    """Everything the gateway sends before closing (bounded in time)."""
    data = b""
    with anyio.fail_after(WAIT_S):
        while True:
            try:
                data += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return data


async def test_the_socket_answers_what_the_pool_and_database_hold_now(
    control: Path, gateway: Gateway, tmp_path: Path
) -> None:
    answer = await ask(control)

    status = answer["status"]
    assert answer["protocol"] == 1
    assert stat.S_IMODE((await anyio.Path(control).stat()).st_mode) == 0o600
    assert stat.S_IMODE((await anyio.Path(control.parent).stat()).st_mode) == 0o700
    servers = {server["name"]: server for server in status["servers"]}
    assert set(servers) == {"a", "b"}
    assert {server["state"] for server in servers.values()} <= {"starting", "running"}
    pool = {entry.name: entry for entry in gateway.pool.status()}
    assert servers["a"]["tool_count"] == pool["a"].tool_count
    assert status["gateway"]["pid"] == os.getpid()
    assert status["gateway"]["transport"] == "stdio"
    assert status["gateway"]["config"] == str(tmp_path / "pml.toml")
    assert status["gateway"]["embedding_model"] == gateway.discovery.model_id
    assert status["gateway"]["embedding_process"] == "this process"  # in-process: "auto" is own
    assert status["database"]["reachable"] is True
    assert status["database"]["up_to_date"] is True
    assert set(status["capabilities"]) == {"named", "unnamed", "mcp_servers"}
    found = running_gateways(tmp_path / "run", tmp_path / "pml.toml")
    assert [gateway.control_socket for gateway in found] == [control]


async def test_the_socket_is_removed_when_the_gateway_stops(
    gateway: Gateway, tmp_path: Path
) -> None:
    with announced(tmp_path / "run", None, transport="stdio") as announcement:
        async with answering_status(announcement, gateway) as path:
            assert path is not None
            assert await anyio.Path(path).exists()
        assert not await anyio.Path(path).exists()
    with pytest.raises(ControlUnavailable, match="not open"):
        await ask(path)


async def test_no_announcement_means_no_socket_and_the_gateway_still_serves(
    gateway: Gateway,
) -> None:
    async with answering_status(None, gateway) as path:
        assert path is None
        assert gateway.pool.status()


@pytest.mark.parametrize(
    ("request_line", "message"),
    [
        (b"\xff\xfe garbage\n", "a request is a JSON object"),
        (b"[1, 2]\n", "a request is a JSON object"),
        (b'{"ask": "shutdown"}\n', 'the only request is {"ask": "status"}'),
        (b'{"ask": ["status"]}\n', 'the only request is {"ask": "status"}'),
        (b'{"ask": "status\\u0000; rm -rf /"}\n', 'the only request is {"ask": "status"}'),
    ],
)
async def test_a_bad_request_gets_an_error_and_the_next_one_an_answer(
    control: Path, request_line: bytes, message: str
) -> None:
    stream = await raw(control)
    async with stream:
        await stream.send(request_line)
        answer = json.loads(await answer_of(stream))

    assert answer["error"] == {"code": "INVALID_INPUT", "message": message}
    assert "status" in await ask(control)


async def test_a_huge_line_is_refused_without_being_read_whole(control: Path) -> None:
    stream = await raw(control)
    refused = b""
    async with stream:
        try:
            with anyio.fail_after(WAIT_S):
                # 8 MB without a newline, sent until the gateway stops reading.
                for _ in range(128):
                    await stream.send(b"x" * 65536)
        except (anyio.BrokenResourceError, OSError):
            pass  # the gateway closed the connection: it did not wait for the rest
        refused = await answer_of(stream)

    if refused:  # the refusal, when it reached us before the connection closed
        assert json.loads(refused)["error"]["code"] == "INVALID_INPUT"
    assert "status" in await ask(control)


async def test_a_line_just_over_the_limit_is_refused(control: Path) -> None:
    stream = await raw(control)
    async with stream:
        padding = "x" * MAX_REQUEST_BYTES
        await stream.send(json.dumps({"ask": "status", "pad": padding}).encode() + b"\n")
        answer = json.loads(await answer_of(stream))

    assert answer["error"]["code"] == "INVALID_INPUT"


async def test_a_slow_client_is_dropped_and_others_are_answered_meanwhile(
    control: Path,
) -> None:
    slow = await raw(control)
    async with slow:
        await slow.send(b'{"ask": ')  # and nothing more
        assert "status" in await ask(control)  # served while the slow one waits
        with anyio.fail_after(IO_TIMEOUT_S + WAIT_S):
            dropped = await answer_of(slow)

    assert dropped == b""  # closed without an answer once its time was up


async def test_a_crowd_of_idle_clients_cannot_hold_the_socket_for_long(control: Path) -> None:
    async with AsyncExitStack() as stack:
        for _ in range(MAX_CLIENTS * 3):
            stack.push_async_callback((await raw(control)).aclose)
        # The crowd is dropped within the read timeout; then the socket answers again.
        with anyio.fail_after(WAIT_S):
            while True:
                try:
                    answer = await ask(control)
                except ControlUnavailable:
                    await anyio.sleep(0.1)
                    continue
                break
    assert "status" in answer


async def test_a_socket_path_longer_than_a_unix_address_still_works(
    gateway: Gateway, tmp_path: Path
) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    with announced(deep / "run", None, transport="stdio") as announcement:
        async with answering_status(announcement, gateway) as path:
            assert path is not None
            assert len(os.fsencode(str(path))) > 107
            answer = await ask(path)
    assert "status" in answer


async def test_a_directory_open_to_others_is_closed_before_the_socket_opens(
    gateway: Gateway, tmp_path: Path
) -> None:
    directory = tmp_path / "run"
    with announced(directory, None, transport="stdio") as announcement:
        directory.chmod(0o755)
        async with answering_status(announcement, gateway) as path:
            assert path is not None
            assert stat.S_IMODE(directory.stat().st_mode) == 0o700


def test_asking_where_nobody_listens_says_so(tmp_path: Path) -> None:
    import socket

    path = tmp_path / "dead.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))  # bound, never listening: what a killed gateway leaves
    with pytest.raises(ControlUnavailable, match="nobody listens"):
        ask_gateway(path)
    with pytest.raises(ControlUnavailable, match="not open"):
        ask_gateway(tmp_path / "missing.sock")
