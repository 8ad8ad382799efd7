"""``FairEngine``'s wait for a worker: reported, taken off the run's time limit, a whole
limit spent waiting is ``TIMEOUT`` saying so, and the ``sandbox_wait`` step and metrics."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from pml.errors import Busy, ExecutionTimeout
from pml.sandbox.base import RunOutcome
from pml.sandbox.fair import FairEngine
from pml.sections_limits import LimitsSettings
from pml.telemetry import observe
from pml.telemetry.metrics import StepMetrics
from sandbox.fair_kit import A, HeldEngine, NoCalls, Runs, wall

pytestmark = pytest.mark.anyio


def fair(inner: HeldEngine, *, queue_per_tenant: int = 32) -> FairEngine:
    """A pool of 2 where a tenant holds 1."""
    limits = LimitsSettings(tenant_workers=1, queue_per_tenant=queue_per_tenant)
    return FairEngine(inner, pool_size=2, limits=limits)


def metric(metrics: StepMetrics, name: str) -> float:
    value = metrics.registry.get_sample_value(name)
    return 0.0 if value is None else value


async def test_the_wait_is_reported_and_taken_off_the_time_limit() -> None:
    inner = HeldEngine()
    engine = fair(inner)
    async with Runs.open(engine, inner) as runs:
        runs.submit("a1", A, wall_s=5.0)
        runs.submit("a2", A, wall_s=5.0)
        await runs.settle()
        await runs.finish("a1", "a2")
    first, second = runs.outcomes["a1"], runs.outcomes["a2"]
    assert isinstance(first, RunOutcome)
    assert isinstance(second, RunOutcome)
    assert 0 <= first.wait_ms < second.wait_ms
    assert inner.walls["a2"] + second.wait_ms / 1000 == pytest.approx(5.0, abs=1e-9)
    assert inner.walls["a2"] < inner.walls["a1"] <= 5.0


async def test_a_run_that_waits_its_whole_limit_times_out_saying_it_waited() -> None:
    inner = HeldEngine()
    engine = fair(inner)
    async with Runs.open(engine, inner) as runs:
        runs.submit("a1", A)
        runs.submit("a2", A, wall_s=0.2)
        await runs.settle()
        error = await runs.ended_of("a2")
        assert isinstance(error, ExecutionTimeout)
        assert error.code == "TIMEOUT"
        assert error.message.startswith("Execution exceeded the time limit of 0.2 s waiting ")
        assert "waiting for a sandbox worker" in error.message
        assert error.data["limit"] == "wall_time_s"
        assert error.data["waitMs"] >= 200
        assert engine.shares.queued_for(A) == 0
        await runs.finish("a1")
    assert "a2" not in inner.started
    assert engine.shares.tracked == 0


async def test_a_run_timing_out_after_a_wait_names_the_whole_limit_and_the_wait() -> None:
    inner = HeldEngine()
    engine = fair(inner)
    async with Runs.open(engine, inner) as runs:
        runs.submit("a1", A)
        runs.submit("slow", A, wall_s=0.5)
        await runs.settle()
        await runs.finish("a1")
        error = await runs.ended_of("slow")
    assert isinstance(error, ExecutionTimeout)
    assert error.message.startswith("Execution exceeded the time limit of 0.5 s, ")
    assert error.message.endswith("s of it waiting for a sandbox worker")
    assert error.data["waitMs"] > 0
    assert error.data["limit"] == "wall_time_s"


async def test_a_run_that_never_waited_keeps_the_engines_timeout_message() -> None:
    inner = HeldEngine()
    engine = fair(inner)
    with pytest.raises(ExecutionTimeout) as raised:
        await engine.run("slow", args={}, caller=NoCalls(), limits=wall(0.05), tenant=A)
    assert "waiting" not in raised.value.message
    assert "waitMs" not in raised.value.data


async def test_the_wait_is_the_sandbox_wait_step_and_busy_refusals_are_counted() -> None:
    metrics = StepMetrics(CollectorRegistry())
    observe.add_observer(metrics)
    try:
        inner = HeldEngine()
        engine = fair(inner, queue_per_tenant=1)
        async with Runs.open(engine, inner) as runs:
            for code in ("a1", "a2", "a3"):
                runs.submit(code, A)
                await runs.settle()
            assert metric(metrics, "pml_sandbox_queue_length") == 1  # a2 waits
            await runs.finish("a1", "a2")
    finally:
        observe.remove_observer(metrics)
    assert isinstance(runs.outcomes["a3"], Busy)
    assert metric(metrics, "pml_sandbox_busy_total") == 1
    assert metric(metrics, "pml_sandbox_wait_seconds_count") == 2
    assert metric(metrics, "pml_sandbox_queue_length") == 0
