"""The host side of a run's ``mcp`` bridge: the one ``ToolCaller`` every tool call passes.

    budget = Budget.start(limits)
    caller = RunCaller(plan, budget, pool=pool, nested=service.run_nested)
    outcome = await engine.run(code, args=args, caller=caller, limits=budget.limits())
    budget.tools_used, budget.trace

A call is allowed only to what the snippet names in its code (the ``Plan``): a call the
analysis did not see (``m = mcp; m.other.tool()``, ``getattr``) is refused. Every call
counts against one ``Budget`` shared by nested capability runs (tool calls and wall time),
and is traced (tool, digest of its arguments, duration, success) — never its values.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pml.config import SandboxSettings
from pml.errors import ExecutionTimeout, LimitExceeded, PermissionDenied, PmlError
from pml.execution.references import Plan, Target
from pml.execution.values import args_digest, raise_for_error, snippet_value
from pml.sandbox.base import ToolRef
from pml.upstream.base import UpstreamPool

# A capability may call capabilities, but not without end.
MAX_NESTING = 8

NestedRun = Callable[[str, dict[str, Any], "Budget", tuple[str, ...]], Awaitable[Any]]
# (server, tool, latency_ms, success) of every upstream call: the ``tool_usage`` rows.
ToolCallCounter = Callable[[str, str, float, bool], None]


@dataclass(slots=True)
class Budget:
    """The limits one ``pml_execute`` shares with the capabilities it runs."""

    settings: SandboxSettings
    deadline: float
    calls: int = 0
    tools_used: list[str] = field(default_factory=list[str])
    trace: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])

    @classmethod
    def start(cls, settings: SandboxSettings) -> Budget:
        return cls(settings, time.monotonic() + settings.wall_time_s)

    def remaining_s(self) -> float:
        return self.deadline - time.monotonic()

    def limits(self) -> SandboxSettings:
        """The sandbox limits for the next run: what is left of time and tool calls."""
        left = self.remaining_s()
        if left <= 0:
            raise _timeout(self.settings)
        calls = max(1, self.settings.max_tool_calls - self.calls)
        return self.settings.model_copy(update={"wall_time_s": left, "max_tool_calls": calls})

    def count_call(self) -> None:
        if self.calls >= self.settings.max_tool_calls:
            raise LimitExceeded(
                f"Tool call limit exceeded: more than {self.settings.max_tool_calls} calls",
                limit="max_tool_calls",
                max=self.settings.max_tool_calls,
            )
        if self.remaining_s() <= 0:
            raise _timeout(self.settings)
        self.calls += 1

    def used(self, address: str) -> None:
        if address not in self.tools_used:
            self.tools_used.append(address)

    def record(self, address: str, arguments: dict[str, Any], started: float, ok: bool) -> None:
        self.trace.append(
            {
                "tool": address,
                "argsDigest": args_digest(arguments),
                "durationMs": round((time.perf_counter() - started) * 1000, 3),
                "success": ok,
            }
        )


def _timeout(settings: SandboxSettings) -> ExecutionTimeout:
    return ExecutionTimeout(
        f"Execution exceeded the time limit of {settings.wall_time_s:g} s",
        limit="wall_time_s",
    )


class RunCaller:
    """``ToolCaller`` for one run (the top-level snippet, or one nested capability)."""

    def __init__(
        self,
        plan: Plan,
        budget: Budget,
        *,
        pool: UpstreamPool,
        nested: NestedRun,
        chain: tuple[str, ...] = (),
        on_tool_call: ToolCallCounter | None = None,
    ) -> None:
        self._plan = plan
        self._budget = budget
        self._pool = pool
        self._nested = nested
        self._chain = chain
        self._on_tool_call = on_tool_call

    async def call_tool(self, ref: ToolRef, arguments: dict[str, Any]) -> Any:
        target = self._plan.targets.get((ref.namespace, ref.name))
        if target is None:
            raise PermissionDenied(
                f"The snippet called {ref}, which its code does not name: write tool calls "
                'as mcp.<server>.<tool>(...) or mcp["<fqdn>"](...)',
                tool=str(ref),
            )
        self._budget.count_call()
        if target.kind == "capability":
            return await self._capability(target, arguments)
        return await self._tool(target, arguments)

    async def _tool(self, target: Target, arguments: dict[str, Any]) -> Any:
        budget = self._budget
        started = time.perf_counter()
        budget.used(target.address)
        try:
            result = await self._pool.call_tool_raw(
                target.server, target.tool, arguments, timeout_s=max(budget.remaining_s(), 0.001)
            )
        except PmlError:
            self._finished(target, arguments, started, ok=False)
            raise
        self._finished(target, arguments, started, ok=result.get("isError") is not True)
        raise_for_error(target.address, result)
        return snippet_value(result)

    def _finished(
        self, target: Target, arguments: dict[str, Any], started: float, *, ok: bool
    ) -> None:
        self._budget.record(target.address, arguments, started, ok=ok)
        if self._on_tool_call is not None:
            latency_ms = (time.perf_counter() - started) * 1000
            self._on_tool_call(target.server, target.tool, latency_ms, ok)

    async def _capability(self, target: Target, arguments: dict[str, Any]) -> Any:
        if target.fqdn in self._chain:
            raise LimitExceeded(
                f"Capability {target.fqdn} calls itself (through {' -> '.join(self._chain)})",
                limit="nesting",
            )
        if len(self._chain) >= MAX_NESTING:
            raise LimitExceeded(
                f"Capabilities nested more than {MAX_NESTING} deep", limit="nesting"
            )
        budget = self._budget
        started = time.perf_counter()
        budget.used(target.fqdn)
        try:
            value = await self._nested(target.fqdn, arguments, budget, (*self._chain, target.fqdn))
        except BaseException:
            budget.record(target.fqdn, arguments, started, ok=False)
            raise
        budget.record(target.fqdn, arguments, started, ok=True)
        return value
