"""``pml status``: what the running gateway reported, the stored catalog, API keys, read-only.

The upstream rows are written straight into ``upstream_servers`` and ``tool_schema``, as a
running gateway would leave them.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner, Result

from pml.cli import status_cmd
from pml.gateway.keys import ApiKeys
from pml.storage.database import Database, head_revision
from pml.storage.tables import tool_schema, tool_usage, upstream_servers

app = typer.Typer()


@app.callback()
def root() -> None:
    """A stand-in for the ``pml`` root."""


status_cmd.register(app)

AT = datetime(2025, 6, 1, 12, 30, tzinfo=UTC)
HOSTILE = "[bold]boom[/] [/x] [link=http://evil]:smile:"
LAST_ERROR = HOSTILE + "\x1b[2J\nsecond line"  # a terminal escape and a line break
CONFIG = """
[scope]
org = "acme"
project = "webapp"
user = "erwan"

[servers.time]
command = "uvx"
args = ["mcp-server-time", "[/x]"]

[servers.broken]
command = "does-not-exist"

[servers.lazyone]
url = "http://127.0.0.1:9/mcp"
lazy = true

[servers.off]
command = "true"
disabled = true
"""


@dataclass
class Cli:
    url: str
    db_file: Path
    config: Path

    def run(self, *args: str, url: str | None = None) -> Result:
        env = {"PML_DATABASE_URL": url or self.url, "PML_CONFIG": str(self.config)}
        return CliRunner().invoke(app, list(args), env=env)

    def json(self, *args: str, url: str | None = None) -> Any:
        result = self.run(*args, "--json", url=url)
        assert result.exit_code == 0, (result.stdout, result.stderr)
        return json.loads(result.stdout)


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    for key in [key for key in os.environ if key.startswith("PML_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("COLUMNS", "250")
    workdir = tmp_path / "work"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    config = tmp_path / "pml.toml"
    config.write_text(CONFIG, encoding="utf-8")
    db_file = tmp_path / "pml.db"
    return Cli(url=f"sqlite:///{db_file}", db_file=db_file, config=config)


def seed_gateway_state(url: str) -> None:
    """What a running gateway leaves behind: two reports, a catalog with one flagged tool."""

    async def body() -> None:
        db = await Database.open(url)
        try:
            async with db.transaction() as conn:
                await conn.execute(
                    upstream_servers.insert(),
                    [
                        {
                            "name": "time",
                            "state": "running",
                            "transport": "stdio",
                            "tool_count": 2,
                            "last_latency_ms": 3.25,
                            "last_error": None,
                            "flagged_tools": [],
                            "reported_by": "gw-host:4242",
                            "updated_at": AT,
                        },
                        {
                            "name": "broken",
                            "state": "failed",
                            "transport": "stdio",
                            "tool_count": 0,
                            "last_latency_ms": None,
                            "last_error": LAST_ERROR,
                            "flagged_tools": ["reported_only"],
                            "reported_by": "gw-host:4242",
                            "updated_at": AT,
                        },
                    ],
                )
                await conn.execute(
                    tool_schema.insert(),
                    [
                        catalog_row("time", "get_current_time", flagged=True),
                        catalog_row("time", "convert_time", flagged=False),
                        catalog_row("gone", "[/x]", flagged=True),
                    ],
                )
                await conn.execute(
                    tool_usage.insert(),
                    [
                        usage_row("time", "get_current_time", 2.0, True),
                        usage_row("time", "get_current_time", 4.0, False),
                        usage_row("pml-capabilities", "acme.webapp.fs.read_json.a7f3", 12.5, True),
                        usage_row("time", "get_current_time", 1.0, True, org="globex"),
                    ],
                )
            keys = ApiKeys(db)
            await keys.create("acme", "webapp")
            _, revoked = await keys.create("acme", "webapp")
            await keys.revoke(revoked.id)
        finally:
            await db.close()

    asyncio.run(body())


def usage_row(
    server: str, tool: str, latency_ms: float, success: bool, *, org: str = "acme"
) -> dict[str, Any]:
    return {
        "server_id": server,
        "tool_name": tool,
        "latency_ms": latency_ms,
        "success": success,
        "org": org,
        "project": "webapp",
        "user_id": "erwan",
        "called_at": AT,
    }


def catalog_row(server: str, tool: str, *, flagged: bool) -> dict[str, Any]:
    return {
        "server_id": server,
        "tool_name": tool,
        "definition": {"name": tool},
        "definition_hash": "b" * 64 if flagged else "a" * 64,
        "pinned_hash": "a" * 64,
        "flagged": flagged,
        "first_seen_at": AT,
        "updated_at": AT,
    }


def test_status_json_reports_each_server_the_catalog_and_api_keys(cli: Cli) -> None:
    seed_gateway_state(cli.url)

    status = cli.json("status")

    assert set(status) == {
        "database",
        "scope",
        "capabilities",
        "failing",
        "embedding",
        "api_keys",
        "catalog",
        "servers",
        "tool_usage",
        "curation",
        "config",
        "gateway",
        "servers_source",
    }
    assert status["servers_source"] == "stored"  # no gateway runs with this config
    assert status["failing"] == {"count": 0, "names": []}
    assert status["embedding"]["source"] == "settings"  # named with no gateway running
    assert status["gateway"]["running"] is False
    assert status["config"] == str(cli.config)
    assert status["tool_usage"] == [
        {
            "server_id": "time",
            "tool_name": "get_current_time",
            "calls": 2,
            "successes": 1,
            "avg_latency_ms": 3.0,
            "last_called_at": AT.isoformat(),
        },
        {
            "server_id": "pml-capabilities",
            "tool_name": "acme.webapp.fs.read_json.a7f3",
            "calls": 1,
            "successes": 1,
            "avg_latency_ms": 12.5,
            "last_called_at": AT.isoformat(),
        },
    ]  # most called first; another tenant's calls are not shown
    assert status["database"]["exists"] is True
    assert status["database"]["up_to_date"] is True
    assert status["database"]["revision"] == head_revision()
    assert status["api_keys"] == {"active": 1, "revoked": 1}
    assert status["catalog"]["tools"] == 3
    assert [(f["server"], f["tool"]) for f in status["catalog"]["flagged"]] == [
        ("gone", "[/x]"),
        ("time", "get_current_time"),
    ]
    servers = {server["name"]: server for server in status["servers"]}
    assert list(servers) == ["broken", "lazyone", "off", "time"]
    assert servers["time"] == {
        "name": "time",
        "transport": "stdio",
        "target": "uvx mcp-server-time [/x]",
        "lazy": False,
        "disabled": False,
        "state": "running",
        "reported": True,
        "tool_count": 2,
        "last_latency_ms": 3.25,
        "last_error": None,
        "updated_at": AT.isoformat(),
        "reported_by": "gw-host:4242",
        "catalog_tools": 2,
        "flagged_tools": ["get_current_time"],
        "source": "stored",
    }
    assert servers["broken"]["state"] == "failed"
    assert servers["broken"]["last_error"] == LAST_ERROR
    assert servers["broken"]["flagged_tools"] == ["reported_only"]
    assert (servers["lazyone"]["state"], servers["lazyone"]["reported"]) == ("never started", False)
    assert servers["lazyone"]["catalog_tools"] == 0
    assert servers["off"]["state"] == "disabled"


def test_status_text_shows_flagged_tools_errors_and_markup_verbatim(cli: Cli) -> None:
    seed_gateway_state(cli.url)

    result = cli.run("status")

    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    out = result.stdout
    assert "uvx mcp-server-time [/x]" in out
    assert f"broken: last error: {HOSTILE}\\x1b[2J\\nsecond line" in out
    assert "\x1b" not in out
    assert "reported_only" in out
    assert "time:get_current_time" in out
    assert "gone:[/x]" in out
    assert "never started" in out
    assert "3.2 ms" in out
    assert "1 active, 1 revoked" in out
    assert "3 tools, 2 flagged" in out
    assert "tool calls in this scope" in out
    assert "acme.webapp.fs.read_json.a7f3" in out
    assert "50%" in out  # time:get_current_time, one of two calls worked


def test_status_of_a_missing_sqlite_file_does_not_create_it(cli: Cli, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "deeper" / "pml.db"
    url = f"sqlite:///{missing}"

    status = cli.json("status", url=url)
    text = cli.run("status", url=url)

    assert status["database"]["exists"] is False
    assert "pml db upgrade" in status["database"]["hint"]
    assert status["database"]["revision"] is None
    assert status["capabilities"] is status["api_keys"] is status["catalog"] is None
    assert [server["state"] for server in status["servers"]] == [
        "never started",
        "never started",
        "disabled",
        "never started",
    ]
    assert text.exit_code == 0
    assert "does not exist yet" in text.stdout
    assert not missing.exists()
    assert not missing.parent.parent.exists()


def test_status_of_a_blank_sqlite_file_does_not_migrate_it(cli: Cli) -> None:
    sqlite3.connect(cli.db_file).close()  # an empty database file

    status = cli.json("status")

    assert status["database"]["exists"] is True
    assert status["database"]["revision"] is None
    assert status["database"]["up_to_date"] is False
    assert "pml db upgrade" in status["database"]["hint"]
    with sqlite3.connect(cli.db_file) as conn:
        tables = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    assert tables == []


def test_status_of_an_unreachable_database_reports_it_lists_servers_and_exits_1(
    cli: Cli,
) -> None:
    url = "postgresql://nobody:secret@127.0.0.1:1/pml"

    result = cli.run("status", "--json", url=url)

    assert result.exit_code == 1
    status = json.loads(result.stdout)
    assert result.stderr.startswith("error: STORAGE_ERROR: the database ")
    assert "unreachable" in result.stderr
    assert "secret" not in result.stderr
    assert status["database"]["reachable"] is False
    assert status["database"]["error"]
    assert "secret" not in json.dumps(status)
    assert len(status["servers"]) == 4


def test_status_without_servers_says_how_to_add_one(cli: Cli) -> None:
    cli.config.write_text("", encoding="utf-8")

    result = cli.run("status")

    assert result.exit_code == 0, result.stderr
    assert "no upstream servers configured (add [servers.NAME] to pml.toml)" in result.stdout
