"""``pml connect --server URL --api-key KEY``: what it refuses, in one line, before anything
starts (the session itself is covered in-process by ``tests/client`` and end to end by
``tests/e2e/test_e2e_connect.py``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner, Result

from clisupport import assert_one_line_error, isolate_cli, sub_app
from pml.cli import connect_cmd

GOOD_KEY = "pml_0123456789abcdefghijklmnopqrstuvwxyz"


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> typer.Typer:
    isolate_cli(tmp_path, monkeypatch)
    return sub_app(connect_cmd.register)


def run(app: typer.Typer, *args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(app, list(args), env=env)


@pytest.mark.parametrize(
    ("args", "missing"),
    [
        (["connect", "--api-key", GOOD_KEY], "--server"),
        (["connect", "--server", "http://127.0.0.1:8765"], "--api-key"),
        (["connect"], "--"),
    ],
    ids=["no-server", "no-key", "nothing"],
)
def test_without_server_or_key_it_is_a_usage_error(
    app: typer.Typer, args: list[str], missing: str
) -> None:
    result = run(app, *args)
    assert result.exit_code == 2
    assert "Missing option" in result.stderr
    assert missing in result.stderr
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.parametrize(
    "server",
    ["ftp://x", "pml.example.com:8765", "http://", "file:///etc/passwd", "http://h:port"],
)
def test_a_server_that_is_not_an_http_url_is_one_line(app: typer.Typer, server: str) -> None:
    result = run(app, "connect", "--server", server, "--api-key", GOOD_KEY)
    line = assert_one_line_error(result, "INVALID_INPUT")
    assert "http(s)://" in line
    assert server in line


@pytest.mark.parametrize(
    "key",
    ["", "   ", "k" * 513, "pml_with space", "pml_tab\tkey", "pml_line\nbreak", "pml_ключ"],
    ids=["empty", "blank", "too-long", "space", "tab", "newline", "not-ascii"],
)
def test_a_key_that_cannot_be_an_api_key_is_one_line(app: typer.Typer, key: str) -> None:
    result = run(app, "connect", "--server", "http://127.0.0.1:8765", "--api-key", key)
    line = assert_one_line_error(result, "INVALID_INPUT")
    assert "--api-key" in line
    if key.strip():
        assert key.strip() not in line  # a key is never echoed


def test_the_key_can_come_from_pml_api_key(app: typer.Typer) -> None:
    # It reaches the checks: with a bad URL, the one error is about the URL.
    result = run(app, "connect", "--server", "ftp://x", env={"PML_API_KEY": GOOD_KEY})
    line = assert_one_line_error(result, "INVALID_INPUT")
    assert "ftp://x" in line
    assert "api-key" not in line.lower()

    result = run(app, "connect", "--server", "ftp://x", env={"PML_API_KEY": "   "})
    assert "--api-key" in assert_one_line_error(result, "INVALID_INPUT")


def test_the_command_line_key_wins_over_pml_api_key(app: typer.Typer) -> None:
    result = run(
        app, "connect", "--server", "ftp://x", "--api-key", "  ", env={"PML_API_KEY": GOOD_KEY}
    )
    assert "--api-key" in assert_one_line_error(result, "INVALID_INPUT")


def test_a_key_with_surrounding_blanks_is_accepted_trimmed(app: typer.Typer) -> None:
    result = run(app, "connect", "--server", "ftp://x", "--api-key", f"  {GOOD_KEY}\n")
    assert "ftp://x" in assert_one_line_error(result, "INVALID_INPUT")


def test_a_bad_url_stops_before_any_local_server_starts(app: typer.Typer, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    config = tmp_path / "pml.toml"
    starter = f"open({str(marker)!r}, 'w').close()"
    config.write_text(
        f"[servers.files]\ncommand = {sys.executable!r}\nargs = ['-c', {starter!r}]\n",
        encoding="utf-8",
    )
    result = run(app, "--config", str(config), "connect", "--server", "ftp://x", "--api-key", "k")
    assert_one_line_error(result, "INVALID_INPUT")
    assert not marker.exists()


def test_a_broken_config_is_one_line_too(app: typer.Typer, tmp_path: Path) -> None:
    config = tmp_path / "pml.toml"
    config.write_text("[servers.files\n", encoding="utf-8")
    result = run(
        app, "--config", str(config), "connect", "--server", "http://127.0.0.1:9", "--api-key", "k"
    )
    assert_one_line_error(result, "CONFIG_ERROR")


def test_loading_the_cli_does_not_import_the_mcp_sdk_or_the_client() -> None:
    # `import mcp` costs most of a second: `pml connect` pays it only inside its body.
    code = (
        "import sys, pml.cli.app\n"
        "assert 'pml.cli.connect_cmd' in sys.modules\n"
        "loaded = {'mcp', 'mcp_types', 'httpx'} & set(sys.modules)\n"
        "loaded |= {name for name in sys.modules if name.startswith('pml.client')}\n"
        "print(sorted(loaded))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"
