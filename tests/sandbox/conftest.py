"""A fresh ``MontyEngine`` (its own worker pool) per test."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import pytest

from pml.sandbox.monty import MontyEngine


@pytest.fixture
async def engine() -> AsyncGenerator[MontyEngine]:
    sandbox = MontyEngine(max_workers=4)
    yield sandbox
    await sandbox.aclose()
