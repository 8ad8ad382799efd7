"""``pml cap routing``: stored routing follows a changed ``[routing]``, checked or applied;
and the gateway's start (here ``pml execute``) applies it too.

Tests are sync: each CLI invocation runs its own event loop, and so does the helper that
creates capabilities in the same SQLite file beforehand.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from clisupport import assert_one_line_error, isolate_cli
from pml.cli.app import app
from pml.registry.models import RoutingRules
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry
from pml.storage.database import Database

SCOPE = Scope("acme", "webapp", "erwan")


@dataclass
class Cli:
    """The ``pml`` app with one ``pml.toml`` whose ``[routing]`` the test rewrites."""

    config: Path
    database: Path

    def write(self, routing: str) -> None:
        self.config.write_text(
            f'database_url = "sqlite:///{self.database}"\n'
            '[scope]\norg = "acme"\nproject = "webapp"\nuser = "erwan"\n'
            f"[routing]\n{routing}\n"
        )

    def run(self, *args: str, stdin: str | None = None) -> Result:
        env = {"PML_CONFIG": str(self.config)}
        return CliRunner().invoke(app, list(args), env=env, input=stdin)

    def json(self, *args: str) -> Any:
        result = self.run(*args, "--json")
        assert result.exit_code == 0, (result.stdout, result.stderr)
        return json.loads(result.stdout)

    def routing_of(self, name: str) -> str:
        return self.json("cap", "lookup", name)["routing"]


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    workdir = isolate_cli(tmp_path, monkeypatch)
    made = Cli(config=workdir / "pml.toml", database=tmp_path / "pml.db")
    made.write('cloud = ["search*"]')
    return made


def seed(cli: Cli) -> None:
    """Under ``cloud = ["search*"]``: ``web:find`` (derived) and ``web:pinned`` (explicit)."""

    async def body() -> None:
        db = await Database.open(f"sqlite:///{cli.database}")
        try:
            registry = CapabilityRegistry(db, routing=RoutingRules(cloud=("search*",)))
            drafts = [
                CapabilityDraft(code="x = 1", tools_used=["search:query"], name="web:find"),
                CapabilityDraft(
                    code="x = 2", tools_used=["search:query"], name="web:pinned", routing="cloud"
                ),
            ]
            for draft in drafts:
                await registry.capture(SCOPE, draft, latency_ms=1.0)
        finally:
            await db.close()

    asyncio.run(body())


def test_check_lists_the_change_then_applying_it_changes_lookup(cli: Cli) -> None:
    seed(cli)
    assert cli.routing_of("web:find") == "cloud"
    cli.write("cloud = []")

    checked = cli.json("cap", "routing", "--check")

    assert checked["check"] is True
    assert [(c["name"], c["from"], c["to"]) for c in checked["changes"]] == [
        ("web:find", "cloud", "local")
    ]
    assert checked["changes"][0]["fqdn"].startswith("acme.webapp.web.find.")
    assert cli.routing_of("web:find") == "cloud"  # a check stores nothing

    applied = cli.run("cap", "routing")

    assert applied.exit_code == 0, applied.stderr
    assert "web:find" in applied.stdout
    assert "cloud → local" in applied.stdout
    assert "1 capabilities changed." in applied.stdout
    assert cli.routing_of("web:find") == "local"
    assert cli.routing_of("web:pinned") == "cloud"
    assert len(cli.json("cap", "history", "web:find")["versions"]) == 1
    assert cli.json("cap", "routing") == {"check": False, "count": 0, "changes": []}
    audit = (cli.database.parent / "audit.jsonl").read_text()
    assert audit.count("CAPABILITY_ROUTING_CHANGED") == 1


def test_nothing_to_change_is_said_plainly(cli: Cli) -> None:
    seed(cli)

    result = cli.run("cap", "routing", "--check")

    assert result.exit_code == 0, result.stderr
    assert "nothing to change" in result.stdout


def test_the_gateway_start_applies_a_changed_config(cli: Cli) -> None:
    seed(cli)
    cli.write("cloud = []")

    ran = cli.run("execute", "anything", "--code", "-", "--json", stdin="return 1")

    assert ran.exit_code == 0, (ran.stdout, ran.stderr)
    assert cli.routing_of("web:find") == "local"
    assert cli.routing_of("web:pinned") == "cloud"


@pytest.mark.parametrize(
    "routing",
    [
        'cloud = "search*"',
        "cloud = [1, 2]",
        'cloud = [{ name = "search" }]',
        'local = "*"',
        "cloud = true",
    ],
)
def test_a_routing_value_of_the_wrong_type_is_one_clear_error(cli: Cli, routing: str) -> None:
    seed(cli)
    cli.write(routing)

    for args in (("cap", "routing", "--check"), ("cap", "routing")):
        line = assert_one_line_error(cli.run(*args), "CONFIG_ERROR")
        assert "routing" in line
    cli.write('cloud = ["search*"]')
    assert cli.routing_of("web:find") == "cloud"


def test_a_wrong_type_with_json_is_a_json_error(cli: Cli) -> None:
    cli.write('cloud = "search*"')

    result = cli.run("cap", "routing", "--json")

    assert result.exit_code == 1
    assert json.loads(result.stdout)["error"]["code"] == "CONFIG_ERROR"
