"""``FairEngine`` in front of a fake inner engine: shares, the order a freed worker is
handed on in, bounded queues and ``BUSY``, cancellation, failures, and the wait counted
against the time limit."""

from __future__ import annotations

import asyncio

import anyio
import pytest
from anyio import wait_all_tasks_blocked

from pml.errors import Busy, ExecutionFailed, ExecutionTimeout, InternalError
from pml.sandbox.base import RunOutcome
from pml.sandbox.fair import FairEngine
from pml.sandbox.shares import Wait
from pml.sections_limits import LimitsSettings
from pml.telemetry.metrics import StepMetrics
from sandbox.fair_kit import A, B, HeldEngine, Runs, run_one

pytestmark = pytest.mark.anyio


def fair(
    inner: HeldEngine, pool_size: int = 4, *, tenant_workers: int = 0, queue_per_tenant: int = 32
) -> FairEngine:
    limits = LimitsSettings(tenant_workers=tenant_workers, queue_per_tenant=queue_per_tenant)
    engine = FairEngine(inner, pool_size=pool_size, limits=limits)
    inner.outer = engine
    return engine


def metric(metrics: StepMetrics, name: str) -> float:
    value = metrics.registry.get_sample_value(name)
    return 0.0 if value is None else value


async def test_a_tenant_holds_at_most_its_share_and_another_tenant_finds_a_worker() -> None:
    inner = HeldEngine()
    engine = fair(inner)  # pool 4: one tenant holds 2
    async with Runs.open(engine, inner) as runs:
        for code in ("a1", "a2", "a3", "a4"):
            runs.submit(code, A)
        await runs.settle()
        assert inner.started == ["a1", "a2"]
        assert engine.shares.queued_for(A) == 2
        runs.submit("b1", B)
        await runs.settle()
        assert inner.started == ["a1", "a2", "b1"]
        await runs.finish("b1")
        assert runs.ended == ["b1"]
        assert isinstance(runs.outcomes["b1"], RunOutcome)
        await runs.finish("a1")  # a's freed worker goes to a's oldest waiter
        assert inner.started[3:] == ["a3"]
        await runs.finish("a2", "a3", "a4")
        assert runs.ended == ["b1", "a1", "a2", "a3", "a4"]
    assert inner.most_running == 3
    assert (engine.shares.running, engine.shares.tracked) == (0, 0)


async def test_a_freed_worker_goes_to_the_org_running_fewest_even_if_it_queued_later() -> None:
    inner = HeldEngine()
    engine = fair(inner, tenant_workers=2)
    x1, x2 = ("org-x", "p", "u1"), ("org-x", "p", "u2")
    y1 = ("org-y", "p", "u1")
    async with Runs.open(engine, inner) as runs:
        for code, tenant in (("x1a", x1), ("x1b", x1), ("x2a", x2), ("y1a", y1)):
            runs.submit(code, tenant)
        await runs.settle()  # the pool is full: org-x holds 3, org-y 1
        runs.submit("x2b", x2)
        await runs.settle()
        runs.submit("y1b", y1)
        await runs.settle()
        assert engine.shares.waiting == 2
        await runs.finish("x1a")  # org-x now holds 2, org-y 1: org-y's waiter goes first
        assert inner.started[4:] == ["y1b"]
        await runs.finish("y1a")  # org-y waits for nothing, but is active: org-x holds
        assert inner.started[5:] == []  # its half of the pool already, the rest is org-y's
        assert engine.shares.parts(x2).org == 2
        await runs.finish("x2a")  # org-x holds 1, u2 none: u2's waiter
        assert inner.started[5:] == ["x2b"]
        await runs.finish("x1b", "x2b", "y1b")
    assert engine.shares.tracked == 0


async def test_within_an_org_the_project_then_the_user_running_fewest_is_served() -> None:
    inner = HeldEngine()
    engine = fair(inner, pool_size=4, tenant_workers=4)
    busy_project = ("org", "busy", "u")
    busy_user, quiet_user = ("org", "quiet", "busy-user"), ("org", "quiet", "quiet-user")
    async with Runs.open(engine, inner) as runs:
        for code in ("bp1", "bp2", "bp3"):
            runs.submit(code, busy_project)
        runs.submit("bu1", busy_user)
        await runs.settle()  # full: project busy holds 3, quiet 1 (busy-user's)
        for code, tenant in (("bp4", busy_project), ("bu2", busy_user), ("qu1", quiet_user)):
            runs.submit(code, tenant)
            await runs.settle()
        await runs.finish("bp1")  # busy 2, quiet 1: quiet; in it quiet-user holds none
        assert inner.started[4:] == ["qu1"]
        await runs.finish("bp2")  # busy 1, quiet 2: busy
        assert inner.started[5:] == ["bp4"]
        await runs.finish("bp3")  # busy 1, quiet 2 of its half: nobody may start
        assert inner.started[6:] == []
        await runs.finish("bu1")  # quiet 1: busy-user's waiter
        assert inner.started[6:] == ["bu2"]
        await runs.finish("bp4", "bu2", "qu1")
    assert engine.shares.tracked == 0


async def test_runs_of_one_user_start_in_the_order_they_came() -> None:
    inner = HeldEngine()
    engine = fair(inner, pool_size=2, tenant_workers=1)
    codes = [f"a{index}" for index in range(6)]
    async with Runs.open(engine, inner) as runs:
        for code in codes:
            runs.submit(code, A)
            await runs.settle()
        for code in codes:
            await runs.finish(code)
    assert inner.started == codes
    assert inner.most_running == 1


async def test_tenants_tied_on_running_runs_are_served_in_turn() -> None:
    inner = HeldEngine()
    engine = fair(inner, pool_size=1, tenant_workers=1)
    async with Runs.open(engine, inner) as runs:
        runs.submit("hold", ("org-c", "web", "cy"))
        await runs.settle()
        for index in range(3):
            runs.submit(f"a{index}", A)
            runs.submit(f"b{index}", B)
        await runs.settle()
        for code in ("hold", "a0", "b0", "a1", "b1", "a2", "b2"):
            await runs.finish(code)
    assert inner.started == ["hold", "a0", "b0", "a1", "b1", "a2", "b2"]


async def test_a_full_queue_answers_busy_with_a_retry_delay_and_others_still_run() -> None:
    inner = HeldEngine()
    engine = fair(inner, pool_size=2, tenant_workers=1, queue_per_tenant=2)
    async with Runs.open(engine, inner) as runs:
        for code in ("a1", "a2", "a3", "a4"):
            runs.submit(code, A)
            await runs.settle()
        error = runs.error("a4")
        assert isinstance(error, Busy)
        data = error.to_dict()
        assert data["code"] == "BUSY"
        assert 0.1 <= data["retryAfterS"] <= 60
        assert "2 of its runs already wait" in data["message"]
        assert (data["tenantWorkers"], data["queuePerTenant"]) == (1, 2)
        runs.submit("b1", B)
        await runs.settle()
        assert inner.started == ["a1", "b1"]
        await runs.finish("a1", "a2", "a3", "b1")
    assert "a4" not in inner.started
    assert engine.shares.tracked == 0


async def test_the_retry_delay_grows_with_the_queue_and_falls_with_short_runs() -> None:
    inner = HeldEngine()
    engine = fair(inner, pool_size=2, tenant_workers=1, queue_per_tenant=10)
    shares = engine.shares
    first = shares.retry_after_s(A)
    async with Runs.open(engine, inner) as runs:
        for code in ("a1", "a2", "a3", "a4"):
            runs.submit(code, A)
        await runs.settle()
        assert shares.retry_after_s(A) == pytest.approx(4 * first)  # three wait now
        await runs.finish("a1", "a2", "a3", "a4")  # runs of a few milliseconds
    assert shares.retry_after_s(A) < first
    assert shares.retry_after_s(A) >= 0.1


async def test_with_queue_per_tenant_0_a_run_beyond_the_share_is_busy_at_once() -> None:
    inner = HeldEngine()
    engine = fair(inner, queue_per_tenant=0)  # pool 4, share 2
    async with Runs.open(engine, inner) as runs:
        for code in ("a1", "a2", "a3"):
            runs.submit(code, A)
        await runs.settle()
        assert isinstance(runs.error("a3"), Busy)
        assert "may not wait" in str(runs.error("a3"))
        runs.submit("b1", B)
        runs.submit("b2", B)
        await runs.settle()
        assert inner.started == ["a1", "a2", "b1", "b2"]
        runs.submit("c1", ("org-c", "p", "u"))  # under its share, but the pool is full
        await runs.settle()
        assert isinstance(runs.error("c1"), Busy)
        assert "all 4 sandbox workers are busy" in str(runs.error("c1"))
        await runs.finish("a1", "a2", "b1", "b2")
    assert (engine.shares.waiting, engine.shares.tracked) == (0, 0)


async def test_a_run_cancelled_while_queued_leaves_no_trace_and_never_starts() -> None:
    inner = HeldEngine()
    engine = fair(inner, pool_size=2, tenant_workers=1)
    async with Runs.open(engine, inner) as runs:
        runs.submit("a1", A)
        await runs.settle()
        async with anyio.create_task_group() as doomed:
            doomed.start_soon(run_one, engine, "a2", A)
            await runs.settle()
            assert engine.shares.queued_for(A) == 1
            doomed.cancel_scope.cancel()
        assert engine.shares.queued_for(A) == 0
        await runs.finish("a1")
        assert engine.shares.tracked == 0
        runs.submit("a3", A)  # the share is whole again
        await runs.settle()
        assert inner.started == ["a1", "a3"]
        await runs.finish("a3")
    assert "a2" not in inner.started


async def test_many_waiters_cancelled_at_once_free_everything() -> None:
    inner = HeldEngine()
    engine = fair(inner, pool_size=2, tenant_workers=1, queue_per_tenant=100)
    async with Runs.open(engine, inner) as runs:
        runs.submit("a0", A)
        await runs.settle()
        async with anyio.create_task_group() as waiters:
            for index in range(1, 51):
                waiters.start_soon(run_one, engine, f"a{index}", A)
            await runs.settle()
            assert engine.shares.queued_for(A) == 50
            waiters.cancel_scope.cancel()
        await runs.finish("a0")
    assert inner.started == ["a0"]
    assert (engine.shares.running, engine.shares.tracked) == (0, 0)


async def test_a_waiter_cancelled_just_after_it_was_granted_gives_the_slot_back() -> None:
    inner = HeldEngine()
    engine = fair(inner, pool_size=1, tenant_workers=1)
    shares = engine.shares
    assert await shares.acquire(A, 30.0) is Wait.AT_ONCE  # A holds the only slot
    async with anyio.create_task_group() as doomed:
        doomed.start_soon(run_one, engine, "b1", B)
        await wait_all_tasks_blocked()
        shares.release(A, ran_s=0.1)  # b1's waiter is granted the slot...
        assert shares.held_by(B) == 1
        doomed.cancel_scope.cancel()  # ...and cancelled before it could use it
    assert (shares.running, shares.tracked, inner.running) == (0, 0, 0)


async def test_a_task_cancelled_after_its_grant_landed_gives_the_slot_back_itself() -> None:
    shares = fair(HeldEngine(), pool_size=1, tenant_workers=1).shares
    assert await shares.acquire(A, 30.0) is Wait.AT_ONCE
    waiting = asyncio.create_task(shares.acquire(B, 30.0))
    await wait_all_tasks_blocked()
    shares.release(A, ran_s=0.1)  # the grant lands (the future is resolved)...
    waiting.cancel()  # ...and the cancellation is thrown in before the task resumes
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert (shares.running, shares.tracked) == (0, 0)


@pytest.mark.parametrize(("code", "raised"), [("fail", ExecutionFailed), ("crash", RuntimeError)])
async def test_a_run_that_fails_gives_its_worker_to_the_next(
    code: str, raised: type[Exception]
) -> None:
    inner = HeldEngine()
    engine = fair(inner, pool_size=2, tenant_workers=1)
    async with Runs.open(engine, inner) as runs:
        runs.submit(code, A)
        runs.submit("a2", A)
        await runs.settle()
        assert inner.started == [code, "a2"]
        await runs.finish("a2")
    assert isinstance(runs.outcomes[code], raised)
    assert (engine.shares.running, engine.shares.tracked, inner.running) == (0, 0, 0)


async def test_a_run_cancelled_while_running_gives_its_worker_to_the_next() -> None:
    inner = HeldEngine()
    engine = fair(inner, pool_size=2, tenant_workers=1)
    async with Runs.open(engine, inner) as runs:
        async with anyio.create_task_group() as doomed:
            doomed.start_soon(run_one, engine, "a1", A)
            await runs.settle()
            runs.submit("a2", A)
            await runs.settle()
            assert inner.started == ["a1"]
            doomed.cancel_scope.cancel()
        await runs.settle()
        assert inner.started == ["a1", "a2"]
        await runs.finish("a2")
    assert (engine.shares.running, engine.shares.tracked, inner.running) == (0, 0, 0)


async def test_failing_runs_never_leak_a_slot_over_many_rounds() -> None:
    inner = HeldEngine()
    engine = fair(inner, pool_size=2, tenant_workers=1, queue_per_tenant=0)
    for index in range(200):
        with pytest.raises((ExecutionFailed, RuntimeError)):
            await run_one(engine, "fail" if index % 2 else "crash", A)
    assert (engine.shares.running, engine.shares.tracked) == (0, 0)


async def test_a_capability_run_nested_in_a_run_takes_no_slot_of_its_own() -> None:
    inner = HeldEngine()
    engine = fair(inner, pool_size=2, tenant_workers=1, queue_per_tenant=0)
    async with Runs.open(engine, inner) as runs:
        runs.submit("nestnestnest", A)  # holds A's only slot; a chain three deep below it
        await runs.settle()
        assert inner.started == ["nestnestnest", "nestnest", "nest", "leaf"]
        assert engine.shares.held_by(A) == 1
        await runs.finish("leaf", "nest", "nestnest", "nestnestnest")
    assert isinstance(runs.outcomes["nestnestnest"], RunOutcome)
    assert engine.shares.tracked == 0


async def test_capabilities_a_run_starts_at_once_run_one_after_another() -> None:
    inner = HeldEngine()
    engine = fair(inner, pool_size=2, tenant_workers=1)
    async with Runs.open(engine, inner) as runs:
        runs.submit("fan50", A)
        await runs.settle()
        assert inner.started == ["fan50", "child-0"]
        for index in range(50):
            await runs.finish(f"child-{index}")
            assert inner.running <= 2  # the run and one of its capabilities
        await runs.finish("fan50")
    assert inner.most_running == 2
    assert inner.started[1:] == [f"child-{index}" for index in range(50)]
    assert isinstance(runs.outcomes["fan50"], RunOutcome)


async def test_a_capability_waiting_behind_its_siblings_times_out_within_the_limit() -> None:
    inner = HeldEngine()
    engine = fair(inner, pool_size=2, tenant_workers=1)
    async with Runs.open(engine, inner) as runs:
        runs.submit("fan2", A, wall_s=0.3)
        error = await runs.ended_of("fan2")
    assert isinstance(error, BaseExceptionGroup)  # the fake's task group: the child's error
    timeouts = [e for e in error.exceptions if isinstance(e, ExecutionTimeout)]  # pyright: ignore[reportUnknownVariableType, reportUnknownMemberType]
    assert len(timeouts) == 1
    assert "its caller's other capability runs" in str(timeouts[0])  # pyright: ignore[reportUnknownArgumentType]
    assert inner.started == ["fan2", "child-0"]
    assert engine.shares.tracked == 0


async def test_runs_without_a_tenant_share_the_default_tenant() -> None:
    inner = HeldEngine()
    limits = LimitsSettings(queue_per_tenant=0)
    engine = FairEngine(inner, pool_size=2, limits=limits, default_tenant=("me",))
    async with Runs.open(engine, inner) as runs:
        runs.submit("x1", None)
        runs.submit("x2", None)
        await runs.settle()
        assert isinstance(runs.error("x2"), Busy)
        assert engine.shares.held_by(("me", "", "")) == 1
        assert inner.tenants["x1"] == ("me", "", "")
        await runs.finish("x1")


async def test_closing_wakes_the_waiters_and_refuses_new_runs() -> None:
    inner = HeldEngine()
    engine = fair(inner, pool_size=2, tenant_workers=1)
    async with Runs.open(engine, inner) as runs:
        runs.submit("a1", A)
        runs.submit("a2", A)
        await runs.settle()
        await engine.aclose()
        await runs.settle()
        assert isinstance(runs.error("a2"), InternalError)
        with pytest.raises(InternalError):
            await run_one(engine, "b1", B)
        await runs.finish("a1")
    assert inner.closed
    assert engine.shares.tracked == 0
