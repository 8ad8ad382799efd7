"""``pml agent``'s own input checks: what it needs before any model is called."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clisupport import assert_one_line_error, isolate_cli, sub_app
from pml.cli import agent_cmd

app = sub_app(agent_cmd.register)


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return isolate_cli(tmp_path, monkeypatch)


def _config(workdir: Path, llm: bool) -> Path:
    path = workdir / "pml.toml"
    text = f'database_url = "sqlite:///{workdir / "pml.db"}"\n'
    if llm:
        text += '[llm]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n'
    path.write_text(text)
    return path


def test_without_an_llm_section_it_says_what_to_configure(workdir: Path) -> None:
    config = _config(workdir, llm=False)
    result = CliRunner().invoke(app, ["--config", str(config), "agent", "--once", "hi"])
    line = assert_one_line_error(result, "CONFIG_ERROR")
    assert "[llm]" in line
    assert "base_url" in line


def test_the_error_is_json_with_json(workdir: Path) -> None:
    config = _config(workdir, llm=False)
    args = ["--config", str(config), "agent", "--once", "hi", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1
    assert json.loads(result.stdout)["error"]["code"] == "CONFIG_ERROR"


@pytest.mark.parametrize("prompt", ["", "   ", "\n\t"])
def test_a_blank_prompt_is_refused_before_anything_opens(workdir: Path, prompt: str) -> None:
    config = _config(workdir, llm=True)
    result = CliRunner().invoke(app, ["--config", str(config), "agent", "--once", prompt])
    assert_one_line_error(result, "INVALID_INPUT")
    assert not (workdir / "pml.db").exists()


def test_json_without_once_is_refused(workdir: Path) -> None:
    config = _config(workdir, llm=True)
    result = CliRunner().invoke(app, ["--config", str(config), "agent", "--json"])
    assert result.exit_code == 1
    assert "--once" in json.loads(result.stdout)["error"]["message"]
    assert not (workdir / "pml.db").exists()


@pytest.mark.parametrize(
    "line",
    [
        'base_url = "file:///etc/passwd"\nmodel = "m"\n',
        'base_url = "http://127.0.0.1:9/v1"\n',
        'base_url = "http://127.0.0.1:9/v1"\nmodel = "m"\napi_key = "sk-inline"\n',
    ],
    ids=["not-http", "no-model", "inline-key"],
)
def test_a_bad_llm_section_is_a_config_error(workdir: Path, line: str) -> None:
    config = workdir / "pml.toml"
    config.write_text(f'database_url = "sqlite:///{workdir / "pml.db"}"\n[llm]\n{line}')
    result = CliRunner().invoke(app, ["--config", str(config), "agent", "--once", "hi"])
    assert_one_line_error(result, "CONFIG_ERROR")
    assert "sk-inline" not in result.stderr
