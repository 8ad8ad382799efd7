"""``pml status`` shows a server as its config writes it: a ``${VAR}`` secret stays a name."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from pml.cli import status_cmd

app = typer.Typer()


@app.callback()
def root() -> None:
    """A stand-in for the ``pml`` root."""


status_cmd.register(app)

SECRET = "s3cret-VALUE-9f8e"
CONFIG = """
[scope]
org = "acme"
project = "webapp"

[servers.tool]
command = "uvx"
args = ["some-server", "--token", "${STATUS_TOKEN}"]

[servers.web]
url = "https://api.example.com/mcp?key=${STATUS_TOKEN}"
lazy = true
"""


def test_status_shows_the_written_form_of_expanded_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in [key for key in os.environ if key.startswith("PML_")]:
        monkeypatch.delenv(key)
    config = tmp_path / "pml.toml"
    config.write_text(CONFIG, encoding="utf-8")
    env = {
        "PML_CONFIG": str(config),
        "PML_DATABASE_URL": f"sqlite:///{tmp_path / 'pml.db'}",
        "STATUS_TOKEN": SECRET,
    }
    result = CliRunner().invoke(app, ["status", "--json"], env=env)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert SECRET not in result.stdout + result.stderr
    targets = {server["name"]: server["target"] for server in json.loads(result.stdout)["servers"]}
    assert targets["tool"] == "uvx some-server --token ${STATUS_TOKEN}"
    assert targets["web"] == "https://api.example.com/mcp?key=${STATUS_TOKEN}"
    text = CliRunner().invoke(app, ["status"], env=env)
    assert SECRET not in text.stdout + text.stderr
