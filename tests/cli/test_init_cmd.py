"""``pml init``: starter file, imports from client configs, refusals that write nothing."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner, Result

from clisupport import sub_app
from pml.cli import init_cmd
from pml.config import ServerSettings, default_database_url, import_mcp_servers, load_settings
from samples import CLAUDE_CODE, CLAUDE_DESKTOP, CURSOR, write_json


def make_app() -> typer.Typer:
    return sub_app(init_cmd.register)


def run(*args: str) -> Result:
    return CliRunner().invoke(make_app(), ["init", *args])


def test_init_writes_a_commented_starter_that_loads_back(tmp_path: Path) -> None:
    target = tmp_path / "pml.toml"
    result = run("--config", str(target))
    assert result.exit_code == 0, result.output
    assert result.stdout == f"wrote {target}: 0 servers imported\n"
    text = target.read_text(encoding="utf-8")
    assert f'# database_url = "sqlite:///{default_database_url().removeprefix("sqlite:///")}"' in (
        text
    )
    assert "[scope]" in text
    assert "[sandbox]" in text
    assert "# [servers.filesystem]" in text
    settings = load_settings(target, environ={}, cwd=tmp_path)
    assert settings.servers == {}
    assert settings.scope.org == "local"
    assert settings.sandbox.max_tool_calls == 200
    assert settings.database_url == default_database_url()


def test_init_writes_pml_toml_in_the_working_directory_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PML_CONFIG", raising=False)
    result = run()
    assert result.exit_code == 0, result.output
    assert (tmp_path / "pml.toml").is_file()
    assert load_settings(environ={}, cwd=tmp_path).servers == {}


def test_init_writes_where_pml_config_points_so_other_commands_find_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "elsewhere.toml"
    monkeypatch.setenv("PML_CONFIG", str(target))
    result = run()
    assert result.exit_code == 0, result.output
    assert target.is_file()
    assert not (tmp_path / "pml.toml").exists()


def test_init_honours_the_config_option_given_to_pml_itself(tmp_path: Path) -> None:
    target = tmp_path / "root.toml"
    result = CliRunner().invoke(make_app(), ["--config", str(target), "init"])
    assert result.exit_code == 0, result.output
    assert target.is_file()


def test_init_from_claude_desktop_imports_every_server_and_round_trips(tmp_path: Path) -> None:
    source = write_json(tmp_path / "claude_desktop_config.json", CLAUDE_DESKTOP)
    target = tmp_path / "pml.toml"
    result = run("--from", str(source), "--config", str(target))
    assert result.exit_code == 0, result.output
    assert result.stdout == f"wrote {target}: 3 servers imported from {source}\n"
    assert result.stderr == 'warning: server "time": dropped unknown key "autoApprove"\n'
    settings = load_settings(target, environ={}, cwd=tmp_path)
    assert settings.servers == import_mcp_servers(source)
    assert settings.servers["github"].env == {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_example"}


def test_init_from_claude_code_keeps_types_urls_and_headers(tmp_path: Path) -> None:
    source = write_json(tmp_path / ".mcp.json", CLAUDE_CODE)
    target = tmp_path / "pml.toml"
    assert run("--from", str(source), "--config", str(target)).exit_code == 0
    assert 'Authorization = "Bearer ${SENTRY_TOKEN}"' in target.read_text(encoding="utf-8")
    settings = load_settings(target, environ={"SENTRY_TOKEN": "sntrys_1"}, cwd=tmp_path)
    servers = settings.servers
    assert servers["git"] == ServerSettings(
        type="stdio", command="uvx", args=["mcp-server-git", "--repository", "."]
    )
    assert servers["sentry"] == ServerSettings(
        type="http",
        url="https://mcp.sentry.dev/mcp",
        headers={"Authorization": "Bearer sntrys_1"},
    )
    assert settings.server_as_written("sentry").headers == {
        "Authorization": "Bearer ${SENTRY_TOKEN}"
    }


def test_init_from_cursor_warns_once_per_dropped_key(tmp_path: Path) -> None:
    source = write_json(tmp_path / ".cursor" / "mcp.json", CURSOR)
    target = tmp_path / "pml.toml"
    result = run("--from", str(source), "--config", str(target))
    assert result.exit_code == 0, result.output
    assert "2 servers imported" in result.stdout
    assert sorted(result.stderr.splitlines()) == [
        'warning: server "memory": dropped unknown key "alwaysAllow"',
        'warning: server "memory": dropped unknown key "autoApprove"',
        'warning: server "memory": dropped unknown key "timeout"',
        'warning: server "remote": dropped unknown key "timeout"',
    ]
    assert "alwaysAllow" not in target.read_text(encoding="utf-8")
    assert load_settings(target, environ={}, cwd=tmp_path).servers["remote"].url == (
        "https://example.com/mcp"
    )


def test_server_names_with_dots_spaces_and_unicode_round_trip(tmp_path: Path) -> None:
    names = ["my.server", "with space", "météo", "時間", 'quote"d', "a.b c"]
    source = write_json(
        tmp_path / "c.json",
        {"mcpServers": {name: {"command": "x", "args": [name]} for name in names}},
    )
    target = tmp_path / "pml.toml"
    result = run("--from", str(source), "--config", str(target))
    assert result.exit_code == 0, result.output
    servers = load_settings(target, environ={}, cwd=tmp_path).servers
    assert list(servers) == names
    assert [server.args for server in servers.values()] == [[name] for name in names]


def test_init_refuses_to_overwrite_an_existing_file_without_force(tmp_path: Path) -> None:
    target = tmp_path / "pml.toml"
    target.write_text("# mine\n", encoding="utf-8")
    result = run("--config", str(target))
    assert result.exit_code == 1
    expected = f"error: CONFIG_ERROR: {target} already exists (use --force to overwrite it)\n"
    assert result.stderr == expected
    assert target.read_text(encoding="utf-8") == "# mine\n"
    assert sorted(os.listdir(tmp_path)) == ["pml.toml"]


def test_init_with_force_replaces_an_existing_file(tmp_path: Path) -> None:
    source = write_json(tmp_path / "c.json", CLAUDE_DESKTOP)
    target = tmp_path / "pml.toml"
    target.write_text("# mine\n", encoding="utf-8")
    result = run("--from", str(source), "--force", "--config", str(target))
    assert result.exit_code == 0, result.output
    assert "# mine" not in target.read_text(encoding="utf-8")
    assert sorted(load_settings(target, environ={}, cwd=tmp_path).servers) == [
        "filesystem",
        "github",
        "time",
    ]


def test_init_output_file_is_private_to_its_owner(tmp_path: Path) -> None:
    target = tmp_path / "pml.toml"
    assert run("--config", str(target)).exit_code == 0
    assert stat.S_IMODE(target.stat().st_mode) & 0o077 == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"mcpServers": {"a": {"command": "x"}', "invalid JSON at line 1, column 38"),
        ("[1, 2]", "top level must be a JSON object, not an array"),
        ('{"mcpServers": [{"command": "x"}]}', '"mcpServers" must be an object, not an array'),
        ('{"other": {}}', 'no "mcpServers" object'),
        ('{"mcpServers": {"time": "uvx mcp-server-time"}}', 'server "time" must be an object'),
        ('{"mcpServers": {"t": {"command": "x", "args": "x"}}}', 'server "t": args: Input'),
        ('{"mcpServers": {"t": {"command": 7}}}', 'server "t": command: Input'),
        ('{"mcpServers": {"t": {"env": {}}}}', "server \"t\": needs 'command'"),
        ('{"mcpServers": {"' + "n" * 10_000 + '": {"command": "x"}}}', "10000 characters long"),
        ('{"mcpServers": {"bad\\u0007name": {"command": "x"}}}', "invisible characters"),
        ('{"mcpServers": {"rtl\\u202ename": {"command": "x"}}}', "invisible characters"),
        ('{"mcpServers": {"t": {"command": "x", "args": ["\\udc80"]}}}', "not valid Unicode"),
        ("", "invalid JSON at line 1, column 1"),
    ],
)
def test_hostile_input_is_one_error_line_and_writes_nothing(
    tmp_path: Path, text: str, expected: str
) -> None:
    source = tmp_path / "input.json"
    source.write_text(text, encoding="utf-8", errors="surrogatepass")
    target = tmp_path / "pml.toml"
    result = run("--from", str(source), "--config", str(target))
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.startswith("error: CONFIG_ERROR: ")
    assert expected in result.stderr
    assert result.stderr.count("\n") == 1
    assert len(result.stderr) < 500
    assert sorted(os.listdir(tmp_path)) == ["input.json"]


def test_missing_from_file_is_one_error_line_and_writes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "pml.toml"
    result = run("--from", str(tmp_path / "absent.json"), "--config", str(target))
    assert result.exit_code == 1
    assert result.stderr == f"error: CONFIG_ERROR: {tmp_path / 'absent.json'}: file not found\n"
    assert os.listdir(tmp_path) == []


def test_non_utf8_from_file_is_one_error_line_and_writes_nothing(tmp_path: Path) -> None:
    source = tmp_path / "input.json"
    source.write_bytes(b'{"mcpServers": {"\xff": {"command": "x"}}}')
    result = run("--from", str(source), "--config", str(tmp_path / "pml.toml"))
    assert result.exit_code == 1
    assert "not UTF-8" in result.stderr
    assert sorted(os.listdir(tmp_path)) == ["input.json"]


def test_json_with_a_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    source = tmp_path / "input.json"
    source.write_bytes(b"\xef\xbb\xbf" + json.dumps(CLAUDE_DESKTOP).encode())
    result = run("--from", str(source), "--config", str(tmp_path / "pml.toml"))
    assert result.exit_code == 0, result.output
    assert "3 servers imported" in result.stdout


def test_init_into_a_missing_directory_fails_cleanly(tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "dir" / "pml.toml"
    result = run("--config", str(target))
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: CONFIG_ERROR: cannot write {target}")
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert os.listdir(tmp_path) == []


def test_init_refuses_a_directory_as_target_even_with_force(tmp_path: Path) -> None:
    result = run("--force", "--config", str(tmp_path))
    assert result.exit_code == 1
    assert result.stderr == f"error: CONFIG_ERROR: {tmp_path} is a directory\n"
    assert os.listdir(tmp_path) == []


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "pml.toml"
    target.write_text("# mine\n", encoding="utf-8")

    def refuse(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    result = run("--force", "--config", str(target))
    assert result.exit_code == 1
    assert result.stderr == f"error: CONFIG_ERROR: cannot write {target}: No space left on device\n"
    assert target.read_text(encoding="utf-8") == "# mine\n"
    assert os.listdir(tmp_path) == ["pml.toml"]
