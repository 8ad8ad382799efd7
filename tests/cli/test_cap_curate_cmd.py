"""``pml cap curate`` and the curation line of ``pml status`` (the real ``pml`` app, SQLite).

Tests are sync: each CLI invocation runs its own event loop, and so does the helper that
captures capabilities into the same SQLite file beforehand. The LLM case uses ``LlmStub``,
a local HTTP stand-in for an OpenAI-compatible endpoint (no real LLM is reachable here).
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
from curation.llm_stub import LlmStub, name_by_intent
from pml.cli.app import app
from pml.registry.models import CapabilityRecord
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry
from pml.storage.database import Database

SCOPE = Scope("acme", "webapp", "erwan")
SCOPE_ENV = {"PML_SCOPE__ORG": "acme", "PML_SCOPE__PROJECT": "webapp", "PML_SCOPE__USER": "erwan"}
CONFIG_INTENT = "read and parse JSON config file"


@dataclass
class Cli:
    url: str

    def env(self, **extra: str) -> dict[str, str]:
        return {"PML_DATABASE_URL": self.url, "PML_CONFIG": "", **SCOPE_ENV, **extra}

    def run(self, *args: str, env: dict[str, str] | None = None) -> Result:
        return CliRunner().invoke(app, list(args), env=env or self.env())

    def json(self, *args: str, env: dict[str, str] | None = None) -> Any:
        result = self.run(*args, "--json", env=env)
        assert result.exit_code == 0, (result.stdout, result.stderr)
        return json.loads(result.stdout)


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    isolate_cli(tmp_path, monkeypatch)
    return Cli(url=f"sqlite:///{tmp_path / 'pml.db'}")


def seed(url: str, *items: tuple[str, list[str]], scope: Scope = SCOPE) -> list[CapabilityRecord]:
    async def body() -> list[CapabilityRecord]:
        db = await Database.open(url)
        try:
            registry = CapabilityRegistry(db)
            found: list[CapabilityRecord] = []
            for index, (intent, tools) in enumerate(items):
                draft = CapabilityDraft(code=f"return {index}", intent=intent, tools_used=tools)
                found.append((await registry.capture(scope, draft, latency_ms=1.0)).record)
            return found
        finally:
            await db.close()

    return asyncio.run(body())


def test_curate_suggests_by_default_and_changes_nothing(cli: Cli) -> None:
    (record,) = seed(cli.url, (CONFIG_INTENT, ["filesystem:read_text_file"]))

    answer = cli.json("cap", "curate")
    text = cli.run("cap", "curate")

    assert answer["mode"] == "suggest"
    assert answer["suggestions"] == [
        {
            "id": record.fqdn,
            "currentName": record.display_name,
            "suggestedName": "fs:read_json_config",
            "confidence": 1.0,
            "reasoning": answer["suggestions"][0]["reasoning"],
        }
    ]
    assert text.exit_code == 0, text.stderr
    assert "fs:read_json_config" in text.stdout
    assert "1 of 1 matching capabilities considered (at most 200 per call)" in text.stdout
    lookup = cli.json("cap", "lookup", record.display_name)
    assert lookup["display_name"] == record.display_name
    assert "deprecatedAlias" not in lookup


def test_curate_auto_applies_and_the_old_name_warns_as_an_alias(cli: Cli) -> None:
    (record,) = seed(cli.url, (CONFIG_INTENT, ["filesystem:read_text_file"]))

    answer = cli.json("cap", "curate", "--mode", "auto")
    lookup = cli.run("cap", "lookup", record.display_name)

    assert [item["newName"] for item in answer["applied"]] == ["fs:read_json_config"]
    assert lookup.exit_code == 0
    assert "fs:read_json_config" in lookup.stdout
    assert f'warning: Deprecated: Using alias "{record.display_name}"' in lookup.stderr


def test_curate_rename_applies_good_renames_and_exits_1_for_bad_ones(cli: Cli) -> None:
    first, second = seed(cli.url, ("a", []), ("b", []))

    result = cli.run(
        "cap", "curate",
        "--rename", f"{first.display_name}=my-reader",
        "--rename", f"{second.fqdn}=bad name!",
        "--rename", "globex.webapp.fs.x.abcd=stolen",
        "--json",
    )  # fmt: skip

    assert result.exit_code == 1
    answer = json.loads(result.stdout)
    assert answer["mode"] == "apply"
    assert [item["newName"] for item in answer["applied"]] == ["my-reader"]
    assert [item["error"]["code"] for item in answer["skipped"]] == ["INVALID_NAME", "NOT_FOUND"]
    assert result.stderr.strip() == "error: 2 rename(s) not applied (see skipped)"
    text = cli.run("cap", "curate", "--rename", f"{second.fqdn}=[bold]x[/]")
    assert text.exit_code == 1
    assert "[bold]x[/]" in text.stdout  # shown verbatim, never as markup


def test_curate_filters_reach_the_tool(cli: Cli) -> None:
    seed(cli.url, ("read the config", ["filesystem:r"]))

    assert cli.json("cap", "curate", "--min-usage", "2")["suggestions"] == []
    assert len(cli.json("cap", "curate", "--all", "--min-usage", "1")["suggestions"]) == 1


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["--mode", "delete"], "INVALID_INPUT"),
        (["--mode", "apply"], "INVALID_INPUT"),
        (["--min-usage", "-1"], "INVALID_INPUT"),
        (["--rename", "no-equals-sign"], "INVALID_INPUT"),
        (["--rename", "=name"], "INVALID_INPUT"),
        (["--rename", "x" * 20_000 + "=" + "y" * 20_000], "INVALID_INPUT"),
    ],
)
def test_curate_refuses_bad_options_with_one_line(cli: Cli, args: list[str], code: str) -> None:
    result = cli.run("cap", "curate", *args)

    line = assert_one_line_error(result, code)
    assert len(line) < 1000


def test_curate_refuses_a_non_number_min_usage(cli: Cli) -> None:
    result = cli.run("cap", "curate", "--min-usage", "lots")

    assert result.exit_code == 2
    assert "Traceback" not in result.stdout + result.stderr


def test_curate_uses_the_configured_llm_with_the_key_from_the_environment(cli: Cli) -> None:
    (record,) = seed(cli.url, (CONFIG_INTENT, ["filesystem:read_text_file"]))
    with LlmStub() as stub:
        stub.reply = name_by_intent({CONFIG_INTENT: "fs:load_config"})
        env = cli.env(
            PML_LLM__BASE_URL=stub.base_url,
            PML_LLM__MODEL="haiku",
            PML_LLM__API_KEY_ENV="CURATION_KEY",
            CURATION_KEY="sk-cli-secret",
        )

        answer = cli.json("cap", "curate", env=env)

    assert [item["suggestedName"] for item in answer["suggestions"]] == ["fs:load_config"]
    assert answer["suggestions"][0]["id"] == record.fqdn
    assert stub.headers[0]["authorization"] == "Bearer sk-cli-secret"
    assert stub.requests[0]["model"] == "haiku"


def test_curate_falls_back_to_heuristics_when_the_llm_is_down(cli: Cli) -> None:
    seed(cli.url, (CONFIG_INTENT, ["filesystem:read_text_file"]))
    env = cli.env(PML_LLM__BASE_URL="http://127.0.0.1:9/v1", PML_LLM__MODEL="m")

    answer = cli.json("cap", "curate", env=env)

    assert [item["suggestedName"] for item in answer["suggestions"]] == ["fs:read_json_config"]


def test_status_shows_the_latest_curation_run(cli: Cli) -> None:
    seed(cli.url, (CONFIG_INTENT, ["filesystem:read_text_file"]), ("", []))
    before = cli.json("status")
    cli.json("cap", "curate")

    status = cli.json("status")
    text = cli.run("status")

    assert before["curation"] is None
    run = status["curation"]
    assert (run["trigger"], run["mode"], run["suggestions"], run["applied"]) == (
        "manual",
        "suggest",
        2,
        0,
    )
    assert run["top"][0]["suggestedName"] == "fs:read_json_config"  # best first
    assert text.exit_code == 0, text.stderr
    assert "last run" in text.stdout
    assert "(manual, suggest): 2 suggestions, 0 applied" in text.stdout
    assert "-> fs:read_json_config (1.00)" in text.stdout


def test_status_without_a_run_says_so(cli: Cli) -> None:
    seed(cli.url, ("a", []))

    text = cli.run("status")

    assert text.exit_code == 0, text.stderr
    assert "no run yet (pml cap curate)" in text.stdout


def test_help_lists_curate(cli: Cli) -> None:
    result = cli.run("cap", "curate", "--help")

    assert result.exit_code == 0
    for option in ("--mode", "--unnamed-only", "--all", "--min-usage", "--rename", "--json"):
        assert option in result.stdout
