"""``pml init --from`` keeps ``${VAR}`` as written, rewrites paths that would break, and
writes a project of its own; the files PML creates are private to their owner."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import tomllib
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from clisupport import isolate_cli
from pml.cli.app import app
from pml.config import load_settings
from pml.config_travel import derived_project
from samples import write_json

SECRET = "ghp_n0t_in_any_file_0123456789"

SOURCE: dict[str, Any] = {
    "mcpServers": {
        "github": {
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-github", "--token=${GITHUB_TOKEN}"],
            "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "${GITHUB_TOKEN}", "MODE": "${MODE:-ro}"},
        },
        "docs": {
            "type": "http",
            "url": "${DOCS_URL:-https://example.com}/mcp",
            "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"},
        },
        "mine": {"command": "./bin/server", "args": ["./data", "stdio"]},
        "rooted": {"command": "node", "args": ["./index.js"], "cwd": "srv"},
    }
}


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = isolate_cli(tmp_path, monkeypatch)
    monkeypatch.setenv("GITHUB_TOKEN", SECRET)  # set while importing: still not written
    monkeypatch.setenv("DOCS_URL", "https://leaked.example")
    return folder


def init(*args: str) -> Result:
    return CliRunner().invoke(app, ["init", *args])


def written(target: Path) -> dict[str, Any]:
    return tomllib.loads(target.read_text(encoding="utf-8"))


def test_init_from_keeps_references_and_never_writes_their_values(workdir: Path) -> None:
    source = write_json(workdir / ".mcp.json", SOURCE)
    result = init("--from", str(source))
    assert result.exit_code == 0, result.output
    target = workdir / "pml.toml"
    text = target.read_text(encoding="utf-8")
    assert SECRET not in text
    assert "leaked.example" not in text
    servers = written(target)["servers"]
    assert servers["github"]["env"] == {
        "GITHUB_PERSONAL_ACCESS_TOKEN": "${GITHUB_TOKEN}",
        "MODE": "${MODE:-ro}",
    }
    assert servers["github"]["args"][-1] == "--token=${GITHUB_TOKEN}"
    assert servers["docs"]["url"] == "${DOCS_URL:-https://example.com}/mcp"
    assert servers["docs"]["headers"] == {"Authorization": "Bearer ${GITHUB_TOKEN}"}
    # loading expands them from the environment PML is given
    settings = load_settings(target, environ={"GITHUB_TOKEN": "t"}, cwd=workdir)
    assert settings.servers["github"].env == {"GITHUB_PERSONAL_ACCESS_TOKEN": "t", "MODE": "ro"}
    assert settings.servers["docs"].url == "https://example.com/mcp"


def test_init_from_the_same_folder_keeps_relative_paths_as_written(workdir: Path) -> None:
    source = write_json(workdir / ".mcp.json", SOURCE)
    assert init("--from", str(source)).exit_code == 0
    servers = written(workdir / "pml.toml")["servers"]
    assert (servers["mine"]["command"], servers["mine"]["args"]) == (
        "./bin/server",
        ["./data", "stdio"],
    )
    assert (servers["rooted"]["cwd"], servers["rooted"]["args"]) == ("srv", ["./index.js"])
    loaded = load_settings(workdir / "pml.toml", environ={"GITHUB_TOKEN": "t"}, cwd=Path("/"))
    assert loaded.servers["mine"].command == str(workdir / "bin" / "server")


def test_init_from_another_folder_makes_relative_paths_absolute(workdir: Path) -> None:
    source = write_json(workdir / "client" / "mcp.json", SOURCE)
    target = workdir / "project" / "pml.toml"
    target.parent.mkdir()
    assert init("--from", str(source), "--config", str(target)).exit_code == 0
    servers = written(target)["servers"]
    client = workdir / "client"
    assert servers["mine"]["command"] == str(client / "bin" / "server")
    assert servers["mine"]["args"] == [str(client / "data"), "stdio"]
    assert servers["rooted"]["cwd"] == str(client / "srv")
    assert servers["rooted"]["args"] == ["./index.js"]  # relative to cwd, which moved
    assert servers["github"]["command"] == "npx"
    assert servers["github"]["env"]["GITHUB_PERSONAL_ACCESS_TOKEN"] == "${GITHUB_TOKEN}"


def test_init_writes_the_project_derived_from_its_folder(workdir: Path) -> None:
    first, second = workdir / "a" / "app", workdir / "b" / "app"
    for folder in (first, second):
        folder.mkdir(parents=True)
        assert init("--config", str(folder / "pml.toml")).exit_code == 0
    projects = [written(folder / "pml.toml")["scope"]["project"] for folder in (first, second)]
    assert projects == [derived_project(first), derived_project(second)]
    assert projects[0] != projects[1]
    assert "derived from this file's folder" in (first / "pml.toml").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"command": "x", "env": {"K": "${K"}}, 'server "s": env "K": unterminated'),
        ({"command": "x", "args": ["${A:-${B}}"]}, 'server "s": args: nested'),
        ({"url": "${U:-ftp://x}"}, 'server "s": url: must start with http'),
        ({"command": "x", "headers": {"H": "${ÄPI}"}}, "is not a reference PML expands"),
    ],
)
def test_init_refuses_bad_references_and_writes_nothing(
    workdir: Path, entry: dict[str, Any], expected: str
) -> None:
    source = write_json(workdir / "in.json", {"mcpServers": {"s": entry}})
    result = init("--from", str(source))
    assert result.exit_code == 1
    assert result.stderr.startswith("error: CONFIG_ERROR: ")
    assert expected in result.stderr
    assert result.stderr.count("\n") == 1
    assert sorted(os.listdir(workdir)) == ["in.json"]


def test_init_accepts_an_unset_variable_and_the_loader_names_it(workdir: Path) -> None:
    source = write_json(
        workdir / "in.json", {"mcpServers": {"s": {"url": "${NOT_SET_ANYWHERE}/mcp"}}}
    )
    assert init("--from", str(source)).exit_code == 0
    upgraded = CliRunner().invoke(app, ["db", "upgrade"])
    assert upgraded.exit_code == 1
    assert 'server "s": url: variable NOT_SET_ANYWHERE is not set' in upgraded.stderr


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_pml_toml_and_the_sqlite_files_are_private_to_their_owner(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    previous = os.umask(0o022)  # the usual umask: files would be 0644 without PML's care
    try:
        check_private_files(workdir, monkeypatch)
    finally:
        os.umask(previous)


def check_private_files(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert init().exit_code == 0
    assert mode(workdir / "pml.toml") == 0o600
    database = workdir / "new" / "deeper" / "pml.db"
    monkeypatch.setenv("PML_DATABASE_URL", f"sqlite:///{database}")
    upgraded = CliRunner().invoke(app, ["db", "upgrade"])
    assert upgraded.exit_code == 0, upgraded.output
    assert mode(database) == 0o600
    assert mode(database.parent) == 0o700
    assert mode(database.parent.parent) == 0o700
    assert mode(workdir) != 0o700  # a folder PML did not create keeps its mode
    reader = sqlite3.connect(database)  # WAL mode: -wal and -shm appear while it is open
    try:
        reader.execute("SELECT count(*) FROM sqlite_master").fetchone()
        journals = [database.with_name(database.name + end) for end in ("-wal", "-shm")]
        assert [path for path in journals if path.exists()] == journals
        assert [mode(path) for path in journals] == [0o600, 0o600]
    finally:
        reader.close()


def test_an_existing_database_keeps_the_mode_its_owner_gave_it(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    database = workdir / "shared.db"
    database.touch(mode=0o640)
    database.chmod(0o640)
    monkeypatch.setenv("PML_DATABASE_URL", f"sqlite:///{database}")
    assert CliRunner().invoke(app, ["db", "upgrade"]).exit_code == 0
    assert mode(database) == 0o640


def test_a_database_folder_pml_cannot_create_is_one_storage_error(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = workdir / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("PML_DATABASE_URL", f"sqlite:///{blocker / 'sub' / 'pml.db'}")
    result = CliRunner().invoke(app, ["db", "upgrade"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: STORAGE_ERROR: cannot create ")
    assert result.stderr.count("\n") == 1
    assert json.dumps(result.stderr).count("Traceback") == 0
