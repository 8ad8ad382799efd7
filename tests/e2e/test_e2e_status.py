"""``pml status`` end to end: real ``pml serve`` processes (stdio under the SDK client, and
HTTP), the real time server and a server that never answers; the ``pml`` CLI run as a user
runs it. While a gateway runs, status shows its live states (``starting`` for the stuck
server); once it stops, status says no gateway runs; hostile clients of the control socket
leave the gateway serving; an unreachable database exits 1 with one line."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from platformdirs import user_data_dir

from e2e.support import (
    CLI_TIMEOUT_S,
    PML,
    Upstream,
    pml_http,
    pml_stdio,
    python_server,
    sqlite_url,
    write_config,
)
from pml.gateway.control_client import socket_address
from pml.gateway.running import run_directory, running_gateways

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

WAIT_S = 30.0
# Reads its stdin and never answers: the pool keeps it "starting" up to start_timeout_s.
STUCK = Upstream("stuck", sys.executable, ("-c", "import sys; sys.stdin.read()"))
SLOW_START = {"start_timeout_s": 120.0, "list_wait_s": 0.5}


@pytest.fixture(autouse=True)
def same_data_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    # A stdio gateway gets the SDK's minimal environment (HOME, not XDG_DATA_HOME): the
    # shell's pml status must look where it does.
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)


def clock() -> Upstream:
    return Upstream("clock", str(python_server("mcp-server-time")), ("--local-timezone", "UTC"))


def pml_status(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PML), "--config", str(config), "status", *args],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
        stdin=subprocess.DEVNULL,
        cwd=config.parent,
    )


def status_json(config: Path) -> dict[str, Any]:
    done = pml_status(config, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def status_when(config: Path, shows: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """``pml status --json`` once it ``shows`` what is awaited (bounded)."""
    with anyio.fail_after(WAIT_S):
        while True:
            report = await anyio.to_thread.run_sync(status_json, config)
            if shows(report):
                return report
            await anyio.sleep(0.2)


def states(report: dict[str, Any]) -> dict[str, str]:
    return {server["name"]: server["state"] for server in report["servers"]}


def flat(text: str) -> str:
    return " ".join(text.split())


async def test_status_shows_a_stdio_gateways_live_states_then_says_it_stopped(
    tmp_path: Path,
) -> None:
    config = write_config(
        tmp_path / "pml.toml",
        [clock(), STUCK],
        database_url=sqlite_url(tmp_path),
        upstream=SLOW_START,
    )
    async with pml_stdio(config, tmp_path / "gateway.log") as gateway:
        # the gateway's answer, not the states it stored (those can say "running" first,
        # while a loaded gateway is still embedding its tools and answers late)
        live = await status_when(
            config,
            lambda r: r["servers_source"] == "live" and states(r).get("clock") == "running",
        )
        text = await anyio.to_thread.run_sync(pml_status, config)

        assert live["servers_source"] == "live"
        assert states(live) == {"clock": "running", "stuck": "starting"}
        assert {server["source"] for server in live["servers"]} == {"live"}
        clock_entry = next(s for s in live["servers"] if s["name"] == "clock")
        assert clock_entry["tool_count"] == 2
        section = live["gateway"]
        assert (section["running"], section["answered"]) == (True, True)
        assert (section["pid"], section["transport"]) == (gateway.pid, "stdio")
        assert section["config"] == str(config)
        assert section["database"]["reachable"] is True
        assert text.returncode == 0, text.stderr
        assert f"running: pid {gateway.pid} (stdio)" in flat(text.stdout)
        assert "upstream servers (live)" in text.stdout
        # a stdio gateway leaves the model to the shared embedding process (the default)
        assert section["embedding_process"].startswith("the shared embedding process")
        assert f"{section['embedding_model']} in the shared embedding process" in flat(text.stdout)
    after = await anyio.to_thread.run_sync(status_json, config)
    text = await anyio.to_thread.run_sync(pml_status, config)

    assert after["gateway"]["running"] is False
    assert after["servers_source"] != "live"
    assert "live" not in {server["source"] for server in after["servers"]}
    assert f"no gateway is running for {config}" in flat(text.stdout)
    assert running_gateways(run_directory(Path(user_data_dir("pml"))), config) == []


def hostile_clients(path: Path) -> None:
    """Garbage, a huge line, and a client that connects and says nothing, then leaves."""
    with socket_address(path) as address:
        for payload in (b"\x00\xff{{{not json\n", b"A" * 3_000_000):
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(WAIT_S)
                sock.connect(address)
                try:
                    sock.sendall(payload)
                    sock.recv(65536)
                except OSError:
                    pass  # closed by the gateway before it took it all: as it should
        with socket.socket(socket.AF_UNIX) as idle:
            idle.connect(address)  # closed by us; the gateway has dropped it or will


async def test_an_http_gateway_answers_status_and_survives_hostile_control_clients(
    tmp_path: Path,
) -> None:
    config = write_config(
        tmp_path / "pml.toml",
        [clock(), STUCK],
        database_url=sqlite_url(tmp_path),
        upstream=SLOW_START,
    )
    with pml_http(config, tmp_path / "gateway.log") as gateway:
        live = await status_when(config, lambda r: states(r).get("clock") == "running")
        found = running_gateways(run_directory(Path(user_data_dir("pml"))), config)
        assert [item.pid for item in found] == [gateway.process.pid]
        control = found[0].control_socket
        assert control is not None

        await anyio.to_thread.run_sync(hostile_clients, control)
        again = await status_when(config, lambda r: r["gateway"]["answered"])
        async with httpx.AsyncClient(timeout=WAIT_S) as http:
            health = await http.get(f"{gateway.base_url}/health")

        assert live["gateway"]["transport"] == f"http 127.0.0.1:{gateway.port}"
        assert live["gateway"]["pid"] == gateway.process.pid
        assert states(live)["stuck"] == "starting"
        assert states(again)["clock"] == "running"
        assert health.status_code == 200
        assert gateway.process.poll() is None


def test_an_unreachable_database_exits_1_with_one_line(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "pml.toml",
        [],
        database_url="postgresql://pml:s3cret@127.0.0.1:1/pml",  # a closed loopback port
    )

    done = pml_status(config)

    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "STORAGE_ERROR" in done.stderr
    assert "unreachable" in done.stderr
    assert "Traceback" not in done.stderr
    assert "s3cret" not in done.stderr + done.stdout
    assert "no gateway is running" in flat(done.stdout)
