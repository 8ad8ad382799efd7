"""``pml execute`` with the policy pipeline: a run waiting for approval, resumed from the
shell with ``--continue-workflow``, and ``--debug-routing`` on stderr (a real time server)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from typer.testing import CliRunner, Result

from clisupport import assert_one_line_error, isolate_cli
from pml.cli.app import app

TIME_SERVER = Path(sys.executable).parent / "mcp-server-time"
SNIPPET = 'return await mcp.time.get_current_time(timezone="UTC")'


class Cli:
    def __init__(self, tmp_path: Path) -> None:
        config = {
            "database_url": f"sqlite:///{tmp_path / 'pml.db'}",
            "scope": {"org": "acme", "project": "webapp", "user": "ana"},
            "servers": {"time": {"command": str(TIME_SERVER), "args": ["--local-timezone", "UTC"]}},
            "permissions": {"ask": ["time:get_current_time"]},
            "discovery": {"embedder": "hashing"},
        }
        self.config = tmp_path / "pml.toml"
        self.config.write_text(tomli_w.dumps(config))

    def run(self, *args: str, stdin: str | None = None) -> Result:
        return CliRunner().invoke(
            app, ["--config", str(self.config), "execute", *args], input=stdin
        )

    def json(self, *args: str, stdin: str | None = None) -> Any:
        result = self.run(*args, "--json", stdin=stdin)
        assert result.exit_code == 0, (result.stdout, result.stderr)
        return json.loads(result.stdout)


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    if not TIME_SERVER.exists():
        pytest.fail(f"{TIME_SERVER} missing: the dev extras install mcp-server-time")
    isolate_cli(tmp_path, monkeypatch)
    return Cli(tmp_path)


def test_a_paused_run_waits_for_a_person_even_when_resumed_from_the_shell(cli: Cli) -> None:
    paused = cli.json("what time is it", "--code", "-", stdin=SNIPPET)
    assert paused["status"] == "approval_required"
    [approval] = paused["approvals"]
    assert approval["tool"] == "time:get_current_time"
    assert approval["reason"] == "permissions.ask[0]:time:get_current_time"
    # The shell's --approve is the agent's resume: until a person decides, it still waits.
    pending = cli.json("time", "--continue-workflow", paused["workflowId"], "--approve")
    assert pending["status"] == "approval_required"
    assert pending["pending"] is True
    assert pending["workflowId"] == paused["workflowId"]
    withdrawn = cli.run("time", "--continue-workflow", paused["workflowId"], "--deny")
    assert_one_line_error(withdrawn, "PERMISSION_DENIED")
    again = cli.run("time", "--continue-workflow", paused["workflowId"], "--approve")
    assert_one_line_error(again, "NOT_FOUND")


def test_the_human_summary_says_what_waits_and_how_to_resume(cli: Cli) -> None:
    shown = cli.run("what time is it", "--code", "-", stdin=SNIPPET)
    assert shown.exit_code == 0, shown.stderr
    assert "approval required: time:get_current_time (time)" in shown.stdout
    assert "pml approvals approve wf_" in shown.stdout
    assert "--continue-workflow wf_" in shown.stdout


def test_a_refusal_from_the_shell_is_permission_denied(cli: Cli) -> None:
    paused = cli.json("what time is it", "--code", "-", stdin=SNIPPET)
    refused = cli.run("time", "--continue-workflow", paused["workflowId"], "--deny")
    assert_one_line_error(refused, "PERMISSION_DENIED")


@pytest.mark.parametrize(
    "args",
    [
        ["--continue-workflow", "wf_x"],
        ["--approve"],
        ["--continue-workflow", "wf_x", "--approve", "--grant", "forever"],
    ],
)
def test_incomplete_or_bad_resume_options_are_one_line_errors(cli: Cli, args: list[str]) -> None:
    assert_one_line_error(cli.run("time", *args), "INVALID_INPUT")


def test_debug_routing_prints_the_pipeline_to_stderr(cli: Cli) -> None:
    result = cli.run("/chat hello", "--code", "-", "--debug-routing", stdin=SNIPPET)
    assert result.exit_code == 1
    *debug, error = result.stderr.splitlines()
    assert error.startswith("error: POLICY_DENIED: ")
    lines = [json.loads(line) for line in debug]
    stages = [line["pml_routing"] for line in lines]
    assert stages[:2] == ["ROUTER_OUTPUT", "POLICY_DECISION"]
    assert "POLICY_DENIED" in stages
    assert lines[0]["intent"] == "chat_only"
    assert lines[0]["decided_by"] == "prefix:/chat"
    assert len({line["request_id"] for line in lines}) == 1
