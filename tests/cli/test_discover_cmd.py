"""``pml discover``: the ``pml_discover`` tool from a shell, with its errors in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from clisupport import assert_one_line_error, isolate_cli
from pml.cli.app import app


class Cli:
    def __init__(self, tmp_path: Path) -> None:
        self.env = {
            "PML_DATABASE_URL": f"sqlite:///{tmp_path / 'pml.db'}",
            "PML_CONFIG": "",
            "PML_SCOPE__ORG": "acme",
            "PML_SCOPE__PROJECT": "webapp",
        }

    def run(self, command: str, *args: str, stdin: str | None = None) -> Result:
        return CliRunner().invoke(app, [command, *args], env=self.env, input=stdin)


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    isolate_cli(tmp_path, monkeypatch)
    return Cli(tmp_path)


def test_a_learned_snippet_is_found_by_a_paraphrase(cli: Cli) -> None:
    learned = cli.run("execute", "convert a temperature from celsius to fahrenheit",
                      "--code", "-", "--json", stdin="return 21 * 9 / 5 + 32")  # fmt: skip
    assert learned.exit_code == 0, learned.stderr
    fqdn = json.loads(learned.stdout)["capabilityFqdn"]
    found = cli.run("discover", "turn degrees C into F", "--json")
    assert found.exit_code == 0, found.stderr
    results = json.loads(found.stdout)["results"]
    assert results[0]["fqdn"] == fqdn
    assert results[0]["kind"] == "capability"
    readable = cli.run("discover", "turn degrees C into F", "--kind", "capability")
    assert readable.exit_code == 0, readable.stderr
    assert f'mcp["{fqdn}"]' in readable.stdout
    assert "capability" in readable.stdout


def test_nothing_to_find_says_so(cli: Cli) -> None:
    result = cli.run("discover", "anything at all", "--kind", "tool")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "nothing found"
    as_json = cli.run("discover", "anything at all", "--kind", "tool", "--json")
    assert json.loads(as_json.stdout) == {"results": []}


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["read", "--kind", "servers"], "kind"),
        (["read", "--limit", "0"], "limit"),
        (["read", "--limit", "51"], "limit"),
        (["read", "--min-score", "1.5"], "min_score"),
        (["   "], "intent"),
        (["x" * 10_001], "intent"),
    ],
)
def test_bad_options_are_one_line_errors(cli: Cli, args: list[str], field: str) -> None:
    line = assert_one_line_error(cli.run("discover", *args), "INVALID_INPUT")
    assert field in line
