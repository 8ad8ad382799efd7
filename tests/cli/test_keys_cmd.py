"""``pml keys create|list|revoke`` against one SQLite file: exact JSON, one-line errors.

Tests are sync: each CLI invocation runs its own event loop, and so does the helper that
checks a printed key with ``ApiKeys.authenticate``.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner, Result

from clisupport import assert_one_line_error, isolate_cli
from pml.cli import keys_cmd
from pml.gateway.keys import ApiKeys
from pml.registry.scope import Principal, Scope
from pml.storage.database import Database

app = typer.Typer()


@app.callback()
def root() -> None:
    """A stand-in for the ``pml`` root."""


keys_cmd.register(app)


@dataclass
class Cli:
    url: str

    def run(self, *args: str) -> Result:
        return CliRunner().invoke(app, list(args), env={"PML_DATABASE_URL": self.url})

    def json(self, *args: str) -> Any:
        result = self.run(*args, "--json")
        assert result.exit_code == 0, (result.stdout, result.stderr)
        return json.loads(result.stdout)


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    isolate_cli(tmp_path, monkeypatch)
    monkeypatch.setenv("PML_CONFIG", "")
    return Cli(url=f"sqlite:///{tmp_path / 'pml.db'}")


def authenticate(url: str, key: str) -> Scope | None:
    found = principal(url, key)
    return found.scope if found is not None else None


def principal(url: str, key: str) -> Principal | None:
    async def body() -> Principal | None:
        db = await Database.open(url)
        try:
            return await ApiKeys(db).principal(key)
        finally:
            await db.close()

    return asyncio.run(body())


def test_create_json_gives_exactly_key_org_project_user_role_and_id(cli: Cli) -> None:
    created = cli.json("keys", "create", "--org", "acme", "--project", "webapp", "--user", "erwan")

    assert set(created) == {"key", "org", "project", "user", "role", "id"}
    assert (created["org"], created["project"], created["user"]) == ("acme", "webapp", "erwan")
    assert created["role"] == "agent"
    assert created["key"].startswith("pml_")
    assert authenticate(cli.url, created["key"]) == Scope("acme", "webapp", "erwan")


def test_create_with_role_admin_makes_an_admin_key(cli: Cli) -> None:
    created = cli.json(
        "keys", "create", "--org", "acme", "--project", "webapp", "--user", "ana", "--role", "admin"
    )

    assert created["role"] == "admin"
    assert principal(cli.url, created["key"]) == Principal(
        Scope("acme", "webapp", "ana"),
        "admin",
        key_id=created["id"],
        key_prefix=created["key"][:12],
    )
    listed = cli.json("keys", "list")["items"]
    assert [(item["id"], item["role"]) for item in listed] == [(created["id"], "admin")]


def test_create_text_names_the_role_in_its_warning(cli: Cli) -> None:
    result = cli.run("keys", "create", "--org", "acme", "--project", "webapp", "--role", "admin")

    assert result.exit_code == 0, result.stderr
    assert "role admin" in result.stderr
    assert principal(cli.url, result.stdout.strip()) is not None


@pytest.mark.parametrize(
    "role", ["ADMIN", "root", "", "admin; DROP TABLE api_keys", "\u0430dmin", "x" * 5000]
)
def test_a_bad_role_is_a_one_line_invalid_input_and_creates_nothing(cli: Cli, role: str) -> None:
    result = cli.run("keys", "create", "--org", "acme", "--project", "webapp", "--role", role)

    line = assert_one_line_error(result, "INVALID_INPUT")
    assert "Invalid role" in line
    assert "agent, admin" in line
    assert len(line) < 200
    assert result.stdout == ""
    assert cli.json("keys", "list") == {"items": []}


def test_a_bad_role_with_json_is_a_json_error(cli: Cli) -> None:
    result = cli.run(
        "keys", "create", "--org", "acme", "--project", "p", "--role", "owner", "--json"
    )

    assert result.exit_code == 1
    error = json.loads(result.stdout)["error"]
    assert (error["code"], error["field"]) == ("INVALID_INPUT", "role")
    assert cli.json("keys", "list") == {"items": []}


def test_list_text_shows_each_keys_role(cli: Cli) -> None:
    cli.json("keys", "create", "--org", "acme", "--project", "webapp", "--user", "erwan")
    cli.json("keys", "create", "--org", "acme", "--project", "webapp", "--role", "admin")

    result = cli.run("keys", "list")

    assert result.exit_code == 0, result.stderr
    header, *rows = [
        line for line in result.stdout.splitlines() if "acme" in line or "role" in line
    ]
    assert "role" in header
    assert ["agent" in rows[0], "admin" in rows[0]] == [True, False]
    assert ["agent" in rows[1], "admin" in rows[1]] == [False, True]


def test_create_without_user_gives_null_user_and_a_key_scope(cli: Cli) -> None:
    created = cli.json("keys", "create", "--org", "acme", "--project", "webapp")

    assert created["user"] is None
    assert authenticate(cli.url, created["key"]) == Scope(
        "acme", "webapp", f"key:{created['key'][:12]}"
    )


def test_create_prints_the_key_alone_on_stdout_and_warns_once(cli: Cli) -> None:
    result = cli.run("keys", "create", "--org", "acme", "--project", "webapp")

    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("pml_")
    assert authenticate(cli.url, lines[0]) is not None
    warning = result.stderr.splitlines()
    assert len(warning) == 1
    assert "will not be shown again" in warning[0]
    assert lines[0] not in result.stderr


def test_list_json_shows_prefixes_never_keys(cli: Cli) -> None:
    first = cli.json("keys", "create", "--org", "acme", "--project", "webapp", "--user", "erwan")
    second = cli.json("keys", "create", "--org", "globex", "--project", "ops")

    listed = cli.json("keys", "list")

    assert set(listed) == {"items"}
    assert [item["id"] for item in listed["items"]] == [first["id"], second["id"]]
    assert [item["prefix"] for item in listed["items"]] == [
        first["key"][:12],
        second["key"][:12],
    ]
    assert set(listed["items"][0]) == {
        "id",
        "prefix",
        "org",
        "project",
        "user",
        "role",
        "created_at",
        "revoked_at",
        "last_used_at",
        "active",
    }
    raw = json.dumps(listed)
    assert first["key"] not in raw
    assert second["key"] not in raw
    assert [item["org"] for item in cli.json("keys", "list", "--org", "globex")["items"]] == [
        "globex"
    ]
    assert cli.json("keys", "list", "--project", "nothing") == {"items": []}


def test_list_text_prints_markup_looking_users_as_they_are(cli: Cli) -> None:
    cli.json("keys", "create", "--org", "acme", "--project", "webapp", "--user", "[/x]")
    cli.json("keys", "create", "--org", "acme", "--project", "webapp", "--user", "[bold]b")

    result = cli.run("keys", "list")

    assert result.exit_code == 0, result.stderr
    assert "[/x]" in result.stdout
    assert "[bold]b" in result.stdout


def test_list_of_no_keys_says_how_to_create_one(cli: Cli) -> None:
    result = cli.run("keys", "list")

    assert result.exit_code == 0
    assert "pml keys create" in result.stdout


def test_revoke_by_prefix_stops_the_key_and_shows_it_revoked(cli: Cli) -> None:
    created = cli.json("keys", "create", "--org", "acme", "--project", "webapp")
    kept = cli.json("keys", "create", "--org", "acme", "--project", "webapp")

    revoked = cli.json("keys", "revoke", created["key"][:12])

    assert revoked["id"] == created["id"]
    assert revoked["active"] is False
    assert revoked["revoked_at"] is not None
    assert authenticate(cli.url, created["key"]) is None
    assert authenticate(cli.url, kept["key"]) is not None
    again = cli.run("keys", "revoke", created["id"])
    assert again.exit_code == 0
    assert f"revoked {created['key'][:12]}" in again.stdout
    states = {item["id"]: item["active"] for item in cli.json("keys", "list")["items"]}
    assert states == {created["id"]: False, kept["id"]: True}


def test_revoking_an_unknown_key_is_a_one_line_not_found(cli: Cli) -> None:
    result = cli.run("keys", "revoke", "pml_missing")

    line = assert_one_line_error(result, "NOT_FOUND")
    assert line == "error: NOT_FOUND: API key not found: pml_missing"
    assert result.stdout == ""


@pytest.mark.parametrize(
    "args",
    [
        ("--org", "acme corp", "--project", "webapp"),
        ("--org", "acme", "--project", "[/x]"),
        ("--org", "acme", "--project", "webapp", "--user", ""),
    ],
)
def test_invalid_create_is_a_one_line_invalid_input_and_creates_nothing(
    cli: Cli, args: tuple[str, ...]
) -> None:
    result = cli.run("keys", "create", *args)

    assert_one_line_error(result, "INVALID_INPUT")
    assert result.stdout == ""
    assert cli.json("keys", "list") == {"items": []}


def test_errors_with_json_are_a_json_error_object_and_exit_1(cli: Cli) -> None:
    result = cli.run("keys", "revoke", "nope", "--json")

    assert result.exit_code == 1
    assert json.loads(result.stdout) == {
        "error": {"code": "NOT_FOUND", "message": "API key not found: nope"}
    }


def test_create_requires_org_and_project(cli: Cli) -> None:
    result = cli.run("keys", "create", "--org", "acme")

    assert result.exit_code == 2
    assert "--project" in result.stderr
    assert cli.json("keys", "list") == {"items": []}
