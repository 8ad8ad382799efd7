"""The sandbox seam: what runs a snippet, and how the snippet reaches the host.

    engine = MontyEngine()                                  # pml.sandbox.monty
    outcome = await engine.run(code, args={"path": "/x"}, caller=caller, limits=limits)
    outcome.value, outcome.logs, outcome.tool_calls

Inside a snippet, ``mcp.<a>.<b>(**kwargs)``, ``mcp.<a>["get-sum"](**kwargs)`` and
``mcp["<fqdn>"](**kwargs)`` are awaitables that reach the host through one ``ToolCaller``:
the single place where calls are resolved, counted, checked by the policy gate and audited.
The engine only carries the call across the boundary; what a name means is the caller's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from pml.config import SandboxSettings

# Who a run is for, outermost first: (org, project, user). The fair scheduler shares
# workers between tenants along this path; engines that do not schedule ignore it.
TenantKey = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ToolRef:
    """What a snippet called: ``mcp.<namespace>.<name>`` or ``mcp["<name>"]`` (namespace ``""``)."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}.{self.name}" if self.namespace else self.name


class SnippetToolError(Exception):
    """Raised by a ``ToolCaller`` for a tool result with ``isError``: the snippet may catch
    it as ``ToolError``; uncaught, the run fails with ``TOOL_ERROR``."""

    def __init__(self, tool: str, message: str) -> None:
        super().__init__(message)
        self.tool = tool
        self.message = message


class ToolCaller(Protocol):
    """The host side of the ``mcp`` bridge."""

    async def call_tool(self, ref: ToolRef, arguments: dict[str, Any]) -> Any:
        """Run one call; return the JSON value the snippet sees.

        Raises ``SnippetToolError`` for an error result (catchable in the snippet) and any
        ``PmlError`` (unknown tool, policy denial, upstream down, limits) to end the run.
        """
        ...


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """A successful run: the returned value (JSON), printed lines, how many tool calls, how
    long it ran and how long it waited for a worker before (``wait_ms``, counted against
    its time limit)."""

    value: Any
    logs: list[str] = field(default_factory=list[str])
    tool_calls: int = 0
    duration_ms: float = 0.0
    wait_ms: float = 0.0


class SandboxEngine(Protocol):
    """Runs snippets; every run starts clean (nothing survives from one run to the next)."""

    async def run(
        self,
        code: str,
        *,
        args: dict[str, Any],
        caller: ToolCaller,
        limits: SandboxSettings,
        tenant: TenantKey | None = None,
    ) -> RunOutcome:
        """Run ``code`` with ``args`` for ``tenant``; raise a ``PmlError`` when it fails.

        ``CodeSyntaxError`` (SYNTAX_ERROR) for code the engine cannot run,
        ``ExecutionTimeout`` (TIMEOUT), ``LimitExceeded`` (LIMIT_EXCEEDED: memory, tool calls,
        result size, recursion), ``ExecutionFailed`` (EXECUTION_FAILED: an exception in the
        snippet, with its type, message and snippet line), ``ToolCallError`` (TOOL_ERROR: a
        ``ToolError`` the snippet did not catch), ``Busy`` (BUSY: the tenant's queue for a
        worker is full), and whatever ``PmlError`` the caller raised.
        """
        ...

    async def aclose(self) -> None:
        """Stop the engine's workers (idempotent)."""
        ...
