"""One-shot commands see every upstream server that starts, not only the quick ones.

``pml discover`` and ``pml execute`` open a gateway for one call: its servers start in the
background like a serving gateway's, and the command waits for them to settle (at most
``[upstream] start_timeout_s``) before it calls, even past the ``list_wait_s`` window.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clisupport import isolate_cli
from pml.cli.app import app

TIME_SERVER = Path(sys.executable).parent / "mcp-server-time"
# mcp-server-time, once 2.5 s have passed: later than the 0.2 s listing window below.
SLOW_TIME = (
    "import os, sys, time; time.sleep(2.5); "
    "os.execv(sys.argv[1], [sys.argv[1], '--local-timezone', 'UTC'])"
)


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    isolate_cli(tmp_path, monkeypatch)
    path = tmp_path / "pml.toml"
    path.write_text(
        f'database_url = "sqlite:///{tmp_path / "pml.db"}"\n'
        '[scope]\norg = "acme"\nproject = "webapp"\n'
        "[upstream]\nlist_wait_s = 0.2\n"
        '[permissions]\nallow = ["slowtime:*"]\n'
        "[servers.slowtime]\n"
        f"command = {json.dumps(sys.executable)}\n"
        f'args = ["-c", {json.dumps(SLOW_TIME)}, {json.dumps(str(TIME_SERVER))}]\n',
        encoding="utf-8",
    )
    return path


def test_discover_waits_for_a_slow_server(config: Path) -> None:
    result = CliRunner().invoke(
        app, ["--config", str(config), "discover", "current time in a timezone", "--json"]
    )
    assert result.exit_code == 0, result.stderr
    found = [item["name"] for item in json.loads(result.stdout)["results"]]
    assert "slowtime:get_current_time" in found


def test_execute_calls_a_slow_server(config: Path) -> None:
    code = 'return await mcp.slowtime.get_current_time(timezone="UTC")'
    result = CliRunner().invoke(
        app,
        ["--config", str(config), "execute", "what time is it in UTC", "--code", "-", "--json"],
        input=code,
    )
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["status"] == "success"
