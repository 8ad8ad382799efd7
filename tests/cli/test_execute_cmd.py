"""``pml execute``: the same answers and errors as the ``pml_execute`` tool, from a shell."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from clisupport import assert_one_line_error, isolate_cli
from pml.cli.app import app
from pml.cli.execute_cmd import parse_arg
from pml.errors import InvalidInput


class Cli:
    def __init__(self, tmp_path: Path) -> None:
        self.env = {
            "PML_DATABASE_URL": f"sqlite:///{tmp_path / 'pml.db'}",
            "PML_CONFIG": "",
            "PML_SCOPE__ORG": "acme",
            "PML_SCOPE__PROJECT": "webapp",
        }
        self.dir = tmp_path

    def run(self, *args: str, stdin: str | None = None) -> Result:
        return CliRunner().invoke(app, ["execute", *args], env=self.env, input=stdin)

    def json(self, *args: str, stdin: str | None = None) -> Any:
        result = self.run(*args, "--json", stdin=stdin)
        assert result.exit_code == 0, (result.stdout, result.stderr)
        return json.loads(result.stdout)

    def snippet(self, code: str) -> str:
        path = self.dir / "snippet.py"
        path.write_text(code)
        return str(path)


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    isolate_cli(tmp_path, monkeypatch)
    return Cli(tmp_path)


def test_a_snippet_file_runs_and_is_captured_then_called_by_name(cli: Cli) -> None:
    code = cli.snippet("print('adding')\nreturn args['a'] + args.get('b', 1)")
    first = cli.json("add numbers", "--code", code, "--arg", "a=41", "--name", "math:add")
    again = cli.json("add again", "--capability", "math:add", "--arg", "a=1", "--arg", "b=2")
    assert first["result"] == 42
    assert first["logs"] == ["adding"]
    assert first["created"] is True
    assert first["capabilityName"] == "math:add"
    assert again["result"] == 3
    assert again["capabilityFqdn"] == first["capabilityFqdn"]


def test_code_from_stdin_and_a_readable_summary(cli: Cli) -> None:
    result = cli.run("greet", "--code", "-", stdin="return {'hello': 'wörld'}")
    assert result.exit_code == 0, result.stderr
    assert "(created)" in result.stdout
    assert '"hello": "wörld"' in result.stdout


def test_suggestions_without_code_or_capability(cli: Cli) -> None:
    answer = cli.json("anything at all")
    assert answer == {"status": "suggestions", "suggestions": []}


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["x", "--code", "missing-file.py"], "INVALID_INPUT"),
        (["x", "--code", "-", "--capability", "y"], "INVALID_INPUT"),
        (["x", "--capability", "nobody"], "NOT_FOUND"),
        (["x", "--code", "-", "--arg", "novalue"], "INVALID_INPUT"),
        (["x", "--code", "-", "--name", "bad name"], "INVALID_NAME"),
        (["", "--code", "-"], "INVALID_INPUT"),
    ],
)
def test_errors_are_one_line_with_the_spec_code(cli: Cli, args: list[str], code: str) -> None:
    result = cli.run(*args, stdin="return 1")
    line = assert_one_line_error(result, code)
    assert "Traceback" not in line


def test_a_failing_snippet_reports_its_error_and_line(cli: Cli) -> None:
    result = cli.run("fail", "--code", "-", stdin="x = 1\nreturn x / 0")
    line = assert_one_line_error(result, "EXECUTION_FAILED")
    assert "ZeroDivisionError" in line
    assert "line 2" in line


def test_json_errors_are_printed_as_json(cli: Cli) -> None:
    result = cli.run("fail", "--code", "-", "--json", stdin="return (((")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["error"]["code"] == "SYNTAX_ERROR"


def test_a_file_that_is_not_utf8_is_refused(cli: Cli) -> None:
    path = cli.dir / "binary.py"
    path.write_bytes(b"\xff\xfe\x00return 1")
    assert_one_line_error(cli.run("x", "--code", str(path)), "INVALID_INPUT")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("n=3", ("n", 3)),
        ("flags=[1, 2]", ("flags", [1, 2])),
        ("path=a.json", ("path", "a.json")),
        ("s=", ("s", "")),
        ("eq=a=b", ("eq", "a=b")),
        ("u=héllo", ("u", "héllo")),
        ('q="quoted"', ("q", "quoted")),
    ],
)
def test_arg_values_are_json_when_they_parse(text: str, expected: tuple[str, Any]) -> None:
    assert parse_arg(text) == expected


@pytest.mark.parametrize("text", ["novalue", "=x", ""])
def test_malformed_args_are_refused(text: str) -> None:
    with pytest.raises(InvalidInput):
        parse_arg(text)
