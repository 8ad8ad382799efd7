"""``FairEngine``: the sandbox's workers shared fairly between tenants (SPEC §4).

A shared gateway runs everyone's snippets on one pool of ``pool_size`` worker processes
(``[sandbox] workers``). ``FairEngine`` stands in front of the engine that owns the pool and
decides who runs when:

- at most ``pool_size`` runs at once, and at most ``share`` of them for one tenant — the
  (org, project, user) a run is for — (``[limits] tenant_workers``; by default half the
  pool), so one tenant never holds every worker;
- while several orgs are active (running, waiting, or either in the last
  ``ACTIVE_WINDOW_S``), each holds at most its part of the pool, and likewise each project
  of an org and each user of a project (``pml.sandbox.shares``): one org's many users
  never take every worker from another org;
- a run that cannot start waits in its tenant's queue, oldest first, up to
  ``[limits] queue_per_tenant`` runs (0: none wait); one more is refused at once with
  ``BUSY`` and a ``retryAfterS`` estimated from the queue and recent run times;
- a freed worker goes to the waiting tenant chosen level by level: the org with the fewest
  runs, then its project with the fewest, then its user with the fewest (ties: the one
  served least recently, i.e. round robin), then that user's oldest run;
- the wait counts against the run's time limit: the run gets what is left of its
  ``wall_time_s``, and one that waited all of it ends ``TIMEOUT`` saying it waited for a
  worker. The wait is the ``sandbox_wait`` step and ``RunOutcome.wait_ms``.

Capability runs started from inside a run (``mcp.<namespace>.<action>()``) belong to it and
take no slot (waiting for a slot their own parent holds could deadlock); a run has at most
one of them going at a time (``asyncio.gather`` of capabilities runs them one by one), so a
run and its nested chain use one worker per level, however wide the snippet fans out.

The bookkeeping (:class:`FairShares`) is plain synchronous code on one event loop: no lock,
no await while counting. A waiter that is cancelled or runs out of time leaves its queue
in the same step, a run gives its slot back in a ``finally`` whatever it raised, and a
tenant with nothing running or waiting is forgotten.

Example::

    engine = fair_engine(settings.sandbox, settings.limits)   # over a MontyEngine pool
    outcome = await engine.run(code, args={}, caller=caller, limits=settings.sandbox,
                               tenant=("acme", "webapp", "erwan"))
    outcome.wait_ms    # how long it waited for a worker
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Final

import anyio

from pml.config import SandboxSettings
from pml.errors import ExecutionTimeout, InvalidInput
from pml.sandbox.activity import ACTIVE_WINDOW_S
from pml.sandbox.base import RunOutcome, SandboxEngine, TenantKey, ToolCaller
from pml.sandbox.priority import WorkerPriority
from pml.sandbox.shares import FairShares, Wait
from pml.sections_limits import LimitsSettings
from pml.telemetry import observe

__all__ = ["FairEngine", "FairShares", "fair_engine", "tenant_path"]

TENANT_DEPTH: Final = 3  # org, project, user
WARM_WORKERS: Final = 1  # started with the pool and kept, so that a first run pays no start
NESTED_ROOM: Final = 2  # worker processes per slot: one for the run, room for nested runs


class _Running:
    """A run in progress; its nested capability runs take ``children`` one at a time."""

    __slots__ = ("children",)

    def __init__(self) -> None:
        self.children = anyio.Lock()


# The run in progress in this context: runs started from inside it (nested capabilities).
_CURRENT_RUN: ContextVar[_Running | None] = ContextVar("pml_sandbox_run", default=None)


def tenant_path(tenant: TenantKey) -> TenantKey:
    """``tenant`` as exactly (org, project, user): missing parts are ``""``, further ones
    are dropped (``INVALID_INPUT`` for anything but a tuple of strings)."""
    if not isinstance(tenant, tuple) or not all(isinstance(part, str) for part in tenant):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise InvalidInput("A run's tenant is a tuple of (org, project, user)", field="tenant")
    return (*tenant[:TENANT_DEPTH], *("",) * (TENANT_DEPTH - len(tenant)))


class FairEngine:
    """A ``SandboxEngine`` that shares ``inner``'s workers between tenants (see the module).

    ``inner`` must run ``pool_size`` runs at once without queueing (a ``MontyEngine`` with
    ``max_workers`` of at least ``pool_size``, and room for nested capability runs);
    ``default_tenant`` is whom a run without a tenant is for; ``before_run`` is called as
    each run gets its worker (``fair_engine``: lowering new workers' CPU priority);
    ``active_window_s``: how long a tenant counts as active after its last run.
    """

    def __init__(
        self,
        inner: SandboxEngine,
        *,
        pool_size: int,
        limits: LimitsSettings,
        default_tenant: TenantKey = (),
        before_run: Callable[[], None] | None = None,
        active_window_s: float = ACTIVE_WINDOW_S,
    ) -> None:
        self._inner = inner
        self._before_run = before_run
        self.shares = FairShares(
            pool_size=pool_size,
            share=limits.workers_per_tenant(pool_size),
            queue_limit=limits.queue_per_tenant,
            active_window_s=active_window_s,
        )
        self._default_tenant = tenant_path(default_tenant)

    async def run(
        self,
        code: str,
        *,
        args: dict[str, Any],
        caller: ToolCaller,
        limits: SandboxSettings,
        tenant: TenantKey | None = None,
    ) -> RunOutcome:
        """Run ``code`` for ``tenant`` once it has a worker (see ``SandboxEngine.run``);
        ``BUSY`` when its queue is full, ``TIMEOUT`` when the wait took the whole limit."""
        parent = _CURRENT_RUN.get()
        if parent is not None:  # a nested capability: its parent's slot runs it
            return await self._nested(parent, code, args=args, caller=caller, limits=limits)
        path = self._default_tenant if tenant is None else tenant_path(tenant)
        started = time.perf_counter()
        with observe.step("sandbox_wait"):
            wait = await self.shares.acquire(path, limits.wall_time_s)
        waited_s = time.perf_counter() - started
        if wait is Wait.TIMED_OUT:
            raise _waited_out(limits, waited_s)
        inside = _CURRENT_RUN.set(_Running())
        running = time.perf_counter()
        try:
            if self._before_run is not None:
                self._before_run()
            left_s = limits.wall_time_s - waited_s
            if left_s <= 0:
                raise _waited_out(limits, waited_s)
            ran = limits.model_copy(update={"wall_time_s": left_s})
            try:
                outcome = await self._inner.run(
                    code, args=args, caller=caller, limits=ran, tenant=path
                )
            except ExecutionTimeout as error:
                if wait is Wait.QUEUED and error.data.get("limit") == "wall_time_s":
                    raise _timed_out_after_wait(limits, waited_s, error) from None
                raise
        finally:
            _CURRENT_RUN.reset(inside)
            self.shares.release(path, ran_s=time.perf_counter() - running)
        return dataclasses.replace(outcome, wait_ms=waited_s * 1000)

    async def _nested(
        self,
        parent: _Running,
        code: str,
        *,
        args: dict[str, Any],
        caller: ToolCaller,
        limits: SandboxSettings,
    ) -> RunOutcome:
        """A nested capability run, once its siblings before it have ended."""
        started = time.perf_counter()
        with anyio.move_on_after(max(limits.wall_time_s, 0.0)) as waiting:
            await parent.children.acquire()
        waited_s = time.perf_counter() - started
        if waiting.cancelled_caught:
            raise _waited_out(limits, waited_s, "its caller's other capability runs")
        try:
            inside = _CURRENT_RUN.set(_Running())
            try:
                left = limits.model_copy(update={"wall_time_s": limits.wall_time_s - waited_s})
                return await self._inner.run(code, args=args, caller=caller, limits=left)
            finally:
                _CURRENT_RUN.reset(inside)
        finally:
            parent.children.release()

    async def aclose(self) -> None:
        """Refuse queued and new runs, then stop the inner engine (idempotent)."""
        self.shares.close()
        await self._inner.aclose()


def fair_engine(
    sandbox: SandboxSettings, limits: LimitsSettings, *, only_tenant: TenantKey | None = None
) -> FairEngine:
    """A ``FairEngine`` over a pool of ``sandbox.pool_size()`` Monty workers (one kept warm).

    The pool may grow to twice that for capability runs nested in running ones, which
    take no slot of their own; its workers run at a lower CPU priority than the gateway
    (``pml.sandbox.priority``). ``only_tenant``: everything runs for this one tenant (``pml
    connect``), whose share is then the whole pool unless ``tenant_workers`` says less."""
    from pml.sandbox.monty import MontyEngine  # pydantic-monty: loaded when a gateway starts

    pool_size = sandbox.pool_size()
    if only_tenant is not None and limits.tenant_workers == 0:
        limits = limits.model_copy(update={"tenant_workers": pool_size})
    inner = MontyEngine(
        min_workers=WARM_WORKERS, max_workers=NESTED_ROOM * pool_size, observe_wait=False
    )
    return FairEngine(
        inner,
        pool_size=pool_size,
        limits=limits,
        default_tenant=only_tenant or (),
        before_run=WorkerPriority().lower_new_workers,
    )


def _waited_out(
    limits: SandboxSettings, waited_s: float, held_by: str = "other runs"
) -> ExecutionTimeout:
    return ExecutionTimeout(
        f"Execution exceeded the time limit of {limits.wall_time_s:g} s waiting for a "
        f"sandbox worker: the run never started ({held_by} held every worker it may use)",
        limit="wall_time_s",
        waitMs=round(waited_s * 1000, 3),
    )


def _timed_out_after_wait(
    limits: SandboxSettings, waited_s: float, error: ExecutionTimeout
) -> ExecutionTimeout:
    return ExecutionTimeout(
        f"Execution exceeded the time limit of {limits.wall_time_s:g} s, "
        f"{waited_s:.3g} s of it waiting for a sandbox worker",
        **{**error.data, "waitMs": round(waited_s * 1000, 3)},
    )
