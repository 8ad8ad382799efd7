"""Helpers for the fair-scheduling tests: an inner engine whose runs the test ends, and a
task group of runs whose outcomes are kept.

Example::

    inner = HeldEngine()
    engine = FairEngine(inner, pool_size=4, limits=LimitsSettings())
    async with Runs.open(engine, inner) as runs:
        runs.submit("a1", A)
        await runs.settle()          # every run has started or is waiting
        inner.started                # ["a1"]
        await runs.finish("a1")      # a1 returns; the next waiter starts
        runs.outcomes["a1"]          # its RunOutcome (or the error it raised)
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio import wait_all_tasks_blocked
from anyio.abc import TaskGroup

from pml.config import SandboxSettings
from pml.errors import ExecutionFailed, ExecutionTimeout
from pml.sandbox.base import RunOutcome, SandboxEngine, TenantKey, ToolCaller, ToolRef
from pml.sandbox.fair import FairEngine

A: TenantKey = ("org-a", "web", "ann")
B: TenantKey = ("org-b", "web", "bob")


class NoCalls:
    """A ``ToolCaller`` for snippets that call nothing."""

    async def call_tool(self, ref: ToolRef, arguments: dict[str, Any]) -> Any:
        raise AssertionError(f"unexpected tool call {ref}")


def wall(seconds: float) -> SandboxSettings:
    """Limits of ``seconds`` of wall time."""
    return SandboxSettings(wall_time_s=seconds)


async def run_one(engine: SandboxEngine, code: str, tenant: TenantKey | None) -> RunOutcome:
    """One run of ``code`` with no tool calls and 30 s."""
    return await engine.run(code, args={}, caller=NoCalls(), limits=wall(30), tenant=tenant)


class HeldEngine:
    """A fake inner engine: a run waits until the test finishes it (by its code), except

    ``done…`` (returns at once), ``fail…`` (raises ``ExecutionFailed``), ``crash…``
    (``RuntimeError``), ``slow…`` (runs its whole wall time then raises ``TIMEOUT``),
    ``nest<rest>`` (first runs ``<rest>``, or ``leaf``, through ``outer``, the engine in
    front, as a nested capability run does) and ``fan<n>`` (runs ``<n>`` nested
    ``child-<i>`` at once, as ``asyncio.gather`` of capabilities does)."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.walls: dict[str, float] = {}
        self.tenants: dict[str, TenantKey | None] = {}
        self.running = 0
        self.most_running = 0
        self.closed = False
        self.outer: SandboxEngine | None = None
        self._gates: dict[str, anyio.Event] = {}

    def finish(self, code: str) -> None:
        self._gates.setdefault(code, anyio.Event()).set()

    async def run(
        self,
        code: str,
        *,
        args: dict[str, Any],
        caller: ToolCaller,
        limits: SandboxSettings,
        tenant: TenantKey | None = None,
    ) -> RunOutcome:
        self.started.append(code)
        self.walls[code] = limits.wall_time_s
        self.tenants[code] = tenant
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            if code.startswith("done"):
                return RunOutcome(value=code)
            if code.startswith("fail"):
                raise ExecutionFailed("ValueError: no", exception_type="ValueError")
            if code.startswith("crash"):
                raise RuntimeError("a bug in the engine")
            if code.startswith("slow"):
                await anyio.sleep(limits.wall_time_s)
                raise ExecutionTimeout(
                    f"Execution exceeded the time limit of {limits.wall_time_s:g} s",
                    limit="wall_time_s",
                )
            if code.startswith("nest") and self.outer is not None:
                nested = code.removeprefix("nest") or "leaf"
                await self.outer.run(nested, args=args, caller=caller, limits=limits, tenant=tenant)
            if code.startswith("fan") and self.outer is not None:
                outer = self.outer

                async def child(name: str) -> None:
                    await outer.run(name, args=args, caller=caller, limits=limits, tenant=tenant)

                async with anyio.create_task_group() as children:
                    for index in range(int(code.removeprefix("fan"))):
                        children.start_soon(child, f"child-{index}")
            await self._gates.setdefault(code, anyio.Event()).wait()
            return RunOutcome(value=code, duration_ms=1.0)
        finally:
            self.running -= 1

    async def aclose(self) -> None:
        self.closed = True


@dataclass
class Runs:
    """Runs submitted to ``engine`` in a task group; ``outcomes`` by code once ended."""

    engine: FairEngine
    inner: HeldEngine | None
    group: TaskGroup
    outcomes: dict[str, RunOutcome | BaseException] = field(
        default_factory=dict[str, RunOutcome | BaseException]
    )
    ended: list[str] = field(default_factory=list[str])
    _endings: dict[str, anyio.Event] = field(default_factory=dict[str, anyio.Event])

    @classmethod
    @asynccontextmanager
    async def open(cls, engine: FairEngine, inner: HeldEngine | None) -> AsyncGenerator[Runs]:
        async with anyio.create_task_group() as group:
            runs = cls(engine, inner, group)
            yield runs
            group.cancel_scope.cancel()

    def submit(
        self, code: str, tenant: TenantKey | None, *, wall_s: float = 30.0, source: str = ""
    ) -> None:
        """Run ``source`` (default: ``code``), its outcome kept as ``code``'s."""
        self.group.start_soon(self._run, code, tenant, wall_s, source or code)

    async def _run(self, code: str, tenant: TenantKey | None, wall_s: float, source: str) -> None:
        try:
            self.outcomes[code] = await self.engine.run(
                source, args={}, caller=NoCalls(), limits=wall(wall_s), tenant=tenant
            )
        except Exception as error:  # noqa: BLE001 (kept for the test to look at)
            self.outcomes[code] = error
        finally:
            self.ended.append(code)
            self._endings.setdefault(code, anyio.Event()).set()

    async def ended_of(self, code: str) -> BaseException | RunOutcome:
        """Wait (at most 10 s) for ``code`` to end on its own; its outcome."""
        with anyio.fail_after(10):
            await self._endings.setdefault(code, anyio.Event()).wait()
        return self.outcomes[code]

    async def settle(self) -> None:
        """Until every run has started or waits for a worker."""
        await wait_all_tasks_blocked()

    async def finish(self, *codes: str) -> None:
        """End these runs (they return) and let the freed workers be handed on."""
        assert self.inner is not None
        for code in codes:
            self.inner.finish(code)
        await self.settle()

    def error(self, code: str) -> BaseException:
        outcome = self.outcomes[code]
        assert isinstance(outcome, BaseException), outcome
        return outcome
