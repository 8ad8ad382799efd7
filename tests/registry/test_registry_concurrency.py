"""Concurrent writers: one name, one capability per code, no half-written state."""

from __future__ import annotations

import anyio
import pytest

from pml.errors import NameTaken
from pml.registry.models import ListQuery
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry, RenameChanges
from pml.storage.database import Database

pytestmark = pytest.mark.anyio


async def test_concurrent_captures_of_the_same_code_make_one_capability(
    database_url: str, scope: Scope
) -> None:
    # Two processes' worth of connections: separate Database objects on one store.
    first, second = await Database.open(database_url), await Database.open(database_url)
    outcomes: list[bool] = []
    try:

        async def capture(db: Database) -> None:
            result = await CapabilityRegistry(db).capture(
                scope, CapabilityDraft(code="return 42"), latency_ms=1
            )
            outcomes.append(result.created)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                for _ in range(4):
                    group.start_soon(capture, first)
                    group.start_soon(capture, second)
        page = await CapabilityRegistry(first).list(scope, ListQuery())
    finally:
        await first.close()
        await second.close()
    assert sorted(outcomes) == [False] * 7 + [True]
    assert page.total == 1
    assert page.items[0].usage_count == 8


async def test_concurrent_renames_to_one_name_let_exactly_one_win(
    database_url: str, scope: Scope
) -> None:
    first, second = await Database.open(database_url), await Database.open(database_url)
    try:
        registry = CapabilityRegistry(first)
        names = [
            (
                await registry.capture(scope, CapabilityDraft(code=f"return {i}"), latency_ms=1)
            ).record.display_name
            for i in range(6)
        ]
        won: list[str] = []
        lost: list[str] = []

        async def rename(db: Database, name: str) -> None:
            try:
                await CapabilityRegistry(db).rename(scope, name, RenameChanges(new_name="the-one"))
                won.append(name)
            except NameTaken:
                lost.append(name)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                for index, name in enumerate(names):
                    group.start_soon(rename, first if index % 2 else second, name)
        winner = (await registry.resolve(scope, "the-one")).record
        still_unnamed = await registry.list(scope, ListQuery(unnamed_only=True))
    finally:
        await first.close()
        await second.close()
    assert len(won) == 1
    assert len(lost) == 5
    assert winner.display_name == "the-one"
    assert still_unnamed.total == 5
