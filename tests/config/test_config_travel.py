"""Configs that travel: relative paths, ``${VAR}`` in server entries, the derived project."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from pml.config import Settings, load_settings
from pml.config_travel import derived_project, resolve_paths
from pml.errors import ConfigError
from pml.wiring import scope_of
from samples import write

# -- paths -------------------------------------------------------------------------------


def test_a_command_with_a_separator_resolves_a_bare_name_stays(tmp_path: Path) -> None:
    base = tmp_path / "conf"
    assert resolve_paths({"command": "./server.js"}, base)["command"] == str(base / "server.js")
    assert resolve_paths({"command": "bin/x"}, base)["command"] == str(base / "bin" / "x")
    assert resolve_paths({"command": "../up/x"}, base)["command"] == str(tmp_path / "up" / "x")
    for bare in ("npx", "node", "uvx", "python3.11", "my.server"):
        assert resolve_paths({"command": bare}, base)["command"] == bare


def test_absolute_home_and_variable_paths_are_never_changed(tmp_path: Path) -> None:
    for text in ("/usr/bin/node", "~/bin/x", "${HOME}/bin/x", "$HOME/x"):
        entry = {"command": text, "args": [text]}
        assert resolve_paths(entry, tmp_path) == entry
        assert resolve_paths({"command": "x", "cwd": text}, tmp_path)["cwd"] == text


def test_args_starting_with_dot_slash_resolve_others_only_if_they_exist(tmp_path: Path) -> None:
    write(tmp_path / "dist" / "index.js", "")
    (tmp_path / "data").mkdir()
    args = [
        "./a.js",  # always
        "../b",  # always
        "dist/index.js",  # exists under the config's folder
        "dist/missing.js",  # does not
        "data",  # exists, but a bare name: could be a subcommand
        ".",  # passed as written
        "-y",
        "--root=./x",  # an option's value is not a path PML can tell
        "@modelcontextprotocol/server-everything",
        "owner/repo",
        "https://example.com/a/b",
        "stdio",
        "",
    ]
    resolved = resolve_paths({"command": "node", "args": args}, tmp_path)["args"]
    assert resolved == [
        str(tmp_path / "a.js"),
        str(tmp_path.parent / "b"),
        str(tmp_path / "dist" / "index.js"),
        *args[3:],
    ]


def test_with_cwd_command_and_args_stay_relative_to_it(tmp_path: Path) -> None:
    write(tmp_path / "srv" / "main.py", "")
    write(tmp_path / "main.py", "")
    entry = {"command": "./run.sh", "args": ["./main.py", "srv/main.py"], "cwd": "srv"}
    resolved = resolve_paths(entry, tmp_path)
    assert resolved == {**entry, "cwd": str(tmp_path / "srv")}
    assert resolve_paths({"command": "x", "cwd": "/abs"}, tmp_path)["cwd"] == "/abs"


def test_hostile_path_values_are_left_for_validation(tmp_path: Path) -> None:
    huge = "a/" * 100_000
    entry: dict[str, Any] = {
        "command": 7,
        "args": [None, 3, {"a": 1}, "x\x00/y", huge, "é/ü/時間"],
        "cwd": ["not", "a", "string"],
    }
    resolved = resolve_paths(entry, tmp_path)
    assert resolved["command"] == 7
    assert resolved["cwd"] == ["not", "a", "string"]
    assert resolved["args"][:3] == [None, 3, {"a": 1}]
    assert resolved["args"][3:] == ["x\x00/y", huge, "é/ü/時間"]  # none of them exists
    assert resolve_paths({"args": "./not-a-list"}, tmp_path) == {"args": "./not-a-list"}


# -- load_settings -----------------------------------------------------------------------


def load(config: Path, environ: dict[str, str] | None = None, cwd: Path | None = None) -> Settings:
    return load_settings(config, environ=environ or {}, cwd=cwd or Path("/"))


def test_pml_toml_paths_resolve_against_its_folder_from_any_working_dir(tmp_path: Path) -> None:
    config = write(
        tmp_path / "proj" / "pml.toml",
        '[servers.a]\ncommand = "./bin/a"\nargs = ["./x.js", "stdio"]\n'
        '[servers.b]\ncommand = "uvx"\ncwd = "work"\nargs = ["./y"]\n',
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    servers = load(config, cwd=elsewhere).servers
    assert servers["a"].command == str(tmp_path / "proj" / "bin" / "a")
    assert servers["a"].args == [str(tmp_path / "proj" / "x.js"), "stdio"]
    assert (servers["b"].command, servers["b"].args) == ("uvx", ["./y"])
    assert servers["b"].cwd == str(tmp_path / "proj" / "work")


def test_servers_file_paths_resolve_against_the_json_folder(tmp_path: Path) -> None:
    write(
        tmp_path / "clients" / "mcp.json",
        json.dumps({"mcpServers": {"j": {"command": "./j.sh", "args": ["../shared/k"]}}}),
    )
    config = write(tmp_path / "conf" / "pml.toml", 'servers_file = "../clients/mcp.json"\n')
    server = load(config).servers["j"]
    assert server.command == str(tmp_path / "clients" / "j.sh")
    assert server.args == [str(tmp_path / "shared" / "k")]


def test_variables_expand_in_every_server_field_from_the_given_environ(tmp_path: Path) -> None:
    config = write(
        tmp_path / "pml.toml",
        "[servers.local]\n"
        'command = "${TOOLS}/srv"\n'
        'args = ["--token", "${TOKEN}", "${MODE:-stdio}"]\n'
        'cwd = "./${SUB:-w}"\n'
        'env = { API_KEY = "${TOKEN}", LITERAL = "$${KEEP}", PLAIN = "p" }\n'
        "[servers.remote]\n"
        'url = "${BASE:-https://example.com}/mcp?v=${VER}"\n'
        'headers = { Authorization = "Bearer ${TOKEN}" }\n',
    )
    environ = {"TOOLS": "/opt/tools", "TOKEN": "s3cr3t", "VER": "2"}
    settings = load(config, environ)
    local, remote = settings.servers["local"], settings.servers["remote"]
    assert local.command == "/opt/tools/srv"
    assert local.args == ["--token", "s3cr3t", "stdio"]
    assert local.cwd == str(tmp_path / "w")  # resolved as written, then expanded
    assert local.env == {"API_KEY": "s3cr3t", "LITERAL": "${KEEP}", "PLAIN": "p"}
    assert remote.url == "https://example.com/mcp?v=2"
    assert remote.headers == {"Authorization": "Bearer s3cr3t"}
    written = settings.server_as_written("local")
    assert written.args == ["--token", "${TOKEN}", "${MODE:-stdio}"]
    assert written.env["API_KEY"] == "${TOKEN}"
    assert settings.server_as_written("remote").headers == {"Authorization": "Bearer ${TOKEN}"}
    assert "s3cr3t" not in repr(written) + repr(settings.server_as_written("remote"))


def test_a_value_starting_with_a_reference_is_not_resolved(tmp_path: Path) -> None:
    config = write(tmp_path / "pml.toml", '[servers.s]\ncommand = "${BIN:-./b}/x"\n')
    assert load(config).servers["s"].command == "./b/x"  # as the variable gives it
    assert load(config, {"BIN": "/opt"}).servers["s"].command == "/opt/x"


def test_a_server_without_references_is_its_own_written_form(tmp_path: Path) -> None:
    settings = load(write(tmp_path / "pml.toml", '[servers.t]\ncommand = "uvx"\n'))
    assert settings.server_as_written("t") is settings.servers["t"]


def test_an_unset_variable_is_a_config_error_naming_it_and_the_server(tmp_path: Path) -> None:
    config = write(
        tmp_path / "pml.toml", '[servers.github]\ncommand = "x"\nenv = { T = "${GH}" }\n'
    )
    with pytest.raises(ConfigError) as caught:
        load(config, {"OTHER": "1"})
    message = caught.value.message
    assert message.startswith(f'{config}: server "github": env "T": variable GH is not set')
    assert "${GH:-value}" in message


def test_os_environ_is_never_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONLY_IN_OS_ENVIRON", "leak")
    config = write(
        tmp_path / "pml.toml", '[servers.s]\ncommand = "x"\nargs = ["${ONLY_IN_OS_ENVIRON}"]\n'
    )
    with pytest.raises(ConfigError, match="ONLY_IN_OS_ENVIRON is not set"):
        load(config, {})


def test_a_disabled_server_is_only_checked_and_keeps_its_references(tmp_path: Path) -> None:
    config = write(
        tmp_path / "pml.toml",
        '[servers.off]\nurl = "${BASE}/mcp"\nheaders = { K = "${KEY}" }\ndisabled = true\n',
    )
    server = load(config).servers["off"]
    assert (server.url, server.headers) == ("${BASE}/mcp", {"K": "${KEY}"})
    broken = write(tmp_path / "b.toml", '[servers.off]\ncommand = "x${"\ndisabled = true\n')
    with pytest.raises(ConfigError, match="unterminated"):
        load(broken)


def test_servers_from_pml_variables_expand_too(tmp_path: Path) -> None:
    environ = {
        "PML_SERVERS": json.dumps({"w": {"url": "https://h/mcp", "headers": {"K": "${KEY}"}}}),
        "KEY": "k1",
    }
    settings = load_settings(environ=environ, cwd=tmp_path)
    assert settings.servers["w"].headers == {"K": "k1"}
    assert settings.server_as_written("w").headers == {"K": "${KEY}"}


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ('command = "x"\nargs = ["${A"]', 'server "s": args: unterminated'),
        ('command = "x"\nenv = { K = "${A:-${B}}" }', 'server "s": env "K": nested'),
        ('url = "${NOPE}/mcp"', "variable NOPE is not set"),
        ('url = "${U:-ftp://x}"', "servers.s.url: must start with http:// or https://"),
        ('command = "x"\nargs = [1, "${A"]', "args: unterminated"),
        ('command = "x"\nargs = [1]', "servers.s.args[0]: Input should be a valid string"),
        ('command = "x"\nheaders = { "${K}" = "v" }', None),  # keys are never expanded
    ],
)
def test_bad_references_and_bad_values_are_one_config_error(
    tmp_path: Path, entry: str, expected: str | None
) -> None:
    config = write(tmp_path / "pml.toml", f"[servers.s]\n{entry}\n")
    if expected is None:
        assert load(config).servers["s"].headers == {"${K}": "v"}
        return
    with pytest.raises(ConfigError) as caught:
        load(config)
    assert expected in caught.value.message
    assert "\n" not in caught.value.message


def test_an_injected_value_is_one_argument_not_a_shell_command(tmp_path: Path) -> None:
    config = write(tmp_path / "pml.toml", '[servers.s]\ncommand = "x"\nargs = ["--q=${Q}"]\n')
    hostile = '"; rm -rf / #\n$(id) ${OTHER} `id`'
    server = load(config, {"Q": hostile, "OTHER": "no"}).servers["s"]
    assert server.args == [f"--q={hostile}"]


# -- the project of a config ---------------------------------------------------------------


def test_a_config_without_project_gets_one_derived_from_its_folder(tmp_path: Path) -> None:
    first = write(tmp_path / "one" / "app" / "pml.toml", "")
    second = write(tmp_path / "two" / "app" / "pml.toml", '[scope]\norg = "acme"\n')
    one, two = load(first).scope, load(second).scope
    assert one.project.startswith("app-")
    assert two.project.startswith("app-")
    assert one.project != two.project  # same folder name, different folders
    assert (two.org, one.org) == ("acme", "local")
    assert load(first, cwd=tmp_path).scope.project == one.project  # stable
    assert scope_of(load(first)).project == one.project


def test_configs_naming_the_same_scope_share_it(tmp_path: Path) -> None:
    text = '[scope]\norg = "acme"\nproject = "web"\n'
    first = write(tmp_path / "a" / "pml.toml", text)
    second = write(tmp_path / "b" / "pml.toml", text)
    assert load(first).scope == load(second).scope


def test_project_from_the_environment_beats_the_derived_one(tmp_path: Path) -> None:
    config = write(tmp_path / "app" / "pml.toml", "")
    assert load(config, {"PML_SCOPE__PROJECT": "p2"}).scope.project == "p2"
    assert load(config, {"PML_SCOPE": '{"project": "p3"}'}).scope.project == "p3"
    assert load(config, {"PML_SCOPE": '{"org": "o"}'}).scope.project.startswith("app-")


def test_no_config_file_keeps_the_default_project(tmp_path: Path) -> None:
    assert load_settings(environ={}, cwd=tmp_path).scope.project == "default"


def test_a_symlinked_folder_is_the_same_project(tmp_path: Path) -> None:
    config = write(tmp_path / "real" / "pml.toml", "")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert load(tmp_path / "link" / "pml.toml").scope == load(config).scope


@pytest.mark.parametrize(
    "name", ["My App", "météo", "時間", "a" * 300, "-.-", "x;rm -rf", ".hidden", "a\u202eb"]
)
def test_derived_projects_are_valid_project_names(tmp_path: Path, name: str) -> None:
    folder = tmp_path / name[:200]
    folder.mkdir()
    project = derived_project(folder)
    assert 1 <= len(project) <= 64
    assert all(char.isascii() and (char.isalnum() or char in "_-") for char in project)
    config = write(folder / "pml.toml", "")
    assert load(config).scope.project == project  # accepted by [scope]'s own pattern


def test_the_root_folder_has_a_project_too() -> None:
    project = derived_project(Path(os.sep))
    assert project.startswith("project-")
    assert len(project) == len("project-") + 8
