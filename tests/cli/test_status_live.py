"""``pml status`` says which gateway answers, or plainly that none runs: a stale announcement
(a killed process's file and socket) is ignored and removed; an unreachable database exits 1
with one line on stderr. Live answers from running gateways are tested end to end in
``tests/e2e/test_e2e_status.py``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner, Result

from pml.cli import status_cmd
from pml.cli.status_live import ask_running_gateways
from pml.gateway.control_client import socket_address
from pml.gateway.running import config_key, run_directory

app = typer.Typer()


@app.callback()
def root() -> None:
    """A stand-in for the ``pml`` root."""


status_cmd.register(app)

GATEWAY_KEYS = {
    "running", "answered", "pid", "transport", "config", "started_at", "uptime_s", "version",
    "host", "embedding_model", "embedding_process", "database", "capabilities", "error",
    "others",
}  # fmt: skip


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private data directory (where gateways announce themselves) and a config."""
    for key in [key for key in os.environ if key.startswith("PML_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pml.toml").write_text(
        f'database_url = "sqlite:///{tmp_path / "pml.db"}"\n\n'
        '[servers.time]\ncommand = "uvx"\nargs = ["mcp-server-time"]\n',
        encoding="utf-8",
    )
    return tmp_path


def run(home: Path, *args: str, url: str | None = None) -> Result:
    env = {"PML_CONFIG": str(home / "pml.toml")}
    if url is not None:
        env["PML_DATABASE_URL"] = url
    return CliRunner().invoke(app, ["status", *args], env=env)


def dead_pid() -> int:
    """The pid of a process that has ended."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def leave_stale_announcement(home: Path) -> tuple[Path, Path]:
    """What a gateway killed with SIGKILL leaves: its file and a bound, dead socket."""
    directory = run_directory(home / "data" / "pml")
    directory.mkdir(parents=True, mode=0o700)
    pid = dead_pid()
    stem = f"{config_key(home / 'pml.toml')}-{pid}"
    announcement = directory / f"{stem}.json"
    announcement.write_text(
        json.dumps(
            {
                "pid": pid,
                "config": str(home / "pml.toml"),
                "transport": "stdio",
                "started_at": 1.0,
                "process_start": "1",
            }
        ),
        encoding="utf-8",
    )
    sock_path = directory / f"{stem}.sock"
    with socket.socket(socket.AF_UNIX) as sock, socket_address(sock_path) as address:
        sock.bind(address)
    return announcement, sock_path


def test_without_a_gateway_the_json_says_none_runs_with_the_same_shape(home: Path) -> None:
    result = run(home, "--json")

    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report["gateway"]) == GATEWAY_KEYS
    assert report["gateway"]["running"] is False
    assert report["gateway"]["answered"] is False
    assert report["gateway"]["pid"] is None
    assert report["gateway"]["others"] == []
    assert report["servers_source"] == "none"  # nothing stored yet either
    assert report["config"] == str(home / "pml.toml")
    assert [server["source"] for server in report["servers"]] == [None]


def test_without_a_gateway_the_text_says_so_plainly(home: Path) -> None:
    result = run(home)

    assert result.exit_code == 0, result.stderr
    flat = " ".join(result.stdout.split())
    assert f"no gateway is running for {home / 'pml.toml'}" in flat
    assert "no server state has been stored yet" in flat
    assert "(live)" not in flat


def test_a_stale_announcement_is_ignored_and_removed(home: Path) -> None:
    announcement, sock_path = leave_stale_announcement(home)

    result = run(home, "--json")

    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["gateway"]["running"] is False
    assert report["gateway"]["error"] is None
    assert not announcement.exists()
    assert not sock_path.exists()


def test_a_live_pid_with_a_dead_socket_is_running_but_not_answering(home: Path) -> None:
    # Our own pid stands for a gateway whose socket was never opened (still starting).
    directory = run_directory(home / "data" / "pml")
    directory.mkdir(parents=True, mode=0o700)
    from pml.gateway.running import announced

    with announced(directory, home / "pml.toml", transport="stdio"):
        live = ask_running_gateways(home / "pml.toml", home / "data" / "pml")
        result = run(home)

    assert live.answer is None
    section = live.section()
    assert (section["running"], section["answered"], section["pid"]) == (True, False, os.getpid())
    assert section["error"] == f"pid {os.getpid()}: its control socket is not open (yet)"
    flat = " ".join(result.stdout.split())
    assert f"pid {os.getpid()} (stdio) runs but did not answer" in flat
    assert "not a live one" in flat


@pytest.mark.parametrize("as_json", [True, False])
def test_an_unreachable_database_exits_1_with_one_line_on_stderr(home: Path, as_json: bool) -> None:
    url = "postgresql://nobody:hunter2@127.0.0.1:1/pml"  # a closed loopback port

    result = run(home, *(["--json"] if as_json else []), url=url)

    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: STORAGE_ERROR: the database postgresql://nobody:***@")
    assert "hunter2" not in result.stderr + result.stdout
    assert "Traceback" not in result.stderr
    if as_json:
        report = json.loads(result.stdout)
        assert report["database"]["reachable"] is False
        assert report["gateway"]["running"] is False
    else:
        assert "is unreachable" in result.stdout


def test_an_sqlite_path_that_is_a_directory_is_unreachable(home: Path) -> None:
    folder = home / "not-a-file.db"
    folder.mkdir()

    result = run(home, "--json", url=f"sqlite:///{folder}")

    assert result.exit_code == 1, result.stdout
    database = json.loads(result.stdout)["database"]
    assert database["reachable"] is False
    assert database["error"] == f"{folder} is not a regular file"
    assert result.stderr.splitlines() == [
        f"error: STORAGE_ERROR: the database sqlite:///{folder} is unreachable: "
        f"{folder} is not a regular file"
    ]
