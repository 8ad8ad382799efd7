"""``pml cap export|import``: capabilities carried from one config's scope to another's.

Tests are sync: each CLI invocation runs its own event loop, and so does the helper that
creates capabilities in the source SQLite file beforehand.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from clisupport import assert_one_line_error, isolate_cli
from pml.analysis.code_hash import normalized_code_hash
from pml.cli.app import app
from pml.registry.models import RenameChanges
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry
from pml.storage.database import Database

PML = str(Path(sys.executable).parent / "pml")
SOURCE = Scope("acme", "webapp", "erwan")
SECRET = "ghp_" + "Zq8xT2mK9vL4nB7cR1wY5sD3fG6hJ0pQ"


@dataclass
class Site:
    """One ``pml.toml`` with its own database and ``[scope]``."""

    config: Path
    database: Path

    def run(self, *args: str) -> Result:
        return CliRunner().invoke(app, [*args, "--config", str(self.config)])

    def json(self, *args: str) -> Any:
        result = self.run(*args, "--json")
        assert result.exit_code == 0, (result.stdout, result.stderr)
        return json.loads(result.stdout)

    def shell(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The installed ``pml`` command, in a process of its own."""
        return subprocess.run(
            [PML, *args, "--config", str(self.config)],
            env=dict(os.environ),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


def make_site(root: Path, name: str, org: str, project: str, user: str) -> Site:
    root.mkdir(parents=True, exist_ok=True)
    site = Site(config=root / f"{name}.toml", database=root / f"{name}.db")
    site.config.write_text(
        f'database_url = "sqlite:///{site.database}"\n'
        f'[scope]\norg = "{org}"\nproject = "{project}"\nuser = "{user}"\n'
    )
    return site


@pytest.fixture
def sites(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Site, Site]:
    workdir = isolate_cli(tmp_path, monkeypatch)
    return (
        make_site(workdir, "source", "acme", "webapp", "erwan"),
        make_site(workdir, "target", "globex", "tools", "zoe"),
    )


def seed(site: Site) -> dict[str, str]:
    """``math:double`` (two versions, tagged), ``math:sixer`` calling it (alias
    ``math:six``) and ``leaky`` (a credential in its code) in the source database."""

    async def body() -> dict[str, str]:
        db = await Database.open(f"sqlite:///{site.database}")
        try:
            registry = CapabilityRegistry(db)
            double = await registry.capture(
                SOURCE, CapabilityDraft("return args['x'] * 2", name="math:double"), latency_ms=1
            )
            await registry.update_code(
                SOURCE,
                "math:double",
                CapabilityDraft("return args['x'] * 2 + 0", version_tag="v2.0.0"),
            )
            inner = double.record.fqdn
            code = f'return await mcp["{inner}"](x=3)'
            six = await registry.capture(
                SOURCE, CapabilityDraft(code, name="math:six", tools_used=[inner]), latency_ms=1
            )
            await registry.rename(SOURCE, "math:six", RenameChanges(new_name="math:sixer"))
            leaky = CapabilityDraft(f'key = "{SECRET}"\nreturn key', name="leaky")
            await registry.capture(SOURCE, leaky, latency_ms=1)
            return {"double": inner, "six": six.record.fqdn}
        finally:
            await db.close()

    return asyncio.run(body())


def test_export_then_import_into_another_scope_with_the_installed_command(
    sites: tuple[Site, Site], tmp_path: Path
) -> None:
    source, target = sites
    seed(source)
    out = tmp_path / "bundle.json"

    exported = source.shell("cap", "export", "math:*", "--out", str(out), "--json")
    imported = target.shell("cap", "import", str(out), "--json")
    lookup = target.shell("cap", "lookup", "math:six", "--json")
    history = target.shell("cap", "history", "math:double", "--json")

    assert exported.returncode == 0, exported.stderr
    assert [e["name"] for e in json.loads(exported.stdout)["exported"]] == [
        "math:double",
        "math:sixer",
    ]
    assert imported.returncode == 0, imported.stderr
    report = json.loads(imported.stdout)
    new_fqdns = {entry["name"]: entry["fqdn"] for entry in report["imported"]}
    assert all(fqdn.startswith("globex.tools.math.") for fqdn in new_fqdns.values())
    assert lookup.returncode == 0, lookup.stderr
    found = json.loads(lookup.stdout)
    assert found["fqdn"] == new_fqdns["math:sixer"]
    assert found["deprecatedAlias"]["currentName"] == "math:sixer"
    versions = json.loads(history.stdout)["versions"]
    assert [(v["version"], v["version_tag"]) for v in versions] == [(2, "v2.0.0"), (1, None)]
    whois = target.json("cap", "whois", new_fqdns["math:sixer"])
    assert whois["code"] == f'return await mcp["{new_fqdns["math:double"]}"](x=3)'


def test_export_to_stdout_leaves_out_the_capability_holding_a_secret(
    sites: tuple[Site, Site],
) -> None:
    source, _ = sites
    fqdns = seed(source)

    result = source.run("cap", "export")

    assert result.exit_code == 0, result.stderr
    bundle = json.loads(result.stdout)
    assert bundle["format"] == "pml-capabilities"
    assert bundle["version"] == 1
    assert sorted(c["display_name"] for c in bundle["capabilities"]) == [
        "math:double",
        "math:sixer",
    ]
    assert SECRET not in result.stdout + result.stderr
    assert "warning: left out leaky" in result.stderr
    assert fqdns["six"] in result.stdout  # the source FQDN, for references to be rewritten


def test_dry_run_prints_the_report_and_changes_nothing(
    sites: tuple[Site, Site], tmp_path: Path
) -> None:
    source, target = sites
    seed(source)
    out = tmp_path / "bundle.json"
    assert source.run("cap", "export", "--out", str(out)).exit_code == 0

    dry = target.run("cap", "import", str(out), "--dry-run")

    assert dry.exit_code == 0, dry.stderr
    assert "2 capabilities would be imported (dry run: nothing changed)" in dry.stdout
    assert "math:sixer" in dry.stdout
    assert target.json("cap", "list")["total"] == 0


def test_conflicts_are_skipped_or_renamed_from_the_command_line(
    sites: tuple[Site, Site], tmp_path: Path
) -> None:
    source, target = sites
    seed(source)
    out = tmp_path / "bundle.json"
    assert source.run("cap", "export", "math:double", "--out", str(out)).exit_code == 0
    assert target.json("cap", "import", str(out))["imported"]  # math:double taken now
    other = json.loads(out.read_text())
    other["capabilities"][0]["source_code_hash"] = None  # other code, same name
    version = other["capabilities"][0]["versions"][-1]
    version["code"] = "return args['x'] * 3"
    version["code_hash"] = normalized_code_hash(version["code"])
    out.write_text(json.dumps(other))

    skipped = target.json("cap", "import", str(out))
    renamed = target.json("cap", "import", str(out), "--on-conflict", "rename")

    assert [s["reason"] for s in skipped["skipped"]] == ["name_taken"]
    assert [r["name"] for r in renamed["renamed"]] == ["math:double_2"]
    assert target.json("cap", "lookup", "math:double_2")["fqdn"] == renamed["renamed"][0]["fqdn"]


def test_a_hostile_bundle_is_refused_in_one_line_and_nothing_is_written(
    sites: tuple[Site, Site], tmp_path: Path
) -> None:
    _, target = sites
    hostile = tmp_path / "hostile.json"
    hostile.write_text('{"format": "pml-capabilities", "version": 1, "x": ' + "[" * 100_000)

    result = target.run("cap", "import", str(hostile))

    line = assert_one_line_error(result, "INVALID_INPUT")
    assert "nested deeper than" in line
    assert target.json("cap", "list")["total"] == 0


def test_an_unknown_conflict_mode_is_refused(sites: tuple[Site, Site], tmp_path: Path) -> None:
    _, target = sites

    result = target.run("cap", "import", str(tmp_path / "none.json"), "--on-conflict", "merge")

    assert "--on-conflict must be one of: skip, rename" in assert_one_line_error(
        result, "INVALID_INPUT"
    )
