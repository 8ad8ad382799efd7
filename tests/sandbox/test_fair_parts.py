"""The pool split between the orgs, projects and users active now (``FairShares.parts``):
one org's many users never take every worker from another org; alone, an org uses the
whole pool; a part returns once its owner has been quiet for the window."""

from __future__ import annotations

from typing import cast

import anyio
import pytest

from pml.errors import Busy
from pml.sandbox.activity import RecentTenants
from pml.sandbox.fair import FairEngine
from pml.sandbox.shares import Parts
from pml.sections_limits import LimitsSettings
from sandbox.fair_kit import HeldEngine, Runs

pytestmark = pytest.mark.anyio

X1, X2, X3 = ("org-x", "p", "u1"), ("org-x", "p", "u2"), ("org-x", "p", "u3")
Y = ("org-y", "p", "u1")


def fair(
    inner: HeldEngine, pool_size: int = 4, *, window_s: float = 30.0, queue: int = 32
) -> FairEngine:
    limits = LimitsSettings(queue_per_tenant=queue)  # tenant_workers 0: half the pool
    engine = FairEngine(inner, pool_size=pool_size, limits=limits, active_window_s=window_s)
    inner.outer = engine
    return engine


async def test_one_org_with_many_users_leaves_another_org_its_part_of_the_pool() -> None:
    inner = HeldEngine()
    engine = fair(inner)  # pool 4, a user holds at most 2
    async with Runs.open(engine, inner) as runs:
        for tenant in (X1, X2):
            for index in range(3):
                runs.submit(f"{tenant[2]}-{index}", tenant)
        await runs.settle()
        assert inner.started == ["u1-0", "u1-1", "u2-0", "u2-1"]  # alone: the whole pool
        runs.submit("y-0", Y)
        await runs.settle()
        assert inner.started[4:] == []  # the pool is full
        await runs.finish("u1-0")  # org-y holds none: its run first
        assert inner.started[4:] == ["y-0"]
        assert engine.shares.parts(Y) == Parts(org=2, project=2, user=2)
        await runs.finish("y-0")
        assert inner.started[5:] == []  # org-x holds 3, over its part while org-y is active
        runs.submit("y-1", Y)  # org-y's next call finds its part free at once
        await runs.settle()
        assert inner.started[5:] == ["y-1"]
        await runs.finish("u1-1", "u2-0")  # org-x back under its part: its waiters
        assert inner.started[6:] == ["u1-2"]
        await runs.finish("y-1", "u2-1", "u1-2")
        assert inner.started[7:] == ["u2-2"]
        await runs.finish("u2-2")
    assert (engine.shares.running, engine.shares.tracked) == (0, 0)


async def test_alone_an_org_uses_the_whole_pool_whatever_its_users() -> None:
    inner = HeldEngine()
    engine = fair(inner, pool_size=6)  # a user holds at most 3
    async with Runs.open(engine, inner) as runs:
        for tenant in (X1, X2, X3):
            for index in range(2):
                runs.submit(f"{tenant[2]}-{index}", tenant)
        await runs.settle()
        assert len(inner.started) == 6
        assert engine.shares.parts(X1) == Parts(org=6, project=6, user=2)
        await runs.finish(*inner.started)


async def test_within_an_org_one_project_leaves_another_project_its_part() -> None:
    inner = HeldEngine()
    engine = fair(inner)
    busy = [("org-x", "busy", f"u{index}") for index in range(4)]
    quiet = ("org-x", "quiet", "u1")
    async with Runs.open(engine, inner) as runs:
        runs.submit("q-0", quiet)
        await runs.finish("q-0")  # the quiet project ran a moment ago
        for index, tenant in enumerate(busy):
            runs.submit(f"b-{index}", tenant)
        await runs.settle()
        assert inner.started[1:] == ["b-0", "b-1"]  # its half of org-x's pool
        runs.submit("q-1", quiet)
        await runs.settle()
        assert inner.started[3:] == ["q-1"]
        await runs.finish("b-0", "b-1", "q-1", "b-2", "b-3")
    assert engine.shares.tracked == 0


async def test_a_part_returns_when_its_org_has_been_quiet_for_the_window() -> None:
    inner = HeldEngine()
    engine = fair(inner, window_s=0.3)
    async with Runs.open(engine, inner) as runs:
        runs.submit("y-0", Y)
        await runs.finish("y-0")
        for index in range(4):
            runs.submit(f"x-{index}", (X1, X2)[index % 2])
        await runs.settle()
        assert inner.started[1:] == ["x-0", "x-1"]  # org-y is still active
        await anyio.sleep(0.3)  # no run ends: the pool's own timer lets the rest start
        for _ in range(100):  # within 5 s
            if len(inner.started) == 5:
                break
            await anyio.sleep(0.05)
        assert sorted(inner.started[3:]) == ["x-2", "x-3"]
        assert engine.shares.parts(X1) == Parts(org=4, project=4, user=2)
        await runs.finish("x-0", "x-1", "x-2", "x-3")


async def test_busy_names_the_org_part_that_holds_the_run_back() -> None:
    inner = HeldEngine()
    engine = fair(inner, pool_size=2, queue=0)
    async with Runs.open(engine, inner) as runs:
        runs.submit("y-0", Y)
        await runs.finish("y-0")
        runs.submit("x1-0", X1)
        runs.submit("x2-0", X2)
        await runs.settle()
        error = cast(Busy, runs.error("x2-0"))
        await runs.finish("x1-0")
    assert error.code == "BUSY"
    assert "its org holds 1 of the 1 sandbox workers it may use while 2 orgs" in error.message
    assert error.retry_after_s > 0


def test_recent_tenants_forget_the_idle_after_the_window_and_keep_the_busy() -> None:
    now = [0.0]
    busy: set[tuple[str, ...]] = set()
    recent = RecentTenants(window_s=10.0, in_use=busy.__contains__, clock=lambda: now[0])
    for index in range(3000):
        recent.touch((f"org-{index % 300}", f"p-{index % 7}", f"u-{index}"))
    recent.touch(("held", "p", "u"))
    busy.update({("held",), ("held", "p"), ("held", "p", "u")})
    assert recent.active_under(()) == 301
    now[0] = 10.5
    assert recent.active_under(()) == 1  # only the org still running something
    assert recent.active_under(("held",)) == 1
    assert recent.remembered == 3
    busy.clear()
    now[0] = 21.0
    assert recent.active_under(()) == 0
    assert recent.remembered == 0
    assert recent.next_change_in_s() is None


def test_recent_tenants_are_bounded_whatever_the_crowd() -> None:
    recent = RecentTenants(window_s=60.0, max_remembered=1000)
    for index in range(20_000):
        recent.touch((f"org-{index}", "p", "u"))
    assert recent.remembered <= 1000
    assert recent.active_under(()) <= 1000
    assert recent.active_under(("org-19999",)) == 1  # the newest are kept
    assert recent.active_under(("org-0",)) == 0
