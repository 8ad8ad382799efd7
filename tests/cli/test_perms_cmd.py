"""``pml perms list|grant|revoke|revoke-all`` against one SQLite file: exact JSON, the
grant honoured by the grant service, confirmation, one-line errors."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from clisupport import assert_one_line_error, isolate_cli, sub_app
from pml.cli import perms_cmd
from pml.config import Settings
from pml.policy.grants import GrantService
from pml.policy.permissions import CallFacts, Grant
from pml.policy.version import policy_version
from pml.registry.scope import Scope
from pml.storage.database import Database

app = sub_app(perms_cmd.register)

GRANT_FIELDS = {
    "id",
    "principal",
    "org",
    "project",
    "capability",
    "scope",
    "purpose",
    "issued_at",
    "expires_at",
    "max_uses",
    "uses",
    "args_digest",
    "policy_version",
    "revoked",
    "revoked_at",
}


class NoAudit:
    def emit(self, event: str, **_: Any) -> None:
        pass


@dataclass
class Cli:
    url: str

    def run(self, *args: str, input: str | None = None) -> Result:
        env = {"PML_DATABASE_URL": self.url, "PML_SCOPE__USER": "erwan"}
        return CliRunner().invoke(app, ["perms", *args], env=env, input=input)

    def json(self, *args: str) -> Any:
        result = self.run(*args, "--json")
        assert result.exit_code == 0, (result.stdout, result.stderr)
        return json.loads(result.stdout)

    def find(self, scope: Scope, call: CallFacts) -> Grant | None:
        async def body() -> Grant | None:
            db = await Database.open(self.url)
            try:
                service = GrantService(db, NoAudit(), policy_version=policy_version(Settings()))
                return (await service.find_and_consume(scope, call))[0]
            finally:
                await db.close()

        return asyncio.run(body())


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    isolate_cli(tmp_path, monkeypatch)
    monkeypatch.setenv("PML_CONFIG", "")
    return Cli(url=f"sqlite:///{tmp_path / 'pml.db'}")


LOCAL = Scope("local", "default", "erwan")
WRITE = CallFacts.of("fs", "write_file", "file_write", {"path": "/data/a.txt"})


def test_grant_json_is_the_grant_for_the_local_user_and_scope(cli: Cli) -> None:
    before = datetime.now(UTC)
    grant = cli.json(
        "grant", "file_write", "--tool", "fs:write_*", "--path-prefix", "/data", "--uses", "2"
    )

    assert set(grant) == GRANT_FIELDS
    assert (grant["principal"], grant["org"], grant["project"]) == ("erwan", "local", "default")
    assert grant["capability"] == "file_write"
    assert grant["scope"] == {"tool": "fs:write_*", "path_prefix": "/data", "domain": None}
    assert (grant["max_uses"], grant["uses"], grant["revoked"]) == (2, 0, False)
    assert grant["policy_version"] == policy_version(Settings())
    expires = datetime.fromisoformat(grant["expires_at"])
    session = timedelta(seconds=Settings().permissions.session_grant_ttl_s)
    assert before + session <= expires <= datetime.now(UTC) + session


def test_a_cli_grant_is_honoured_for_the_calls_it_covers(cli: Cli) -> None:
    grant = cli.json("grant", "file_write", "--tool", "fs:write_*", "--path-prefix", "/data")

    found = cli.find(LOCAL, WRITE)
    assert found is not None
    assert found.id == grant["id"]
    outside = CallFacts.of("fs", "write_file", "file_write", {"path": "/data/../etc/passwd"})
    assert cli.find(LOCAL, outside) is None
    assert cli.find(Scope("local", "default", "bob"), WRITE) is None


def test_grant_with_uses_is_spent_then_stops(cli: Cli) -> None:
    cli.json("grant", "file_write", "--uses", "1")

    assert cli.find(LOCAL, WRITE) is not None
    assert cli.find(LOCAL, WRITE) is None
    assert cli.json("list") == {"items": []}
    [spent] = cli.json("list", "--all")["items"]
    assert spent["uses"] == 1


def test_ttl_and_forever_set_the_expiry(cli: Cli) -> None:
    before = datetime.now(UTC)
    short = cli.json("grant", "network", "--domain", "example.com", "--ttl", "60")
    forever = cli.json("grant", "time", "--forever")

    expires = datetime.fromisoformat(short["expires_at"])
    assert before + timedelta(seconds=60) <= expires <= datetime.now(UTC) + timedelta(seconds=60)
    assert short["scope"]["domain"] == "example.com"
    assert forever["expires_at"] is None


def test_grant_for_another_user_org_and_project(cli: Cli) -> None:
    grant = cli.json(
        "grant",
        "memory_write",
        "--user",
        "bob",
        "--org",
        "acme",
        "--project",
        "webapp",
        "--purpose",
        "note tâches ‮",
    )

    assert (grant["principal"], grant["org"], grant["project"]) == ("bob", "acme", "webapp")
    assert grant["purpose"] == "note tâches ‮"
    assert cli.json("list") == {"items": []}
    listed = cli.json("list", "--org", "acme", "--project", "webapp", "--user", "bob")
    assert [item["id"] for item in listed["items"]] == [grant["id"]]
    assert cli.json("list", "--org", "acme", "--project", "webapp", "--user", "erwan") == {
        "items": []
    }


def test_grant_text_says_what_was_granted(cli: Cli) -> None:
    result = cli.run("grant", "file_write", "--tool", "fs:*", "--path-prefix", "/data", "--forever")

    assert result.exit_code == 0, result.stderr
    [line] = result.stdout.splitlines()
    assert line.startswith("granted ")
    assert "file_write on fs:* for erwan in local.default, path /data, expires never" in line


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("grant", "root"), "capability"),
        (("grant", "file_write", "--tool", "fs"), "tool_pattern"),
        (("grant", "file_write", "--path-prefix", "data"), "path_prefix"),
        (("grant", "network", "--domain", "https://evil.com"), "domain"),
        (("grant", "file_write", "--ttl", "0"), "ttl_s"),
        (("grant", "file_write", "--ttl", "60", "--forever"), "ttl"),
        (("grant", "file_write", "--uses", "0"), "max_uses"),
        (("grant", "file_write", "--purpose", "p" * 501), "purpose"),
        (("grant", "file_write", "--org", "acme corp"), "org"),
        (("grant", "file_write", "--user", "u" * 129), "user"),
        (("grant", "file_write", "--user", ""), "user"),
        (("grant", "file_write", "--project", ""), "project"),
    ],
)
def test_invalid_grants_are_one_line_errors_and_store_nothing(
    cli: Cli, args: tuple[str, ...], field: str
) -> None:
    result = cli.run(*args)

    line = assert_one_line_error(result, "INVALID_INPUT")
    assert field in line
    assert result.stdout == ""
    assert cli.json("list", "--all") == {"items": []}


def test_invalid_grant_with_json_is_a_json_error(cli: Cli) -> None:
    result = cli.run("grant", "root", "--json")

    assert result.exit_code == 1
    error = json.loads(result.stdout)["error"]
    assert (error["code"], error["field"]) == ("INVALID_INPUT", "capability")


def test_list_shows_active_grants_and_all_with_all(cli: Cli) -> None:
    kept = cli.json("grant", "file_write")
    gone = cli.json("grant", "file_read")
    cli.json("revoke", gone["id"])

    assert [item["id"] for item in cli.json("list")["items"]] == [kept["id"]]
    listed = cli.json("list", "--all")["items"]
    assert [(item["id"], item["revoked"]) for item in listed] == [
        (kept["id"], False),
        (gone["id"], True),
    ]


def test_list_text_shows_states_and_prints_markup_as_it_is(cli: Cli) -> None:
    cli.json("grant", "file_write", "--user", "[bold]x", "--tool", "fs:[/x]")
    revoked = cli.json("grant", "time")
    cli.json("revoke", revoked["id"])

    result = cli.run("list", "--all")

    assert result.exit_code == 0, result.stderr
    assert "[bold]x" in result.stdout
    assert "fs:[/x]" in result.stdout
    assert "active" in result.stdout
    assert "revoked" in result.stdout


def test_list_of_no_grants_says_how_to_issue_one(cli: Cli) -> None:
    result = cli.run("list")

    assert result.exit_code == 0
    assert "pml perms grant" in result.stdout


def test_revoke_stops_the_grant(cli: Cli) -> None:
    grant = cli.json("grant", "file_write")

    revoked = cli.json("revoke", grant["id"])
    text = cli.run("revoke", grant["id"])

    assert revoked["id"] == grant["id"]
    assert revoked["revoked"] is True
    assert revoked["revoked_at"] is not None
    assert cli.find(LOCAL, WRITE) is None
    assert text.exit_code == 0
    assert text.stdout.startswith(f"revoked {grant['id']}: file_write on *:* for erwan")


@pytest.mark.parametrize("grant_id", ["00000000-0000-0000-0000-000000000000", "nope", "a\nb"])
def test_revoking_an_unknown_grant_is_a_one_line_not_found(cli: Cli, grant_id: str) -> None:
    result = cli.run("revoke", grant_id)

    line = assert_one_line_error(result, "NOT_FOUND")
    assert line.startswith("error: NOT_FOUND: Grant not found: ")
    assert result.stdout == ""


def test_a_grant_of_another_project_cannot_be_revoked_from_here(cli: Cli) -> None:
    grant = cli.json("grant", "file_write", "--project", "other")

    assert_one_line_error(cli.run("revoke", grant["id"]), "NOT_FOUND")
    assert cli.json("revoke", grant["id"], "--project", "other")["revoked"] is True


def test_revoke_all_asks_first_and_no_answer_revokes_nothing(cli: Cli) -> None:
    grant = cli.json("grant", "file_write")

    refused = cli.run("revoke-all", input="n\n")
    silent = cli.run("revoke-all")

    for result in (refused, silent):
        assert result.exit_code == 1
        assert "Revoke every grant of every user in local.default?" in result.stderr
        assert "aborted: nothing revoked" in result.stderr
        assert result.stdout.strip() in {"", "n"}  # CliRunner echoes the typed answer
    assert [item["id"] for item in cli.json("list")["items"]] == [grant["id"]]


def test_revoke_all_after_yes_revokes_every_grant_of_the_scope(cli: Cli) -> None:
    cli.json("grant", "file_write")
    cli.json("grant", "time", "--user", "bob")
    elsewhere = cli.json("grant", "file_write", "--project", "other")

    confirmed = cli.run("revoke-all", input="y\n")

    assert confirmed.exit_code == 0, confirmed.stderr
    assert confirmed.stdout.splitlines()[-1] == "revoked 2 grant(s) in local.default"
    assert cli.json("list", "--all", "--project", "other")["items"][0]["id"] == elsewhere["id"]
    assert cli.json("list", "--project", "other")["items"] != []


def test_revoke_all_of_one_user_with_yes_and_json(cli: Cli) -> None:
    cli.json("grant", "file_write")
    cli.json("grant", "time", "--user", "bob")

    assert cli.json("revoke-all", "--user", "bob", "--yes") == {
        "revoked": 1,
        "org": "local",
        "project": "default",
        "user": "bob",
    }
    assert [item["principal"] for item in cli.json("list")["items"]] == ["erwan"]
