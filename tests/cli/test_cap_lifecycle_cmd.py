"""``pml cap archive|restore|purge|deprecate|tag`` on a real SQLite file, through the real
app; purge on a real pseudo-terminal."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cli.test_cap_cmd import SCOPE_ENV, Cli, seed
from clisupport import assert_one_line_error, isolate_cli, on_terminal
from pml.registry.service import CapabilityDraft


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    return Cli(url=f"sqlite:///{tmp_path / 'pml.db'}", workdir=isolate_cli(tmp_path, monkeypatch))


def _seed_pair(cli: Cli) -> tuple[str, str]:
    base, top = seed(
        cli.url,
        CapabilityDraft(code="return 1", name="base", intent="one"),
        CapabilityDraft(code="return 2", name="top", intent="two"),
    )
    return base.fqdn, top.fqdn


def test_archive_list_restore_and_lookup_through_the_cli(cli: Cli) -> None:
    base, _ = _seed_pair(cli)

    archived = cli.json("cap", "archive", "base")

    assert archived["fqdn"] == base
    assert archived["archived"] is True
    assert [item["display_name"] for item in cli.json("cap", "list")["items"]] == ["top"]
    assert [item["fqdn"] for item in cli.json("cap", "list", "--archived")["items"]] == [base]
    assert_one_line_error(cli.run("cap", "lookup", "base"), "NOT_FOUND")
    assert cli.json("cap", "whois", base)["archived"] is True

    seed(cli.url, CapabilityDraft(code="return 3", name="base"))  # the name is free
    taken = assert_one_line_error(cli.run("cap", "restore", "base"), "NAME_TAKEN")
    assert "--name NEW" in taken
    restored = cli.json("cap", "restore", base, "--name", "base-old")
    assert restored["display_name"] == "base-old"
    assert cli.json("cap", "lookup", "base-old")["fqdn"] == base


def test_deprecate_and_tag_through_the_cli(cli: Cli) -> None:
    _, top = _seed_pair(cli)

    deprecated = cli.json("cap", "deprecate", "base", "--replaced-by", "top")
    assert deprecated["replacedBy"] == top
    looked = cli.run("cap", "lookup", "base")
    assert looked.exit_code == 0
    assert "warning: Capability 'base' is deprecated: use 'top'" in looked.stderr

    tagged = cli.json("cap", "tag", "top", "v1.0.0")
    assert (tagged["version"], tagged["version_tag"]) == (1, "v1.0.0")
    assert cli.json("cap", "lookup", "top@v1.0.0")["version_tag"] == "v1.0.0"
    assert_one_line_error(cli.run("cap", "tag", "top", "v2.0.0"), "INVALID_INPUT")
    undone = cli.run("cap", "deprecate", "base", "--undo")
    assert undone.exit_code == 0
    assert "no longer deprecated" in undone.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["cap", "tag", "top", "1.2"],
        ["cap", "tag", "top", "v1.0.0'; DROP TABLE capability_records; --"],
        ["cap", "deprecate", "top", "--message", "x" * 5_000],
        ["cap", "deprecate", "top", "--message", "red \x1b[31m text"],
        ["cap", "deprecate", "top", "--replaced-by", "top"],
        ["cap", "archive", "top@v1"],
        ["cap", "restore", "ｔｏｐ\u202e"],
    ],
)
def test_hostile_lifecycle_input_is_one_clear_error_and_changes_nothing(
    cli: Cli, args: list[str]
) -> None:
    _seed_pair(cli)
    result = cli.run(*args)
    assert result.exit_code == 1
    assert result.stderr.startswith("error: ")
    assert "Traceback" not in result.stdout + result.stderr
    lookup = cli.json("cap", "lookup", "top")
    assert lookup["version_tag"] is None
    assert "deprecated" not in lookup


def test_a_capability_in_use_is_archived_only_with_force(cli: Cli) -> None:
    base, _ = seed(cli.url, CapabilityDraft(code="return 1", name="base"))[0].fqdn, None
    seed(
        cli.url,
        CapabilityDraft(code=f'return await mcp["{base}"]()', name="user", tools_used=[base]),
    )
    refused = assert_one_line_error(cli.run("cap", "archive", "base"), "INVALID_INPUT")
    assert "used by 1 other capability: user (" in refused
    forced = cli.json("cap", "archive", "base", "--force")
    assert [item["display_name"] for item in forced["dependants"]] == ["user"]


def test_purge_needs_a_person_at_a_terminal_who_types_the_name(cli: Cli, tmp_path: Path) -> None:
    base, _ = _seed_pair(cli)
    env = {**os.environ, "PML_DATABASE_URL": cli.url, "PML_CONFIG": "", **SCOPE_ENV}
    prompt = b"for good:"
    code, output = on_terminal(["cap", "purge", "base"], env, cli.workdir, "base", prompt)
    assert code == 1
    assert "error: NOT_FOUND: " in output
    assert "archive it first" in output
    cli.json("cap", "archive", "base")
    # Without a terminal (an agent's shell): refused, nothing deleted.
    assert_one_line_error(cli.run("cap", "purge", "base", "--yes"), "FORBIDDEN")
    assert cli.json("cap", "whois", base)["archived"] is True

    code, output = on_terminal(["cap", "purge", "base"], env, cli.workdir, "bas", prompt)
    assert code == 1
    assert "not purged" in output
    assert cli.json("cap", "whois", base)["archived"] is True

    code, output = on_terminal(["cap", "purge", "base"], env, cli.workdir, "base", prompt)
    assert code == 0, output
    assert f"purged base ({base})" in output
    assert_one_line_error(cli.run("cap", "whois", base), "NOT_FOUND")
    assert tmp_path.exists()
