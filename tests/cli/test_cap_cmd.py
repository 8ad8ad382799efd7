"""The real ``pml`` app: ``--help``, ``db upgrade``, ``cap *``, ``status`` and ``--config``.

Tests are sync: each CLI invocation runs its own event loop (``asyncio.run``), and so does
the helper that creates capabilities in the same SQLite file beforehand.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from clisupport import assert_one_line_error, isolate_cli
from pml.cli.app import app
from pml.registry.models import CapabilityRecord
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry
from pml.storage.database import Database, head_revision

SCOPE = Scope("acme", "webapp", "erwan")
SCOPE_ENV = {"PML_SCOPE__ORG": "acme", "PML_SCOPE__PROJECT": "webapp", "PML_SCOPE__USER": "erwan"}


@dataclass
class Cli:
    """The ``pml`` app run against one SQLite file, from an empty working directory."""

    url: str
    workdir: Path

    def env(self, **extra: str) -> dict[str, str]:
        return {"PML_DATABASE_URL": self.url, "PML_CONFIG": "", **SCOPE_ENV, **extra}

    def run(self, *args: str, env: dict[str, str] | None = None) -> Result:
        return CliRunner().invoke(app, list(args), env=self.env() if env is None else env)

    def json(self, *args: str) -> Any:
        result = self.run(*args, "--json")
        assert result.exit_code == 0, (result.stdout, result.stderr)
        return json.loads(result.stdout)


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    workdir = isolate_cli(tmp_path, monkeypatch)
    return Cli(url=f"sqlite:///{tmp_path / 'pml.db'}", workdir=workdir)


def seed(url: str, *drafts: CapabilityDraft) -> list[CapabilityRecord]:
    """Capture ``drafts`` into the database at ``url`` (migrating it), outside any loop."""

    async def body() -> list[CapabilityRecord]:
        db = await Database.open(url)
        try:
            registry = CapabilityRegistry(db)
            return [(await registry.capture(SCOPE, d, latency_ms=2.0)).record for d in drafts]
        finally:
            await db.close()

    return asyncio.run(body())


def test_help_lists_the_command_groups(cli: Cli) -> None:
    result = cli.run("--help")

    assert result.exit_code == 0
    first_words = {line.strip("│ ").split(" ")[0] for line in result.stdout.splitlines()}
    assert {"init", "status", "db", "cap"} <= first_words
    cap_help = cli.run("cap", "--help").stdout
    assert {"list", "lookup", "whois", "rename", "history"} <= {
        line.strip("│ ").split(" ")[0] for line in cap_help.splitlines()
    }


def test_db_upgrade_migrates_an_empty_sqlite_file_then_reports_up_to_date(cli: Cli) -> None:
    first = cli.run("db", "upgrade")
    assert first.exit_code == 0, first.stderr
    assert f"from an empty database to {head_revision()}" in first.stdout

    again = cli.run("db", "upgrade")
    assert again.exit_code == 0
    assert "up to date" in again.stdout
    assert cli.json("db", "upgrade") == {
        "database": cli.url,
        "from_revision": head_revision(),
        "revision": head_revision(),
        "head": head_revision(),
    }


@pytest.mark.postgres
@pytest.mark.usefixtures("anyio_backend")
def test_db_upgrade_json_migrates_a_blank_postgres_database(
    cli: Cli, blank_postgres_url: str
) -> None:
    env = cli.env(PML_DATABASE_URL=blank_postgres_url)

    result = cli.run("db", "upgrade", "--json", env=env)

    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["from_revision"] is None
    assert report["revision"] == report["head"] == head_revision()
    assert report["database"].startswith("postgresql://")
    again = json.loads(cli.run("db", "upgrade", "--json", env=env).stdout)
    assert again["from_revision"] == head_revision()
    lookup = cli.run("cap", "lookup", "mcp:sqlite", "--json", env=env)
    assert json.loads(lookup.stdout)["code_url"] == "uvx mcp-server-sqlite"


def test_cap_list_json_on_an_empty_registry_is_exactly_empty(cli: Cli) -> None:
    result = cli.run("cap", "list", "--json")

    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == '{"items": [], "total": 0}'


def test_cap_list_shows_captured_capabilities_with_filters(cli: Cli) -> None:
    seed(
        cli.url,
        CapabilityDraft(code="return 1", name="fs:read", tags=["json"]),
        CapabilityDraft(code="return 2", name="db:read"),
        CapabilityDraft(code="return 3"),
    )

    listed = cli.json("cap", "list", "--pattern", "fs:*")
    assert [item["display_name"] for item in listed["items"]] == ["fs:read"]
    assert "code" not in listed["items"][0]
    assert cli.json("cap", "list", "--named-only", "--sort", "name")["total"] == 2
    assert cli.json("cap", "list", "--tag", "json")["items"][0]["display_name"] == "fs:read"
    table = cli.run("cap", "list", "--sort", "name")
    assert table.exit_code == 0
    assert "fs:read" in table.stdout
    assert "3 shown of 3" in table.stdout


def test_cap_lookup_json_of_the_seeded_filesystem_server(cli: Cli) -> None:
    found = cli.json("cap", "lookup", "mcp:filesystem")

    assert found["display_name"] == "mcp:filesystem"
    assert found["type"] == "mcp-server"
    assert found["code_url"] == "npx -y @modelcontextprotocol/server-filesystem"
    assert found["fqdn"].startswith("pml.std.mcp.filesystem.")
    table = cli.run("cap", "lookup", "mcp:filesystem")
    assert table.exit_code == 0
    assert "npx -y @modelcontextprotocol/server-filesystem" in table.stdout


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["cap", "lookup", "nope"], "NOT_FOUND", "Capability not found: nope"),
        (["cap", "list", "--limit", "9999"], "INVALID_INPUT", "limit"),
        (["cap", "whois", "bad"], "INVALID_INPUT", 'Invalid FQDN format: "bad"'),
        (["cap", "lookup", "mcp:filesystem@v9"], "VERSION_NOT_FOUND", "Version v9 not found"),
        (["cap", "rename", "mcp:shell", "mine"], "PERMISSION_DENIED", "mcp:shell"),
    ],
)
def test_user_errors_are_one_line_on_stderr_or_a_json_error_object(
    cli: Cli, args: list[str], code: str, message: str
) -> None:
    plain = cli.run(*args)
    line = assert_one_line_error(plain, code)
    assert message in line
    assert plain.stdout == ""

    as_json = cli.run(*args, "--json")
    assert as_json.exit_code == 1
    assert "Traceback" not in as_json.stdout + as_json.stderr
    error = json.loads(as_json.stdout)["error"]
    assert error["code"] == code
    assert message in error["message"]
    assert set(error) <= {"code", "message", "fields"}


def test_rename_through_the_cli_then_lookup_by_the_old_name_warns(cli: Cli) -> None:
    [record] = seed(cli.url, CapabilityDraft(code="return 1", tools_used=["filesystem:read"]))
    old = record.display_name

    renamed = cli.run("cap", "rename", old, "fs:read_json", "--description", "Reads JSON")
    assert renamed.exit_code == 0, renamed.stderr
    assert renamed.stdout.strip() == f"fs:read_json ({record.fqdn}) updated."

    lookup = cli.run("cap", "lookup", old)
    assert lookup.exit_code == 0
    warning = f'warning: Deprecated: Using alias "{old}" for capability "fs:read_json".'
    assert warning + " Update your code." in lookup.stderr.splitlines()
    as_json = cli.json("cap", "lookup", old)
    assert as_json["deprecatedAlias"]["currentName"] == "fs:read_json"
    assert as_json["description"] == "Reads JSON"
    whois = cli.json("cap", "whois", record.fqdn)
    assert [alias["alias"] for alias in whois["aliases"]] == [old]
    audited = [json.loads(line) for line in cli.run("audit", "tail", "--json").stdout.splitlines()]
    [event] = [e for e in audited if e["event"] == "CAPABILITY_RENAMED"]
    assert event["details"]["to"] == "fs:read_json"
    assert event["details"]["changed"] == ["description"]
    taken = cli.run("cap", "rename", "fs:read_json", old)
    assert taken.exit_code == 0  # taking back its own old name is allowed
    assert cli.json("cap", "whois", record.fqdn)["display_name"] == old


def test_the_installed_cli_prints_the_alias_warning_once(cli: Cli) -> None:
    # Outside pytest no logging handler is configured, so a logger.warning in the registry
    # would reach stderr through logging's last-resort handler next to the CLI's own line.
    seed(cli.url, CapabilityDraft(code="return 1", name="fs:old"))
    assert cli.run("cap", "rename", "fs:old", "fs:new").exit_code == 0
    env = {key: value for key, value in os.environ.items() if not key.startswith("PML_")}

    done = subprocess.run(
        [sys.executable, "-c", "from pml.cli.app import main; main()", "cap", "lookup", "fs:old"],
        env={**env, **cli.env()},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    mentions = [line for line in done.stderr.splitlines() if "Deprecated" in line]
    assert mentions == [
        'warning: Deprecated: Using alias "fs:old" for capability "fs:new". Update your code.'
    ]


def test_cap_history_prints_versions_and_diffs(cli: Cli) -> None:
    seed(cli.url, CapabilityDraft(code="return 1", name="calc"))

    async def update() -> None:
        db = await Database.open(cli.url)
        try:
            await CapabilityRegistry(db).update_code(SCOPE, "calc", CapabilityDraft("return 2"))
        finally:
            await db.close()

    asyncio.run(update())

    history = cli.json("cap", "history", "calc")
    assert [entry["version"] for entry in history["versions"]] == [2, 1]
    text = cli.run("cap", "history", "calc")
    assert text.exit_code == 0
    assert text.stdout.splitlines()[0].startswith("v2 ")
    assert "-return 1" in text.stdout.splitlines()
    assert "+return 2" in text.stdout.splitlines()


def test_cap_history_pages_with_before_and_says_how(cli: Cli) -> None:
    seed(cli.url, CapabilityDraft(code="return 0", name="calc"))

    async def update() -> None:
        db = await Database.open(cli.url)
        try:
            registry = CapabilityRegistry(db)
            for version in range(1, 22):
                await registry.update_code(SCOPE, "calc", CapabilityDraft(f"return {version}"))
        finally:
            await db.close()

    asyncio.run(update())

    text = cli.run("cap", "history", "calc")
    assert text.exit_code == 0
    assert text.stdout.splitlines()[-1] == "Older versions: pml cap history calc --before 3"
    older = cli.json("cap", "history", "calc", "--before", "3")
    assert [entry["version"] for entry in older["versions"]] == [2, 1]
    assert "next_before" not in older
    refused = cli.run("cap", "history", "calc", "--before", "0")
    assert refused.exit_code != 0
    assert "before" in refused.output


def test_status_json_shows_the_head_revision_and_capability_counts(cli: Cli) -> None:
    seed(cli.url, CapabilityDraft(code="return 1", name="named"), CapabilityDraft("return 2"))

    status = cli.json("status")

    assert status["database"]["revision"] == status["database"]["head"] == head_revision()
    assert status["database"]["up_to_date"] is True
    assert status["database"]["backend"] == "sqlite"
    assert status["capabilities"] == {"named": 1, "unnamed": 1, "mcp_servers": 3}
    assert status["scope"] == {"org": "acme", "project": "webapp", "user": "erwan"}


def test_status_of_a_blank_database_is_not_up_to_date_and_does_not_migrate(cli: Cli) -> None:
    status = cli.json("status")

    assert status["database"]["revision"] is None
    assert status["database"]["up_to_date"] is False
    assert status["capabilities"] is None
    assert cli.json("status")["database"]["revision"] is None


def write_config(path: Path, database: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f'database_url = "sqlite:///{database}"\n\n'
        '[scope]\norg = "acme"\nproject = "webapp"\nuser = "erwan"\n',
        encoding="utf-8",
    )
    return path


def test_config_option_works_on_pml_itself_and_on_the_sub_command(cli: Cli, tmp_path: Path) -> None:
    first = write_config(tmp_path / "conf" / "first.toml", tmp_path / "first.db")
    second = write_config(tmp_path / "conf" / "second.toml", tmp_path / "second.db")
    seed(f"sqlite:///{tmp_path / 'first.db'}", CapabilityDraft(code="return 1", name="one"))
    seed(f"sqlite:///{tmp_path / 'second.db'}", CapabilityDraft(code="return 2", name="two"))
    env = {"PML_CONFIG": ""}  # no PML_DATABASE_URL: only the file names the database

    def listed(*args: str) -> list[str]:
        result = cli.run(*args, env=env)
        assert result.exit_code == 0, result.stderr
        return [item["display_name"] for item in json.loads(result.stdout)["items"]]

    assert listed("--config", str(first), "cap", "list", "--json") == ["one"]
    assert listed("cap", "list", "--config", str(second), "--json") == ["two"]
    # Given to both, the sub-command's own option wins.
    assert listed("--config", str(first), "cap", "list", "--config", str(second), "--json") == [
        "two"
    ]
    status = cli.run("--config", str(second), "status", "--json", env=env)
    assert json.loads(status.stdout)["database"]["url"] == f"sqlite:///{tmp_path / 'second.db'}"


def test_a_missing_config_file_is_a_one_line_config_error(cli: Cli, tmp_path: Path) -> None:
    result = cli.run("cap", "list", "--config", str(tmp_path / "absent.toml"), env={})

    line = assert_one_line_error(result, "CONFIG_ERROR")
    assert "absent.toml" in line


def test_markup_looking_text_is_printed_literally(cli: Cli) -> None:
    seed(cli.url, CapabilityDraft(code="return 1", name="a:b:c"))
    assert cli.run("cap", "rename", "a:b:c", "--description", "[/oops] [bold]x").exit_code == 0
    lookup = cli.run("cap", "lookup", "a:b:c")
    listing = cli.run("cap", "list")
    assert lookup.exit_code == 0, lookup.stderr
    assert "[/oops] [bold]x" in lookup.stdout
    assert listing.exit_code == 0
    assert "a:b:c" in listing.stdout
