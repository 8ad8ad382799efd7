"""``pml memory list|forget`` against one SQLite file, as the configured scope's user."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from clisupport import assert_one_line_error, isolate_cli, sub_app
from pml.cli import memory_cmd
from pml.memory.store import MemoryFact, MemoryStore, fact_hash
from pml.registry.scope import Scope
from pml.storage.database import Database
from pml.storage.memory_repo import MemoryRepository
from pml.storage.types import utc_now

app = sub_app(memory_cmd.register)

ME = Scope("acme", "webapp", "erwan")
SOMEONE_ELSE = Scope("acme", "webapp", "ada")


@dataclass
class Cli:
    url: str

    def run(self, *args: str) -> Result:
        env = {
            "PML_DATABASE_URL": self.url,
            "PML_SCOPE__ORG": ME.org,
            "PML_SCOPE__PROJECT": ME.project,
            "PML_SCOPE__USER": ME.user,
        }
        return CliRunner().invoke(app, ["memory", *args], env=env)

    def json(self, *args: str) -> Any:
        result = self.run(*args, "--json")
        assert result.exit_code == 0, (result.stdout, result.stderr)
        return json.loads(result.stdout)

    def add(self, scope: Scope, *texts: str, sensitivity: str = "low") -> list[MemoryFact]:
        async def body() -> list[MemoryFact]:
            db = await Database.open(self.url)
            try:
                store = MemoryStore(db)
                return [
                    (await store.add(scope, text, sensitivity=sensitivity, source="cli"))[0]  # type: ignore[arg-type]
                    for text in texts
                ]
            finally:
                await db.close()

        return asyncio.run(body())


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    isolate_cli(tmp_path, monkeypatch)
    monkeypatch.setenv("PML_CONFIG", "")
    return Cli(url=f"sqlite:///{tmp_path / 'pml.db'}")


def test_list_shows_my_facts_newest_first_in_a_table(cli: Cli) -> None:
    first, second = cli.add(ME, "I prefer metric units", "the repo uses tabs")
    cli.add(SOMEONE_ELSE, "not mine to see")
    result = cli.run("list")
    assert result.exit_code == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if "│" in line or "|" in line]
    text = result.stdout
    assert "the repo uses tabs" in text
    assert "I prefer metric units" in text
    assert text.index("the repo uses tabs") < text.index("I prefer metric units")
    assert second.id[:8] in text
    assert first.id[:8] in text
    assert first.id not in text  # only the start of the id
    assert "not mine" not in text
    assert lines


def test_list_json_is_items_of_fact_dicts(cli: Cli) -> None:
    (fact,) = cli.add(ME, "my card number is 4111 1111 1111 1111")
    assert cli.json("list") == {"items": [fact.to_dict()]}
    assert cli.json("list")["items"][0]["sensitivity"] == "high"


def test_list_limit_and_search_narrow_the_facts(cli: Cli) -> None:
    cli.add(ME, "I prefer METRIC units", "the repo uses tabs", "metric dashboards are in Grafana")
    found = cli.json("list", "--search", "metric")["items"]
    assert [item["text"] for item in found] == [
        "metric dashboards are in Grafana",
        "I prefer METRIC units",
    ]
    assert len(cli.json("list", "--limit", "1")["items"]) == 1
    assert cli.json("list", "--search", "%")["items"] == []


def test_an_empty_memory_says_so_on_stderr(cli: Cli) -> None:
    result = cli.run("list")
    assert (result.exit_code, result.stdout, result.stderr.strip()) == (0, "", "no memories")
    assert cli.json("list") == {"items": []}


def test_stored_control_and_bidi_characters_are_shown_escaped_and_text_shortened(
    cli: Cli,
) -> None:
    cli.add(ME, "line one\nline two \u202eevil\u202c [bold]x[/] " + "long " * 40)
    result = cli.run("list")
    assert result.exit_code == 0
    assert "\u202e" not in result.stdout
    assert "\\u202eevil" in result.stdout
    assert "line one\\nline two" in result.stdout
    assert "[bold]x[/]" in result.stdout  # never parsed as markup
    assert "…" in result.stdout
    assert "long " * 40 not in result.stdout


def test_forget_by_id_or_prefix_removes_my_fact(cli: Cli) -> None:
    first, second = cli.add(ME, "I prefer metric units", "the repo uses tabs")
    result = cli.run("forget", first.id)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == f"forgot {first.id}: I prefer metric units"
    assert cli.json("forget", second.id[:8]) == {"forgotten": second.to_dict()}
    assert cli.json("list") == {"items": []}


def test_forgetting_what_is_not_there_is_not_found(cli: Cli) -> None:
    (theirs,) = cli.add(SOMEONE_ELSE, "their fact")
    for missing in (theirs.id, "00000000-0000-4000-8000-000000000000", "zzzz", "'; DROP --"):
        line = assert_one_line_error(cli.run("forget", missing), "NOT_FOUND")
        assert "pml memory list" in line
    result = cli.run("forget", theirs.id, "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["error"]["code"] == "NOT_FOUND"
    cli_as_them = cli.add(SOMEONE_ELSE, "their fact")
    assert cli_as_them[0].id == theirs.id  # still there


@pytest.mark.parametrize("limit", ["0", "-5", "1001"])
def test_a_limit_out_of_range_is_one_clear_line(cli: Cli, limit: str) -> None:
    line = assert_one_line_error(cli.run("list", "--limit", limit), "INVALID_INPUT")
    assert "Use 1 to 1000" in line


@pytest.mark.parametrize("value", ["abc", "", "1.5", "None"])
def test_a_limit_that_is_not_a_number_is_a_usage_error(cli: Cli, value: str) -> None:
    result = cli.run("list", "--limit", value)
    assert result.exit_code == 2
    assert "Traceback" not in result.stdout + result.stderr


def test_a_huge_search_or_id_is_invalid_input(cli: Cli) -> None:
    assert_one_line_error(cli.run("list", "--search", "x" * 5000), "INVALID_INPUT")
    assert_one_line_error(cli.run("forget", "f" * 5000), "INVALID_INPUT")
    assert_one_line_error(cli.run("forget", "   "), "INVALID_INPUT")


def test_an_ambiguous_prefix_is_invalid_input_and_a_longer_one_works(cli: Cli) -> None:
    async def insert() -> None:
        db = await Database.open(cli.url)
        try:
            async with db.transaction() as conn:
                for fact_id, text in (("abcd1111", "one"), ("abcd2222", "two")):
                    await MemoryRepository(conn).insert(
                        {
                            "id": f"{fact_id}-0000-4000-8000-000000000000",
                            "org": ME.org,
                            "project": ME.project,
                            "user_id": ME.user,
                            "text": text,
                            "sensitivity": "low",
                            "source": "test",
                            "request_id": None,
                            "created_at": utc_now(),
                            "text_hash": fact_hash(text),
                        }
                    )
        finally:
            await db.close()

    asyncio.run(insert())
    line = assert_one_line_error(cli.run("forget", "abcd"), "INVALID_INPUT")
    assert "give more of the id" in line
    assert cli.json("forget", "ABCD2")["forgotten"]["text"] == "two"
    assert [item["text"] for item in cli.json("list")["items"]] == ["one"]


def test_forget_needs_an_id(cli: Cli) -> None:
    result = cli.run("forget")
    assert result.exit_code == 2


def test_a_broken_database_url_is_one_clear_line(cli: Cli) -> None:
    result = CliRunner().invoke(app, ["memory", "list"], env={"PML_DATABASE_URL": "mysql://nope/x"})
    assert_one_line_error(result, "CONFIG_ERROR")


def test_the_memory_group_is_part_of_pml() -> None:
    from pml.cli.app import app as pml

    result = CliRunner().invoke(pml, ["memory", "--help"])
    assert result.exit_code == 0
    assert "list" in result.stdout
    assert "forget" in result.stdout
