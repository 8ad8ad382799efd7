"""``pml audit tail`` against one SQLite file: lines, JSON lines, filters, --follow.

Events are written with ``AuditRepository`` as a running gateway's ``AuditLog`` leaves them.
The follow test runs the real ``pml`` executable, since it streams and stops on Ctrl-C.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner, Result

from clisupport import assert_one_line_error, isolate_cli
from pml.cli import audit_cmd
from pml.storage.audit_repo import AuditEntry, AuditRepository
from pml.storage.database import Database

app = typer.Typer()


@app.callback()
def root() -> None:
    """A stand-in for the ``pml`` root."""


audit_cmd.register(app)

AT = datetime(2025, 6, 1, 12, 30, tzinfo=UTC)
PML = Path(sys.executable).parent / "pml"


def entry(index: int, **fields: Any) -> AuditEntry:
    values: dict[str, Any] = {
        "ts": AT + timedelta(seconds=index),
        "event": "TOOL_CALL_END",
        "org": "acme",
        "project": "webapp",
        "details": {"n": index},
        "actor": "erwan",
        "request_id": f"r-{index}",
        "decided_by": "policy:file_task",
    }
    values.update(fields)
    return AuditEntry(**values)


@dataclass
class Cli:
    url: str

    def run(self, *args: str) -> Result:
        return CliRunner().invoke(app, ["audit", *args], env={"PML_DATABASE_URL": self.url})

    def json_lines(self, *args: str) -> list[dict[str, Any]]:
        result = self.run("tail", "--json", *args)
        assert result.exit_code == 0, (result.stdout, result.stderr)
        return [json.loads(line) for line in result.stdout.splitlines()]

    def insert(self, *entries: AuditEntry) -> None:
        async def body() -> None:
            db = await Database.open(self.url)
            try:
                await AuditRepository(db).insert_many(list(entries))
            finally:
                await db.close()

        asyncio.run(body())


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    isolate_cli(tmp_path, monkeypatch)
    monkeypatch.setenv("PML_CONFIG", "")
    return Cli(url=f"sqlite:///{tmp_path / 'pml.db'}")


def test_tail_prints_the_newest_fifty_events_oldest_first_one_line_each(cli: Cli) -> None:
    cli.insert(*(entry(index) for index in range(60)))
    result = cli.run("tail")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 50
    assert lines[0].split() == [
        "2025-06-01",
        "12:30:10",
        "TOOL_CALL_END",
        "acme.webapp",
        "policy:file_task",
        '{"n":10}',
    ]
    assert lines[-1].endswith('{"n":59}')


def test_an_empty_log_says_so_on_stderr(cli: Cli) -> None:
    result = cli.run("tail")
    assert result.exit_code == 0
    assert (result.stdout, result.stderr.strip()) == ("", "no audit events")
    assert cli.json_lines() == []


def test_json_prints_one_object_per_line_with_every_field(cli: Cli) -> None:
    cli.insert(entry(1, details={"tool": "fs:write_file", "ü": "日本語"}), entry(2))
    first, second = cli.json_lines("--limit", "2")
    assert first == {
        "id": 1,
        "ts": "2025-06-01T12:30:01+00:00",
        "event": "TOOL_CALL_END",
        "actor": "erwan",
        "scope": "acme.webapp",
        "org": "acme",
        "project": "webapp",
        "request_id": "r-1",
        "details": {"tool": "fs:write_file", "ü": "日本語"},
        "decided_by": "policy:file_task",
    }
    assert second["id"] == 2


def test_filters_narrow_by_org_project_and_event_names(cli: Cli) -> None:
    cli.insert(
        entry(1, event="POLICY_DENIED"),
        entry(2, event="PERMISSION_DENIED", org="globex"),
        entry(3, event="ROUTER_OUTPUT"),
        entry(4, event="POLICY_DENIED", project="other"),
    )
    assert [e["id"] for e in cli.json_lines("--org", "acme")] == [1, 3, 4]
    assert [e["id"] for e in cli.json_lines("--org", "acme", "--project", "webapp")] == [1, 3]
    denied = cli.json_lines("--event", "policy_denied", "--event", "PERMISSION_DENIED")
    assert [e["id"] for e in denied] == [1, 2, 4]
    assert cli.json_lines("--org", "nobody") == []
    assert [e["id"] for e in cli.json_lines("--limit", "1")] == [4]


def test_stored_control_and_bidi_characters_are_shown_escaped(cli: Cli) -> None:
    cli.insert(
        entry(
            1,
            decided_by="rule\x1b[2J\u202eevil",
            details={"text": "line\nbreak \u202e[bold]x[/]"},
        )
    )
    result = cli.run("tail")
    assert result.exit_code == 0
    assert len(result.stdout.splitlines()) == 1
    assert "\x1b" not in result.stdout
    assert "\u202e" not in result.stdout
    assert "rule\\x1b[2J\\u202eevil" in result.stdout
    assert "[bold]x[/]" in result.stdout  # never parsed as markup


@pytest.mark.parametrize("limit", ["0", "-5", "10001"])
def test_a_limit_out_of_range_is_one_clear_line_and_exit_1(cli: Cli, limit: str) -> None:
    line = assert_one_line_error(cli.run("tail", "--limit", limit), "INVALID_INPUT")
    assert "Use 1 to 10000" in line


def test_a_malformed_event_name_is_one_clear_line_and_exit_1(cli: Cli) -> None:
    line = assert_one_line_error(cli.run("tail", "--event", "DROP TABLE; --"), "INVALID_INPUT")
    assert "Invalid --event" in line


def test_json_errors_are_json_on_stdout(cli: Cli) -> None:
    result = cli.run("tail", "--json", "--limit", "0")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["error"]["code"] == "INVALID_INPUT"


def test_follow_stops_after_the_hidden_poll_bound_and_shows_rows_once(cli: Cli) -> None:
    cli.insert(entry(1), entry(2))
    result = cli.run("tail", "--follow", "--json", "--max-polls", "1")
    assert result.exit_code == 0, result.stderr
    assert [json.loads(line)["id"] for line in result.stdout.splitlines()] == [1, 2]


def _reader(stream: Any, lines: queue.Queue[str]) -> None:
    for line in stream:
        lines.put(line)


def test_follow_streams_rows_written_between_polls_and_ctrl_c_exits_0(
    cli: Cli, tmp_path: Path
) -> None:
    cli.insert(entry(1))
    env = {key: value for key, value in os.environ.items() if not key.startswith("PML_")}
    env.update(PML_DATABASE_URL=cli.url, PML_CONFIG="", XDG_DATA_HOME=str(tmp_path / "xdg"))
    process = subprocess.Popen(
        [str(PML), "audit", "tail", "--follow", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_reader, args=(process.stdout, lines), daemon=True).start()
    try:
        assert json.loads(lines.get(timeout=30))["id"] == 1
        cli.insert(entry(2, event="POLICY_DENIED"), entry(3))
        assert [json.loads(lines.get(timeout=30))["id"] for _ in range(2)] == [2, 3]
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.stderr is not None
    assert "Traceback" not in process.stderr.read()
