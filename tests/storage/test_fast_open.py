"""A database already at the shipped head opens without alembic (a start saves ~0.2 s)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pml.storage.database import SHIPPED_HEAD, Database, head_revision

OPEN_AND_REPORT = """
import sys, anyio
from pml.storage.database import Database

async def main():
    db = await Database.open(sys.argv[1])
    print("alembic" in sys.modules)
    await db.close()

anyio.run(main)
"""


def test_the_shipped_head_is_alembics_head() -> None:
    assert head_revision() == SHIPPED_HEAD


def alembic_loaded_opening(url: str) -> bool:
    out = subprocess.run(
        [sys.executable, "-c", OPEN_AND_REPORT, url], capture_output=True, text=True, check=True
    )
    return out.stdout.strip() == "True"


def test_only_a_database_behind_the_head_loads_alembic(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'pml.db'}"
    assert alembic_loaded_opening(url)  # blank: migrated
    assert not alembic_loaded_opening(url)  # at the head: plain SQL said so


@pytest.mark.anyio
async def test_a_database_behind_the_head_is_still_migrated(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'pml.db'}"
    db = await Database.open(url, migrate=False)
    try:
        await db.upgrade("0012")
        assert await db.current_revision() == "0012"
        await db.upgrade()
        assert await db.current_revision() == SHIPPED_HEAD
    finally:
        await db.close()
