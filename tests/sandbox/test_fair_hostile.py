"""``FairEngine`` against hostile tenants: odd and huge tenant keys, keys of the wrong type,
thousands of tenants queueing at once (memory follows what runs and waits, not who ever
ran), and ``queue_per_tenant = 0`` under a crowd."""

from __future__ import annotations

from typing import Any, cast

import pytest

from pml.errors import Busy, InvalidInput
from pml.sandbox.base import RunOutcome, TenantKey
from pml.sandbox.fair import FairEngine, tenant_path
from pml.sections_limits import LimitsSettings
from sandbox.fair_kit import HeldEngine, Runs, run_one

pytestmark = pytest.mark.anyio

HUGE = "x" * 1_000_000


def fair(inner: HeldEngine, pool_size: int = 2, *, queue_per_tenant: int = 32) -> FairEngine:
    """A tenant holds 1 worker."""
    limits = LimitsSettings(tenant_workers=1, queue_per_tenant=queue_per_tenant)
    return FairEngine(inner, pool_size=pool_size, limits=limits)


async def test_unicode_control_and_huge_keys_are_tenants_like_any_other() -> None:
    inner = HeldEngine()
    engine = fair(inner, pool_size=3)
    odd: TenantKey = ("ørg-🙂" * 1000, "\u202e\x00\n'; DROP TABLE runs; --", HUGE)
    near: TenantKey = (odd[0], odd[1], HUGE[:-1] + "y")  # differs in its last character
    async with Runs.open(engine, inner) as runs:
        runs.submit("odd1", odd)
        runs.submit("odd2", odd)
        runs.submit("near1", near)
        await runs.settle()
        assert inner.started == ["odd1", "near1"]  # one each: two tenants, not one
        assert engine.shares.queued_for(odd) == 1
        await runs.finish("odd1", "odd2", "near1")
    assert all(isinstance(outcome, RunOutcome) for outcome in runs.outcomes.values())
    assert engine.shares.tracked == 0


@pytest.mark.parametrize(
    "tenant",
    [["org", "project", "user"], "org.project.user", ("org", 1, "user"), ("org", None), (b"o",), 7],
)
async def test_a_tenant_that_is_not_a_tuple_of_strings_is_invalid_input(tenant: Any) -> None:
    inner = HeldEngine()
    engine = fair(inner)
    with pytest.raises(InvalidInput) as raised:
        await run_one(engine, "done", cast("TenantKey", tenant))
    assert raised.value.data["field"] == "tenant"
    assert inner.started == []
    assert (engine.shares.running, engine.shares.tracked) == (0, 0)


@pytest.mark.parametrize(
    ("given", "path"),
    [
        ((), ("", "", "")),
        (("org",), ("org", "", "")),
        (("org", "project"), ("org", "project", "")),
        (("org", "project", "user", "extra", "more"), ("org", "project", "user")),
    ],
)
def test_a_tenant_is_always_an_org_project_user_path(given: TenantKey, path: TenantKey) -> None:
    assert tenant_path(given) == path


async def test_thousands_of_tenants_queueing_are_served_org_by_org_and_then_forgotten() -> None:
    inner = HeldEngine()
    engine = fair(inner)
    orgs, users = 40, 50
    tenants = [(f"org-{o}", "p", f"user-{u}") for u in range(users) for o in range(orgs)]
    async with Runs.open(engine, inner) as runs:
        runs.submit("hold-1", ("holder", "p", "one"))
        runs.submit("hold-2", ("holder", "p", "two"))
        await runs.settle()
        for index, tenant in enumerate(tenants):
            runs.submit(f"done-{index}", tenant)
        await runs.settle()
        assert engine.shares.waiting == orgs * users
        # org, project and user prefixes of each waiter, and of the two holders
        assert engine.shares.tracked == orgs + orgs + orgs * users + 1 + 1 + 2
        await runs.finish("hold-1", "hold-2")
    assert len(runs.ended) == orgs * users + 2
    assert all(isinstance(outcome, RunOutcome) for outcome in runs.outcomes.values())
    started = [code for code in inner.started if code.startswith("done-")]
    first_round = {tenants[int(code.removeprefix("done-"))][0] for code in started[:orgs]}
    assert len(first_round) == orgs  # every org ran once before any ran twice
    assert (engine.shares.running, engine.shares.waiting, engine.shares.tracked) == (0, 0, 0)


async def test_thousands_of_waiters_giving_up_leave_nothing_behind() -> None:
    inner = HeldEngine()
    engine = fair(inner, queue_per_tenant=5)
    async with Runs.open(engine, inner) as runs:
        runs.submit("hold-1", ("holder", "p", "one"))
        runs.submit("hold-2", ("holder", "p", "two"))
        await runs.settle()
        for index in range(3000):
            runs.submit(f"gone-{index}", (f"org-{index % 300}", f"p-{index % 7}", f"u-{index}"))
        await runs.settle()
        assert engine.shares.waiting == 3000
        runs.group.cancel_scope.cancel()
    assert (engine.shares.running, engine.shares.waiting, engine.shares.tracked) == (0, 0, 0)
    assert inner.started == ["hold-1", "hold-2"]


async def test_with_no_queue_a_crowd_gets_busy_and_nothing_is_kept_for_it() -> None:
    inner = HeldEngine()
    engine = fair(inner, queue_per_tenant=0)
    async with Runs.open(engine, inner) as runs:
        runs.submit("hold-1", ("holder", "p", "one"))
        runs.submit("hold-2", ("holder", "p", "two"))
        await runs.settle()
        for index in range(1000):
            runs.submit(f"crowd-{index}", (f"org-{index}", "p", "u"))
        await runs.settle()
        assert engine.shares.waiting == 0
        assert engine.shares.tracked == 3 + 1  # the holders' org, project and two users
        await runs.finish("hold-1", "hold-2")
    refused = [runs.outcomes[f"crowd-{index}"] for index in range(1000)]
    assert all(isinstance(error, Busy) for error in refused)
    assert all(0.1 <= cast("Busy", error).retry_after_s <= 60 for error in refused)
    assert engine.shares.tracked == 0


async def test_one_tenant_flooding_its_queue_is_refused_past_the_bound_and_others_run() -> None:
    inner = HeldEngine()
    engine = fair(inner, queue_per_tenant=10)
    flood: TenantKey = ("flood", "p", "u")
    async with Runs.open(engine, inner) as runs:
        for index in range(500):
            runs.submit(f"f{index}", flood)
        await runs.settle()
        runs.submit("quiet", ("quiet", "p", "u"))
        await runs.settle()
        assert inner.started == ["f0", "quiet"]
        assert engine.shares.queued_for(flood) == 10
        busy = [code for code, outcome in runs.outcomes.items() if isinstance(outcome, Busy)]
        assert len(busy) == 489
        runs.group.cancel_scope.cancel()
    assert engine.shares.tracked == 0
