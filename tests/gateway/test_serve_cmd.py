"""``pml serve``: arguments, one-line errors, and a stdio gateway whose stdout is protocol only."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
import typer
from typer.testing import CliRunner, Result

from clisupport import sub_app
from pml.cli import serve_cmd
from pml.cli.serve_cmd import parse_host_port
from pml.errors import InvalidInput
from upstream.helpers import processes_with

HERE = Path(__file__).parent
SRC = HERE.parents[1] / "src"
WAIT_S = 30.0

# A gateway over stdio whose pool prints while starting: that must not reach stdout.
STDIO_GATEWAY = """
import sys, anyio
from gateway.upstreams import Upstream, gateway_settings
from pml.gateway.serve_stdio import serve_stdio
from pml.upstream.pool import ClientPool

class NoisyPool(ClientPool):
    async def start(self, *, wait=True):
        print("noise from the pool on stdout")
        await super().start(wait=wait)

    async def stop(self):
        await super().stop()
        open(sys.argv[2], "w").write("stopped")

pool = NoisyPool({"a": Upstream("a").server})
settings = gateway_settings(sys.argv[1], expose_upstream=True)
anyio.run(lambda: serve_stdio(settings, pool=pool))
"""


def make_app() -> typer.Typer:
    return sub_app(serve_cmd.register)


def run(tmp_path: Path, *args: str) -> Result:
    config = tmp_path / "pml.toml"
    config.write_text(f'database_url = "sqlite:///{tmp_path / "pml.db"}"\n', encoding="utf-8")
    return CliRunner().invoke(make_app(), ["serve", *args, "--config", str(config)])


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("127.0.0.1:8765", ("127.0.0.1", 8765)),
        ("localhost:1", ("localhost", 1)),
        ("0.0.0.0:65535", ("0.0.0.0", 65535)),
        ("[::1]:8080", ("::1", 8080)),
        (" my-host.example:80 ", ("my-host.example", 80)),
    ],
)
def test_host_port_values_are_parsed(value: str, expected: tuple[str, int]) -> None:
    assert parse_host_port(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        "",
        "8765",
        "host",
        "host:",
        ":8765",
        "host:0",
        "host:65536",
        "host:-1",
        "a b:80",
        "::1:80",
        "host:80:90",
        "hôst:80",
        "x" * 500 + ":80",
    ],
)
def test_bad_host_port_values_are_invalid_input(value: str) -> None:
    with pytest.raises(InvalidInput, match="HOST:PORT"):
        parse_host_port(value)


def test_a_bad_http_address_is_one_line_and_exit_1(tmp_path: Path) -> None:
    result = run(tmp_path, "--http", "localhost")
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1
    assert "HOST:PORT" in result.stderr
    assert "Traceback" not in result.output + result.stderr


def test_stdio_and_http_together_are_refused(tmp_path: Path) -> None:
    result = run(tmp_path, "--stdio", "--http", "127.0.0.1:8765")
    assert result.exit_code == 1
    assert "not both" in result.stderr


def test_a_busy_port_is_one_line_and_exit_1(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run(tmp_path, "--http", f"127.0.0.1:{port}")
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: CONFIG_ERROR: cannot serve HTTP on 127.0.0.1:{port}")
    assert result.stderr.count("\n") == 1


@pytest.mark.anyio
async def test_over_stdio_stdout_carries_the_protocol_and_nothing_else(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(SRC)])}
    database = f"sqlite:///{tmp_path / 'pml.db'}"
    marker = tmp_path / "pool-stopped"
    requests: list[dict[str, Any]] = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "a__echo"}},
    ]
    payload = "".join(json.dumps(request) + "\n" for request in requests).encode()
    with anyio.fail_after(WAIT_S):
        process = await anyio.open_process(
            [sys.executable, "-c", STDIO_GATEWAY, database, str(marker)], env=env, stderr=None
        )
        async with process:
            assert process.stdin is not None
            assert process.stdout is not None
            await process.stdin.send(payload)
            received = b""
            while received.count(b"\n") < 3:
                received += await process.stdout.receive()
            process.send_signal(signal.SIGTERM)  # stops cleanly, then ends by the signal
            async for chunk in process.stdout:
                received += chunk
            assert await process.wait() == -signal.SIGTERM
    assert marker.read_text() == "stopped"
    # Every line is a JSON-RPC answer; concurrent requests may be answered in any order.
    messages = {message["id"]: message for message in map(json.loads, received.splitlines())}
    assert sorted(messages) == [1, 2, 3]
    assert received.count(b"\n") == 3
    names = [t["name"] for t in messages[2]["result"]["tools"]]
    assert names[:2] == ["pml_discover", "pml_execute"]
    assert "a__echo" in names
    assert messages[3]["result"]["structuredContent"]["server"] == "a"


CLI_MAIN = """
import sys
import typer
from pml.cli import serve_cmd

app = typer.Typer()

@app.callback()
def root() -> None:
    pass

serve_cmd.register(app)
app(sys.argv[1:])
"""


@pytest.mark.anyio
async def test_pml_serve_stdio_runs_the_configured_servers_for_a_real_client(
    tmp_path: Path,
) -> None:
    from mcp import Client, StdioServerParameters

    from gateway.upstreams import MORTAL_SERVER

    script = tmp_path / "mortal.py"
    script.write_text(MORTAL_SERVER, encoding="utf-8")
    config = tmp_path / "pml.toml"
    config.write_text(
        f'database_url = "sqlite:///{tmp_path / "pml.db"}"\n'
        "expose_upstream = true\n"
        "[permissions]\n"
        'allow = ["mortal:*"]\n'
        "[upstream]\n"
        "list_wait_s = 60\n"  # the first list waits for the server however loaded the machine
        "[servers.mortal]\n"
        f"command = {json.dumps(sys.executable)}\n"
        f"args = [{json.dumps(str(script))}]\n",
        encoding="utf-8",
    )
    params = StdioServerParameters(
        command=sys.executable,
        args=["-c", CLI_MAIN, "serve", "--stdio", "--config", str(config)],
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    with anyio.fail_after(WAIT_S):
        async with Client(params, mode="legacy") as client:
            names = [t.name for t in (await client.list_tools()).tools]
            pong = await client.call_tool("mortal__ping", {})
    assert "mortal__ping" in names
    assert "cap_list" in names
    assert pong.is_error is False
    assert processes_with(str(script)) == []  # the gateway stopped its upstream child
