"""``pml status``: the capabilities of the project that keep failing (never another
tenant's), and the embedding model named with no gateway running."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from cli.test_status_cmd import CONFIG, Cli
from pml.execution.recorder import UsageRecorder
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry, RenameChanges
from pml.storage.database import Database

OURS = Scope("acme", "webapp", "erwan")  # the scope of the test config
THEIRS = Scope("globex", "webapp", "mallory")


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    """The status test config (scope acme.webapp as erwan) and an SQLite file."""
    for key in [key for key in os.environ if key.startswith("PML_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "pml.toml"
    config.write_text(CONFIG, encoding="utf-8")
    db_file = tmp_path / "pml.db"
    return Cli(url=f"sqlite:///{db_file}", db_file=db_file, config=config)


def seed_failing(url: str, names: dict[str, tuple[Scope, int]]) -> None:
    """Named capabilities, each with ``failures`` failed runs after its first success."""

    async def body() -> None:
        db = await Database.open(url)
        try:
            registry = CapabilityRegistry(db)
            async with UsageRecorder(db, delay_s=60) as recorder:
                for name, (scope, failures) in names.items():
                    draft = CapabilityDraft(code=f"return {name!r}", intent=name)
                    created = await registry.capture(scope, draft, latency_ms=1)
                    changes = RenameChanges(new_name=name, visibility="public")
                    await registry.rename(scope, created.record.fqdn, changes)
                    for _ in range(failures):
                        recorder.count(created.record.fqdn, success=False, latency_ms=2)
        finally:
            await db.close()

    asyncio.run(body())


def test_status_names_the_projects_failing_capabilities_only(cli: Cli) -> None:
    names = {f"broken_{index:02d}": (OURS, 5) for index in range(12)}
    names |= {"works": (OURS, 0), "barely": (OURS, 1), "their_broken": (THEIRS, 9)}
    seed_failing(cli.url, names)

    status = cli.json("status")

    failing = status["failing"]
    assert failing["count"] == 12
    assert len(failing["names"]) == 10
    assert set(failing["names"]) <= {f"broken_{index:02d}" for index in range(12)}
    text = cli.run("status").stdout
    assert "12 keep failing" in text
    assert "and 2 more" in text
    assert "their_broken" not in text
    assert "works" not in text.split("keep failing")[1].split("\n")[0]


def test_status_names_the_embedding_model_with_no_gateway(cli: Cli) -> None:
    seed_failing(cli.url, {})
    status = cli.json("status")
    assert status["gateway"]["running"] is False
    embedding = status["embedding"]
    assert embedding["source"] == "settings"
    assert isinstance(embedding["model"], str)
    assert embedding["model"]
    assert f"embedding model {embedding['model']}" in cli.run("status").stdout
    assert status["failing"] == {"count": 0, "names": []}
