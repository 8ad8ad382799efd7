"""Settings: pml.toml, PML_ environment overrides, servers_file, mcpServers imports."""

from __future__ import annotations

import getpass
from pathlib import Path

import pytest
from platformdirs import user_data_dir

from pml.config import (
    ScopeSettings,
    ServerSettings,
    Settings,
    default_database_url,
    import_mcp_servers,
    load_settings,
)
from pml.errors import ConfigError
from samples import CLAUDE_CODE, CLAUDE_DESKTOP, CURSOR, write, write_json


def test_defaults_apply_when_there_is_no_config_file(tmp_path: Path) -> None:
    settings = load_settings(environ={}, cwd=tmp_path)
    assert settings.database_url == default_database_url()
    assert (settings.scope.org, settings.scope.project, settings.scope.user) == (
        "local",
        "default",
        None,
    )
    assert settings.servers == {}
    assert settings.servers_file is None
    assert settings.expose_upstream is False
    assert settings.llm is None
    assert settings.policy.mode == "enforce"
    assert settings.sandbox.wall_time_s == 30
    assert settings.sandbox.max_result_bytes == 1_000_000
    assert settings.routing.cloud == []
    assert settings.permissions.deny == []


def test_default_database_is_an_sqlite_file_in_the_user_data_dir() -> None:
    expected = Path(user_data_dir("pml")) / "pml.db"
    assert default_database_url() == f"sqlite:///{expected}"


def test_pml_toml_in_the_working_directory_is_read(tmp_path: Path) -> None:
    write(tmp_path / "pml.toml", '[scope]\norg = "acme"\n[sandbox]\nmemory_mb = 512\n')
    settings = load_settings(environ={}, cwd=tmp_path)
    assert settings.scope.org == "acme"
    assert settings.sandbox.memory_mb == 512
    assert settings.sandbox.max_tool_calls == 200


def test_environment_overrides_beat_the_file_key_by_key(tmp_path: Path) -> None:
    write(
        tmp_path / "pml.toml",
        'database_url = "sqlite:///file.db"\n[scope]\norg = "file-org"\nproject = "file-proj"\n',
    )
    environ = {"PML_DATABASE_URL": "postgresql://db/pml", "PML_SCOPE__ORG": "env-org"}
    settings = load_settings(environ=environ, cwd=tmp_path)
    assert settings.database_url == "postgresql://db/pml"
    assert settings.scope.org == "env-org"
    assert settings.scope.project == "file-proj"


def test_environment_sets_nested_server_fields_lists_and_booleans(tmp_path: Path) -> None:
    write(tmp_path / "pml.toml", '[servers.time]\ncommand = "uvx"\nargs = ["old"]\n')
    environ = {
        "PML_SERVERS__TIME__ARGS": '["mcp-server-time"]',
        "PML_EXPOSE_UPSTREAM": "true",
        "PML_ROUTING__CLOUD": '["github*"]',
    }
    settings = load_settings(environ=environ, cwd=tmp_path)
    assert settings.servers["time"].command == "uvx"
    assert settings.servers["time"].args == ["mcp-server-time"]
    assert settings.expose_upstream is True
    assert settings.routing.cloud == ["github*"]


def test_os_environ_is_never_read_behind_the_callers_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = write(tmp_path / "elsewhere" / "other.toml", '[scope]\norg = "from-os-config"\n')
    monkeypatch.setenv("PML_DATABASE_URL", "postgresql://from-os-environ/pml")
    monkeypatch.setenv("PML_SCOPE__ORG", "from-os-environ")
    monkeypatch.setenv("PML_CONFIG", str(other))
    settings = load_settings(environ={"PML_SCOPE__PROJECT": "given"}, cwd=tmp_path)
    assert settings.database_url == default_database_url()
    assert settings.scope.org == "local"
    assert settings.scope.project == "given"


def test_settings_built_directly_ignore_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PML_SCOPE__ORG", "from-os-environ")
    assert Settings().scope.org == "local"


def test_pml_config_names_the_file_instead_of_the_working_directory(tmp_path: Path) -> None:
    write(tmp_path / "pml.toml", '[scope]\norg = "cwd"\n')
    chosen = write(tmp_path / "conf" / "chosen.toml", '[scope]\norg = "chosen"\n')
    settings = load_settings(environ={"PML_CONFIG": str(chosen)}, cwd=tmp_path)
    assert settings.scope.org == "chosen"


def test_explicit_path_beats_pml_config(tmp_path: Path) -> None:
    from_env = write(tmp_path / "env.toml", '[scope]\norg = "env"\n')
    explicit = write(tmp_path / "explicit.toml", '[scope]\norg = "explicit"\n')
    settings = load_settings(explicit, environ={"PML_CONFIG": str(from_env)}, cwd=tmp_path)
    assert settings.scope.org == "explicit"


def test_explicit_missing_path_is_an_error_even_with_a_local_pml_toml(tmp_path: Path) -> None:
    write(tmp_path / "pml.toml", "")
    with pytest.raises(ConfigError, match="config file not found") as caught:
        load_settings(tmp_path / "nope.toml", environ={}, cwd=tmp_path)
    assert "nope.toml" in caught.value.message


def test_missing_pml_config_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.toml.*PML_CONFIG"):
        load_settings(environ={"PML_CONFIG": str(tmp_path / "nope.toml")}, cwd=tmp_path)


def test_bad_toml_names_the_file_and_the_line(tmp_path: Path) -> None:
    path = write(tmp_path / "pml.toml", '[scope]\norg = "ok"\nproject = \n')
    with pytest.raises(ConfigError) as caught:
        load_settings(environ={}, cwd=tmp_path)
    message = caught.value.message
    assert str(path) in message
    assert "line 3" in message
    assert "\n" not in message


def test_config_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "pml.toml").write_bytes(b'database_url = "\xff"\n')
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_settings(environ={}, cwd=tmp_path)


@pytest.mark.parametrize(
    ("toml", "field"),
    [
        ("[sandbox]\nwall_time = 1\n", "sandbox.wall_time"),
        ('[servers.time]\ncomand = "uvx"\n', "servers.time.comand"),
        ('databse_url = "x"\n', "databse_url"),
        ('_env_file = ".env"\n', "_env_file"),
        ('[policy]\nrules = ["x"]\n', "policy.rules"),
    ],
)
def test_unknown_keys_are_rejected_with_their_path(tmp_path: Path, toml: str, field: str) -> None:
    write(tmp_path / "pml.toml", toml)
    with pytest.raises(ConfigError, match="unknown key") as caught:
        load_settings(environ={}, cwd=tmp_path)
    assert field in caught.value.message


@pytest.mark.parametrize(
    ("toml", "field"),
    [
        ("[servers.time]\ncommand = 3\n", "servers.time.command"),
        ('[servers.time]\ncommand = "uvx"\nargs = "x"\n', "servers.time.args"),
        ('[servers."my.time"]\ncommand = ["uvx"]\n', 'servers."my.time".command'),
        ('[scope]\norg = "has space"\n', "scope.org"),
        ("[sandbox]\nmemory_mb = 0\n", "sandbox.memory_mb"),
        ('[policy]\nmode = "lenient"\n', "policy.mode"),
        ('[llm]\nbase_url = "http://localhost:11434/v1"\n', "llm.model"),
        ('[servers.web]\nurl = "ftp://example.com"\n', "servers.web.url"),
        ("[routing]\ntrace_claim_lease_s = 0.5\n", "routing.trace_claim_lease_s"),
        ("[routing]\ntrace_claim_lease_s = 1e9\n", "routing.trace_claim_lease_s"),
        ('[routing]\ntrace_claim_lease_s = "soon"\n', "routing.trace_claim_lease_s"),
        ("[routing]\ntrace_claim_lease_s = nan\n", "routing.trace_claim_lease_s"),
    ],
)
def test_schema_violations_name_the_field_path(tmp_path: Path, toml: str, field: str) -> None:
    path = write(tmp_path / "pml.toml", toml)
    with pytest.raises(ConfigError) as caught:
        load_settings(environ={}, cwd=tmp_path)
    assert f"{path}: {field}:" in caught.value.message


def test_server_with_neither_command_nor_url_is_rejected_naming_it(tmp_path: Path) -> None:
    write(tmp_path / "pml.toml", '[servers.broken]\nargs = ["x"]\n')
    with pytest.raises(ConfigError, match=r"servers\.broken: needs 'command'"):
        load_settings(environ={}, cwd=tmp_path)


def test_server_with_both_command_and_url_is_rejected(tmp_path: Path) -> None:
    write(tmp_path / "pml.toml", '[servers.both]\ncommand = "x"\nurl = "https://e.com/mcp"\n')
    with pytest.raises(ConfigError, match=r"servers\.both: sets both"):
        load_settings(environ={}, cwd=tmp_path)


def test_invalid_environment_value_is_blamed_on_the_environment(tmp_path: Path) -> None:
    write(tmp_path / "pml.toml", "[sandbox]\nmemory_mb = 512\n")
    with pytest.raises(ConfigError, match=r"^environment.*sandbox\.memory_mb"):
        load_settings(environ={"PML_SANDBOX__MEMORY_MB": "-1"}, cwd=tmp_path)


def test_malformed_json_in_an_environment_value_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r'^environment: .*field "routing"') as caught:
        load_settings(environ={"PML_ROUTING__CLOUD": '["unterminated'}, cwd=tmp_path)
    assert "_MappingEnvSource" not in caught.value.message


def test_servers_file_is_merged_relative_to_the_config_directory(tmp_path: Path) -> None:
    config_dir = tmp_path / "conf"
    write(
        config_dir / "pml.toml", 'servers_file = "desktop.json"\n[servers.local]\ncommand = "x"\n'
    )
    write_json(config_dir / "desktop.json", CLAUDE_DESKTOP)
    settings = load_settings(config_dir / "pml.toml", environ={}, cwd=tmp_path)
    assert sorted(settings.servers) == ["filesystem", "github", "local", "time"]
    assert settings.servers["github"].env == {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_example"}
    assert settings.servers_file == config_dir / "desktop.json"


def test_servers_file_from_the_environment_without_a_config_file_uses_cwd(tmp_path: Path) -> None:
    write_json(tmp_path / "cursor.json", CURSOR)
    settings = load_settings(environ={"PML_SERVERS_FILE": "cursor.json"}, cwd=tmp_path)
    assert sorted(settings.servers) == ["memory", "remote"]


def test_server_in_both_the_config_and_servers_file_is_rejected_naming_it(
    tmp_path: Path,
) -> None:
    write(tmp_path / "pml.toml", 'servers_file = "d.json"\n[servers.github]\ncommand = "gh"\n')
    write_json(tmp_path / "d.json", CLAUDE_DESKTOP)
    with pytest.raises(ConfigError, match='"github" is defined both'):
        load_settings(environ={}, cwd=tmp_path)


def test_missing_servers_file_is_a_config_error(tmp_path: Path) -> None:
    write(tmp_path / "pml.toml", 'servers_file = "gone.json"\n')
    with pytest.raises(ConfigError, match=r"gone\.json: file not found"):
        load_settings(environ={}, cwd=tmp_path)


def test_bad_json_servers_file_is_a_config_error_with_its_position(tmp_path: Path) -> None:
    write(tmp_path / "pml.toml", 'servers_file = "bad.json"\n')
    write(tmp_path / "bad.json", '{\n  "mcpServers": {,}\n}')
    with pytest.raises(ConfigError, match=r"bad\.json: invalid JSON at line 2, column 18"):
        load_settings(environ={}, cwd=tmp_path)


def test_effective_user_is_the_configured_user_else_the_os_user() -> None:
    assert ScopeSettings(user="alice").effective_user() == "alice"
    assert ScopeSettings().effective_user() == getpass.getuser()


def test_effective_user_survives_an_os_without_a_user_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_user() -> str:
        raise OSError("no user")

    monkeypatch.setattr(getpass, "getuser", no_user)
    assert ScopeSettings().effective_user() == "local"


def test_claude_desktop_config_imports_command_args_and_env(tmp_path: Path) -> None:
    dropped: list[str] = []
    servers = import_mcp_servers(
        write_json(tmp_path / "claude_desktop_config.json", CLAUDE_DESKTOP), warn=dropped.append
    )
    assert list(servers) == ["filesystem", "github", "time"]
    assert servers["filesystem"].args[-1] == "/Users/me/Desktop"
    assert servers["github"].env["GITHUB_PERSONAL_ACCESS_TOKEN"] == "ghp_example"
    assert dropped == ['server "time": dropped unknown key "autoApprove"']


def test_claude_code_mcp_json_imports_stdio_http_and_sse_entries(tmp_path: Path) -> None:
    servers = import_mcp_servers(write_json(tmp_path / ".mcp.json", CLAUDE_CODE))
    assert servers["git"] == ServerSettings(
        type="stdio", command="uvx", args=["mcp-server-git", "--repository", "."]
    )
    assert servers["sentry"].type == "http"
    assert servers["sentry"].url == "https://mcp.sentry.dev/mcp"
    assert servers["sentry"].headers == {"Authorization": "Bearer ${SENTRY_TOKEN}"}
    assert servers["legacy"].type == "sse"


def test_cursor_config_drops_unknown_keys_and_reports_each(tmp_path: Path) -> None:
    dropped: list[str] = []
    servers = import_mcp_servers(
        write_json(tmp_path / ".cursor" / "mcp.json", CURSOR), warn=dropped.append
    )
    assert servers["memory"].env == {"MEMORY_FILE_PATH": "/tmp/memory.json"}
    assert servers["remote"].headers == {"X-Api-Key": "k"}
    assert sorted(dropped) == [
        'server "memory": dropped unknown key "alwaysAllow"',
        'server "memory": dropped unknown key "autoApprove"',
        'server "memory": dropped unknown key "timeout"',
        'server "remote": dropped unknown key "timeout"',
    ]


def test_unicode_dotted_and_spaced_server_names_are_accepted(tmp_path: Path) -> None:
    names = ["météo", "時間", "my.server", "with space"]
    config = {"mcpServers": {name: {"command": "x"} for name in names}}
    assert list(import_mcp_servers(write_json(tmp_path / "c.json", config))) == names


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"mcpServers": {"a": {"command": "x"},}}', r"invalid JSON at line 1, column 39"),
        ("[]", "top level must be a JSON object, not an array"),
        ('"mcpServers"', "top level must be a JSON object, not a string"),
        ('{"servers": {}}', 'no "mcpServers" object'),
        ('{"mcpServers": []}', '"mcpServers" must be an object, not an array'),
        ('{"mcpServers": {"time": "uvx mcp-server-time"}}', '"time" must be an object'),
        ('{"mcpServers": {"time": {"args": ["x"]}}}', "server \"time\": needs 'command'"),
        ('{"mcpServers": {"t": {"command": "x", "args": "x"}}}', '"t": args: Input should be'),
        ('{"mcpServers": {"t": {"command": "x", "env": {"A": 1}}}}', '"t": env.A: Input'),
        ('{"mcpServers": {"t": {"type": "stdio", "url": "https://e.com"}}}', "'stdio' needs"),
        ('{"mcpServers": {"t": {"type": "http", "command": "x"}}}', "'http' needs 'url'"),
        ('{"mcpServers": {"": {"command": "x"}}}', "must not be empty"),
        ('{"mcpServers": {"a\\u0000b": {"command": "x"}}}', r'"a\\x00b".*invisible'),
        ('{"mcpServers": {"evil\\u202e": {"command": "x"}}}', "invisible characters"),
        ('{"mcpServers": {"\\ud800": {"command": "x"}}}', "invisible characters"),
        ("[" * 100_000, "invalid JSON: nested too deeply"),
        ('{"mcpServers": {"t": {"command": "x", "lazy": ' + "9" * 5000 + "}}}", "invalid JSON"),
    ],
)
def test_hostile_mcp_configs_are_one_line_config_errors(
    tmp_path: Path, text: str, expected: str
) -> None:
    with pytest.raises(ConfigError, match=expected) as caught:
        import_mcp_servers(write(tmp_path / "c.json", text))
    assert "\n" not in caught.value.message


def test_ten_thousand_character_server_name_is_rejected_with_a_short_message(
    tmp_path: Path,
) -> None:
    path = write_json(tmp_path / "c.json", {"mcpServers": {"n" * 10_000: {"command": "x"}}})
    with pytest.raises(ConfigError, match="10000 characters long") as caught:
        import_mcp_servers(path)
    assert len(caught.value.message) < 300


def test_a_server_named_pml_is_refused_as_reserved(tmp_path: Path) -> None:
    path = write_json(tmp_path / "c.json", {"mcpServers": {"pml": {"command": "x"}}})
    with pytest.raises(ConfigError, match="'pml' is reserved"):
        import_mcp_servers(path)
    assert import_mcp_servers(
        write_json(tmp_path / "d.json", {"mcpServers": {"pml2": {"command": "x"}}})
    )


def test_missing_mcp_config_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        import_mcp_servers(tmp_path / "absent.json")


def test_directory_instead_of_mcp_config_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        import_mcp_servers(tmp_path)


def test_deeply_nested_toml_is_a_config_error(tmp_path: Path) -> None:
    write(tmp_path / "pml.toml", "x = " + "[" * 100_000)
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_settings(environ={}, cwd=tmp_path)


@pytest.mark.parametrize(
    "token",
    ["short", "a token with spaces inside", "tok\nen-0123456789abcdef", "é" * 20, "x" * 513],
)
def test_a_metrics_token_a_bearer_header_cannot_carry_is_refused(token: str) -> None:
    with pytest.raises(ConfigError, match="metrics_token"):
        load_settings(environ={"PML_TELEMETRY__METRICS_TOKEN": token}, cwd=Path("/nonexistent"))


def test_a_base64_metrics_token_is_accepted() -> None:
    token = "c2NyYXBlLXRva2VuLTAxMjM0NTY3ODlhYmNkZWY+/=="
    settings = load_settings(
        environ={"PML_TELEMETRY__METRICS_TOKEN": token}, cwd=Path("/nonexistent")
    )
    assert settings.telemetry.metrics_token == token


@pytest.mark.parametrize("value", ["auto", "own", "shared"])
def test_the_model_process_is_read_and_serving_decides_auto(tmp_path: Path, value: str) -> None:
    from pml.cli.common import with_model_process

    write(tmp_path / "pml.toml", f'[discovery]\nmodel_process = "{value}"\n')
    settings = load_settings(environ={}, cwd=tmp_path)
    assert settings.discovery.model_process == value
    stdio = with_model_process(settings, stdio=True).discovery.model_process
    http = with_model_process(settings, stdio=False).discovery.model_process
    assert (stdio, http) == (("shared", "own") if value == "auto" else (value, value))
    assert settings.discovery.model_process == value  # the loaded settings are left as read


@pytest.mark.parametrize("value", ['"elsewhere"', "1", '"SHARED"', '"shared; rm -rf /"', "[]"])
def test_a_model_process_that_is_not_one_of_the_three_is_a_config_error(
    tmp_path: Path, value: str
) -> None:
    write(tmp_path / "pml.toml", f"[discovery]\nmodel_process = {value}\n")
    with pytest.raises(ConfigError, match="model_process"):
        load_settings(environ={}, cwd=tmp_path)
    with pytest.raises(ConfigError, match="model_process"):
        load_settings(environ={"PML_DISCOVERY__MODEL_PROCESS": "remote"}, cwd=tmp_path / "x")
