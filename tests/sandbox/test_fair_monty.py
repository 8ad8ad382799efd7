"""``FairEngine`` over the real Monty worker pool: a noisy tenant's CPU-bound snippets do
not hold up another tenant's trivial one, and the pool is built from ``[sandbox] workers``."""

from __future__ import annotations

import pytest

from pml.config import SandboxSettings
from pml.errors import ExecutionTimeout
from pml.sandbox.base import RunOutcome
from pml.sandbox.fair import fair_engine
from pml.sections_limits import LimitsSettings
from sandbox.fair_kit import A, B, Runs, run_one

pytestmark = pytest.mark.anyio

SPIN = "while True:\n    pass"


async def test_another_tenants_trivial_run_ends_before_a_noisy_tenants_spinning_runs() -> None:
    engine = fair_engine(SandboxSettings(workers=4), LimitsSettings())  # A may hold 2 of 4
    try:
        async with Runs.open(engine, None) as runs:
            for index in range(4):
                runs.submit(f"a{index}", A, wall_s=3.0, source=SPIN)
            await runs.settle()
            assert engine.shares.held_by(A) == 2
            assert engine.shares.queued_for(A) == 2
            runs.submit("b", B, source="return 40 + 2")
            answer = await runs.ended_of("b")
            assert isinstance(answer, RunOutcome)
            assert answer.value == 42
            assert runs.ended == ["b"]  # while every run of A still spins or waits
            for index in range(4):
                await runs.ended_of(f"a{index}")
    finally:
        await engine.aclose()
    errors = [runs.error(f"a{index}") for index in range(4)]
    errors = [error for error in errors if isinstance(error, ExecutionTimeout)]
    assert len(errors) == 4
    waited = [error for error in errors if "waiting for a sandbox worker" in str(error)]
    assert len(waited) == 2  # the two that queued behind A's own share
    assert all(error.data["waitMs"] > 0 for error in waited)
    assert (engine.shares.running, engine.shares.tracked) == (0, 0)


async def test_a_snippet_run_for_a_unicode_tenant_reports_its_wait() -> None:
    engine = fair_engine(SandboxSettings(workers=1), LimitsSettings())
    try:
        outcome = await run_one(engine, "return 'ok'", ("ørg-🙂", "прое́кт", "用户" * 100))
    finally:
        await engine.aclose()
    assert outcome.value == "ok"
    assert outcome.wait_ms >= 0
    assert outcome.duration_ms > 0


def test_the_pool_is_sized_from_sandbox_workers_and_a_tenant_holds_half() -> None:
    engine = fair_engine(SandboxSettings(workers=6), LimitsSettings())
    assert (engine.shares.pool_size, engine.shares.share) == (6, 3)
    auto = fair_engine(SandboxSettings(), LimitsSettings(tenant_workers=1, queue_per_tenant=0))
    assert auto.shares.pool_size == SandboxSettings().pool_size() >= 4
    assert (auto.shares.share, auto.shares.queue_limit) == (1, 0)


def test_pml_connects_one_user_may_use_the_whole_pool_unless_told_otherwise() -> None:
    mine = fair_engine(SandboxSettings(workers=4), LimitsSettings(), only_tenant=A)
    assert mine.shares.share == 4
    told = fair_engine(SandboxSettings(workers=4), LimitsSettings(tenant_workers=1), only_tenant=A)
    assert told.shares.share == 1
