"""``pml reload``: SIGHUP to every process serving a config, found by the files they leave.

The processes here are small real programs that announce themselves exactly as ``pml serve``
does (``pml.gateway.running.announced``) and write down the SIGHUPs they receive; the real
gateway's side is in ``tests/e2e/test_e2e_reload.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from clisupport import assert_one_line_error, isolate_cli
from pml.cli.app import app
from pml.gateway.running import config_key, run_directory

WAIT_S = 20.0
# Announces itself for argv[2] in argv[1], writes "hup" lines to argv[3] on SIGHUP, and
# ends when argv[4] appears.
ANNOUNCER = """
import signal, sys, time
from pathlib import Path
from pml.gateway.running import announced

directory, config, out, stop = sys.argv[1:5]
signal.signal(signal.SIGHUP, lambda number, frame: open(out, "a").write("hup\\n"))
with announced(Path(directory), Path(config) if config else None, transport="stdio"):
    print("ready", flush=True)
    while not Path(stop).exists():
        time.sleep(0.02)
"""


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return isolate_cli(tmp_path, monkeypatch)


def runs(tmp_path: Path) -> Path:
    """The run directory ``pml`` uses under the isolated ``XDG_DATA_HOME``."""
    return run_directory(tmp_path / "xdg" / "pml")


class Announcer:
    """One announcing process and the SIGHUPs it received."""

    def __init__(self, process: subprocess.Popen[str], out: Path) -> None:
        self.process = process
        self.out = out

    def hups(self) -> int:
        return self.out.read_text().count("hup") if self.out.exists() else 0

    def wait_for_hups(self, count: int) -> None:
        deadline = time.monotonic() + WAIT_S
        while self.hups() < count and time.monotonic() < deadline:
            time.sleep(0.02)
        assert self.hups() == count


@contextmanager
def announcers(tmp_path: Path, *configs: Path | None) -> Iterator[list[Announcer]]:
    stop = tmp_path / "stop"
    started: list[Announcer] = []
    try:
        for index, config in enumerate(configs):
            out = tmp_path / f"hups-{index}"
            process = subprocess.Popen(
                [sys.executable, "-c", ANNOUNCER, str(runs(tmp_path)), str(config or ""),
                 str(out), str(stop)],
                stdout=subprocess.PIPE,
                text=True,
            )  # fmt: skip
            started.append(Announcer(process, out))
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "ready"
        yield started
    finally:
        stop.touch()
        for announcer in started:
            try:
                announcer.process.wait(timeout=WAIT_S)
            except subprocess.TimeoutExpired:
                announcer.process.kill()
                announcer.process.wait()


def reload(*args: str) -> Result:
    return CliRunner().invoke(app, ["reload", *args])


def test_every_gateway_of_the_config_is_told_and_counted(workdir: Path, tmp_path: Path) -> None:
    mine, other = workdir / "pml.toml", workdir / "other.toml"
    with announcers(tmp_path, mine, mine, other) as (first, second, third):
        result = reload("--config", str(mine))
        assert result.exit_code == 0, result.stderr
        pids = f"{first.process.pid}, {second.process.pid}"
        assert (
            result.stdout
            == f"told 2 gateways to reload {mine} (pid {pids}); each logs the outcome\n"
        )
        first.wait_for_hups(1)
        second.wait_for_hups(1)
        assert third.hups() == 0


def test_json_lists_the_gateways_told(workdir: Path, tmp_path: Path) -> None:
    config = workdir / "pml.toml"
    with announcers(tmp_path, config) as (only,):
        result = reload("--config", "pml.toml", "--json")  # relative to the working dir
        assert result.exit_code == 0, result.stderr
        [told] = json.loads(result.stdout)
        assert told["pid"] == only.process.pid
        assert told["transport"] == "stdio"
        assert told["config"] == str(config)
        assert isinstance(told["started_at"], float)
        only.wait_for_hups(1)


def test_the_config_is_found_as_every_command_finds_it(
    workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    default, from_env = workdir / "pml.toml", tmp_path / "env.toml"
    default.write_text("")
    with announcers(tmp_path, default, from_env) as (by_default, by_env):
        assert reload().exit_code == 0  # ./pml.toml
        by_default.wait_for_hups(1)
        monkeypatch.setenv("PML_CONFIG", str(from_env))
        assert reload().exit_code == 0  # $PML_CONFIG
        by_env.wait_for_hups(1)
        assert by_default.hups() == 1


def test_gateways_running_on_the_defaults_are_found_without_a_config(
    workdir: Path, tmp_path: Path
) -> None:
    with announcers(tmp_path, None) as (bare,):
        result = reload()
        assert result.exit_code == 0, result.stderr
        assert "the default settings (no config file)" in result.stdout
        bare.wait_for_hups(1)


def test_no_running_gateway_is_one_line_error_and_exit_1(workdir: Path) -> None:
    line = assert_one_line_error(reload("--config", "pml.toml"), "NOT_FOUND")
    assert line == f"error: NOT_FOUND: no gateway is running with {workdir / 'pml.toml'}"
    result = reload("--config", "pml.toml", "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["error"]["code"] == "NOT_FOUND"


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ("é/日本.toml", "é/日本.toml"),
        ("a\nb.toml", "a\\nb.toml"),
        ("\x1b[2J.toml", "\\x1b[2J.toml"),
        ("x" * 5000 + ".toml", "x" * 200),
    ],
)
def test_hostile_config_paths_are_named_safely_on_one_line(
    workdir: Path, given: str, shown: str
) -> None:
    line = assert_one_line_error(reload("--config", given), "NOT_FOUND")
    assert shown in line
    assert "\x1b" not in line
    assert len(line) < 500


def stale_file(tmp_path: Path, config: Path, pid: int, **fields: object) -> Path:
    directory = runs(tmp_path)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{config_key(config)}-{pid}.json"
    record = {"pid": pid, "config": str(config), "transport": "stdio", "started_at": 1.0}
    path.write_text(json.dumps({**record, **fields}))
    return path


def test_the_file_of_a_process_that_died_is_ignored_and_removed(
    workdir: Path, tmp_path: Path
) -> None:
    config = workdir / "pml.toml"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    path = stale_file(tmp_path, config, int(gone.stdout))
    assert_one_line_error(reload("--config", str(config)), "NOT_FOUND")
    assert not path.exists()


def test_a_reused_pid_running_another_program_is_not_signalled(
    workdir: Path, tmp_path: Path
) -> None:
    config = workdir / "pml.toml"
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        # A file left by an older process whose pid the bystander now has.
        path = stale_file(tmp_path, config, bystander.pid, process_start="1")
        assert_one_line_error(reload("--config", str(config)), "NOT_FOUND")
        assert bystander.poll() is None  # SIGHUP would have ended it
        assert not path.exists()
        # A file naming a live process but not when it started is not trusted either.
        path = stale_file(tmp_path, config, bystander.pid)
        assert_one_line_error(reload("--config", str(config)), "NOT_FOUND")
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.parametrize(
    "content",
    [
        b"\x00\xff\xfe garbage",
        b"[1, 2, 3]",
        b'{"pid": "123", "config": "x", "transport": "stdio", "started_at": 1}',
        b'{"pid": true, "config": "x", "transport": "stdio", "started_at": 1}',
        b'{"pid": -5, "config": "x", "transport": "stdio", "started_at": 1}',
        b'{"pid": 1, "config": "x", "transport": "stdio", "started_at": 1}',
        b'{"pid": 99999999999, "config": "x"}',
        b"{" * 100_000,
        b" " * 10_000,
    ],
)
def test_hostile_files_in_the_run_directory_are_skipped(
    workdir: Path, tmp_path: Path, content: bytes
) -> None:
    config = workdir / "pml.toml"
    directory = runs(tmp_path)
    directory.mkdir(parents=True)
    (directory / f"{config_key(config)}-1.json").write_bytes(content)
    assert_one_line_error(reload("--config", str(config)), "NOT_FOUND")


def test_a_fifo_or_a_link_in_the_run_directory_is_not_followed(
    workdir: Path, tmp_path: Path
) -> None:
    config = workdir / "pml.toml"
    directory = runs(tmp_path)
    directory.mkdir(parents=True)
    os.mkfifo(directory / f"{config_key(config)}-2.json")
    (directory / f"{config_key(config)}-3.json").symlink_to("/dev/zero")
    assert_one_line_error(reload("--config", str(config)), "NOT_FOUND")


def test_reload_does_not_load_the_mcp_sdk(workdir: Path) -> None:
    code = (
        "import sys\n"
        "from pml.cli.app import app\n"
        "try:\n"
        "    app(['reload', '--config', 'pml.toml'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted({'mcp', 'mcp_types'} & set(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"
