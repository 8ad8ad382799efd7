"""The recent-runs signal: the pure rules, the bit window in the database (SQLite and
PostgreSQL), concurrent batches, hostile values, and the fields ``cap_list``/``cap_lookup``
answer with."""

from __future__ import annotations

import math
import random
from typing import Any

import anyio
import pytest
import sqlalchemy as sa

from pml.execution.recorder import UsageRecorder
from pml.registry.reliability import (
    MAX_LATENCY_MS,
    WINDOW,
    Reliability,
    clean_latency,
    counts_against,
    outcome_bits,
    shifted,
)
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry, RenameChanges
from pml.registry.tools import CapTools
from pml.storage.capability_usage import RunCounts, add_usage, failing_in_project
from pml.storage.database import Database
from pml.storage.tables import capability_records as records
from pml.storage.types import utc_now

pytestmark = pytest.mark.anyio


# -- pure rules ------------------------------------------------------------------------------


def test_failing_needs_enough_runs_and_under_half_of_them_succeeding() -> None:
    assert not Reliability.of(0b000, 3, 0).failing  # three failures: too few runs to judge
    assert Reliability.of(0b0000, 4, 0).failing
    assert Reliability.of(0b0001, 4, 0).failing  # 1 of 4
    assert not Reliability.of(0b0011, 4, 0).failing  # 2 of 4 is not under half
    assert Reliability.of(0b0000001111, 10, 0).failing  # 4 of 10
    assert not Reliability.of(0b0000011111, 10, 0).failing  # 5 of 10
    assert Reliability.of(0, 0, 0).success_rate is None
    assert Reliability.of(0b111, 3, 0).success_rate == 1.0


def test_fields_say_failing_only_when_failing() -> None:
    healthy = Reliability.of(0b1011, 4, 12.345).fields()
    assert healthy == {"recent_runs": 4, "recent_success_rate": 0.75, "recent_latency_ms": 12.3}
    assert Reliability.of(0b1000, 4, 1).fields()["failing"] is True


def test_hostile_columns_never_make_a_wrong_signal() -> None:
    assert Reliability.of(-1, -5, -3.0) == Reliability(0, 0, 0.0)
    huge = Reliability.of(2**80 - 1, 10**12, float("inf"))
    assert (huge.runs, huge.successes, huge.latency_ms) == (WINDOW, WINDOW, MAX_LATENCY_MS)
    assert Reliability.of(0b1111, 2, float("nan")) == Reliability(2, 2, 0.0)  # bits past runs
    for value in (float("nan"), "12", None, [], -1.0, float("-inf")):
        assert clean_latency(value) in (0.0, 12.0)
        assert math.isfinite(clean_latency(value))


def test_only_a_runs_own_failures_count_against_it() -> None:
    for code in ("EXECUTION_FAILED", "TOOL_ERROR", "TIMEOUT", "UPSTREAM_UNAVAILABLE"):
        assert counts_against(code)
    assert counts_against(None)  # a success
    for code in ("INVALID_ARGS", "POLICY_DENIED", "PERMISSION_DENIED", "APPROVAL_REQUIRED",
                 "BUSY", "RATE_LIMITED", "NOT_FOUND", "' OR 1=1 --", ""):  # fmt: skip
        assert not counts_against(code)


def test_bits_keep_the_newest_runs_in_order() -> None:
    assert outcome_bits([True, False, True]) == (0b101, 3)
    assert outcome_bits([False] * 30 + [True]) == (1, WINDOW)
    assert shifted(0b1, 1, 0b00, 2) == (0b100, 3)
    assert shifted(0b1111111111, 10, 0, 3) == (0b1111111000, 10)


# -- in the database -------------------------------------------------------------------------


async def _capability(registry: CapabilityRegistry, scope: Scope, code: str = "return 1") -> str:
    draft = CapabilityDraft(code=code, intent="do it")
    return (await registry.capture(scope, draft, latency_ms=5)).record.fqdn


async def _columns(db: Database, fqdn: str) -> dict[str, Any]:
    async with db.read() as conn:
        row = (await conn.execute(sa.select(records).where(records.c.fqdn == fqdn))).one()
    return dict(row._mapping)  # pyright: ignore[reportPrivateUsage]


async def test_the_window_over_many_mixed_batches_matches_the_model(
    db: Database, registry: CapabilityRegistry, scope: Scope
) -> None:
    fqdn = await _capability(registry, scope)
    model_bits, model_runs = 1, 1  # a new capability starts with one successful run
    runs, successes = 1, 1
    chance = random.Random(20)
    async with UsageRecorder(db, delay_s=60) as recorder:
        for _ in range(30):
            batch = [chance.random() < 0.6 for _ in range(chance.randint(1, 25))]
            for success in batch:
                recorder.count(fqdn, success=success, latency_ms=chance.uniform(1, 50))
            await recorder.flush()
            bits, count = outcome_bits(batch)
            model_bits, model_runs = shifted(model_bits, model_runs, bits, count)
            runs, successes = runs + len(batch), successes + sum(batch)
            stored = await _columns(db, fqdn)
            assert (stored["recent_outcomes"], stored["recent_runs"]) == (model_bits, model_runs)
            assert (stored["usage_count"], stored["success_count"]) == (runs, successes)
            assert 1 <= stored["recent_latency_ms"] <= 50


async def test_failing_is_marked_after_failures_and_cleared_after_successes(
    db: Database, registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    fqdn = await _capability(registry, scope)
    await registry.rename(scope, fqdn, RenameChanges(new_name="fs:flaky"))
    async with UsageRecorder(db, delay_s=60) as recorder:
        for _ in range(2):
            recorder.count(fqdn, success=False, latency_ms=100)
        await recorder.flush()  # 1 success in 3 runs: too few to judge
        assert "failing" not in await tools.call("cap_lookup", scope, {"name": "fs:flaky"})
        for _ in range(2):
            recorder.count(fqdn, success=False, latency_ms=100)  # 1 success in 5 runs
        await recorder.flush()
        looked = await tools.call("cap_lookup", scope, {"name": "fs:flaky"})
        assert looked["failing"] is True
        assert (looked["recent_runs"], looked["recent_success_rate"]) == (5, 0.2)
        assert (looked["usage_count"], looked["success_rate"]) == (5, 0.2)
        listed = await tools.call("cap_list", scope, {"pattern": "fs:*"})
        (item,) = listed["items"]
        assert (item["failing"], item["recent_runs"]) == (True, 5)
        assert "recent_outcomes" not in item  # the stored bits are not an answer field
        whois = await tools.call("cap_whois", scope, {"fqdn": fqdn})
        assert (whois["failing"], whois["recent_success_rate"]) == (True, 0.2)
        assert "recent_outcomes" not in whois
        # not judged: refused arguments say nothing about it
        for _ in range(5):
            recorder.count(fqdn, success=False, latency_ms=1, judged=False)
        for _ in range(WINDOW // 2 + 1):
            recorder.count(fqdn, success=True, latency_ms=10)
        await recorder.flush()
    looked = await tools.call("cap_lookup", scope, {"name": "fs:flaky"})
    assert "failing" not in looked
    assert (looked["recent_runs"], looked["recent_success_rate"]) == (WINDOW, 0.6)
    assert looked["usage_count"] == 16  # the unjudged runs count in the totals
    assert 10 < looked["recent_latency_ms"] < 100  # moving toward the new runs' 10 ms


async def test_concurrent_batches_from_two_recorders_lose_no_run(
    database_url: str, registry: CapabilityRegistry, scope: Scope
) -> None:
    fqdn = await _capability(registry, scope)
    first, second = await Database.open(database_url), await Database.open(database_url)
    try:

        async def runs(db: Database, success: bool) -> None:
            async with UsageRecorder(db, delay_s=60) as recorder:
                for _ in range(20):
                    for _ in range(7):
                        recorder.count(fqdn, success=success, latency_ms=3)
                    await recorder.flush()

        async with anyio.create_task_group() as group:
            group.start_soon(runs, first, True)
            group.start_soon(runs, second, False)
        stored = await _columns(first, fqdn)
    finally:
        await first.close()
        await second.close()
    assert (stored["usage_count"], stored["success_count"]) == (281, 141)
    assert stored["recent_runs"] == WINDOW
    # the window is the last ten runs written: two batches of seven at most, in some order
    newest = [bool(stored["recent_outcomes"] >> bit & 1) for bit in range(WINDOW)]
    assert newest[:7] in ([True] * 7, [False] * 7)
    assert len(set(newest[7:])) == 1
    assert stored["recent_latency_ms"] == pytest.approx(3.0)


async def test_hostile_values_never_reach_the_database_as_garbage(
    db: Database, registry: CapabilityRegistry, scope: Scope
) -> None:
    fqdn = await _capability(registry, scope)
    async with db.transaction() as conn:
        for runs, successes, latency in (
            (-5, -3, float("nan")),
            (3, 10, float("inf")),
            (10**30, 10**30, -1.0),
            (2, 1, float("-inf")),
        ):
            counts = RunCounts(runs=runs, successes=successes, latency_ms=latency, at=utc_now())
            await add_usage(conn, fqdn, counts)
    async with UsageRecorder(db, delay_s=60) as recorder:
        recorder.count(fqdn, success=False, latency_ms=float("nan"))
        recorder.count(fqdn, success=True, latency_ms=float("inf"))
    stored = await _columns(db, fqdn)
    for column in ("total_latency_ms", "recent_latency_ms"):
        assert math.isfinite(stored[column]), column
        assert stored[column] >= 0, column
    assert 0 <= stored["success_count"] <= stored["usage_count"] < 2**62
    assert 0 <= stored["recent_outcomes"] < 2**WINDOW
    assert stored["recent_runs"] == WINDOW


async def test_status_names_only_the_projects_own_failing_capabilities(
    db: Database, registry: CapabilityRegistry, scope: Scope
) -> None:
    mine = await _capability(registry, scope, "return 'mine'")
    await registry.rename(scope, mine, RenameChanges(new_name="mine_broken"))
    other_org = Scope("globex", "webapp", "mallory")
    theirs = await _capability(registry, other_org, "return 'theirs'")
    await registry.rename(other_org, theirs, RenameChanges(new_name="their_broken",
                                                           visibility="public"))  # fmt: skip
    neighbour = Scope("acme", "webapp", "zoe")
    private = await _capability(registry, neighbour, "return 'private'")
    await registry.rename(neighbour, private, RenameChanges(new_name="zoe_private",
                                                            visibility="private"))  # fmt: skip
    healthy = await _capability(registry, scope, "return 'healthy'")
    async with UsageRecorder(db, delay_s=60) as recorder:
        for fqdn in (mine, theirs, private):
            for _ in range(6):
                recorder.count(fqdn, success=False, latency_ms=1)
        for _ in range(6):
            recorder.count(healthy, success=True, latency_ms=1)
    async with db.read() as conn:
        assert await failing_in_project(conn, scope) == (1, ["mine_broken"])
        assert await failing_in_project(conn, neighbour) == (
            2,
            ["mine_broken", "zoe_private"],
        ) or await failing_in_project(conn, neighbour) == (2, ["zoe_private", "mine_broken"])
        assert await failing_in_project(conn, Scope("initech", "x", "y")) == (0, [])
    # the public one of another org is visible to cap_list, marked, but never in our status
    listed = await CapTools(registry).call("cap_list", scope, {"pattern": "their_*"})
    assert [item.get("failing") for item in listed["items"]] == [True]
