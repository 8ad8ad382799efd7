"""What the gateway's tool surface (``pml.gateway.tools``) calls but does not own: the
service that runs ``pml_execute`` and capability tools, and where tool calls are counted."""

from __future__ import annotations

from typing import Any, Protocol

from pml.gateway.schemas import ExecuteParams
from pml.registry.scope import Scope


class Executor(Protocol):
    """What runs ``pml_execute`` (``pml.execution.service.ExecuteService``)."""

    async def execute(self, scope: Scope, params: ExecuteParams) -> dict[str, Any]: ...

    async def run_capability(self, scope: Scope, ref: str, args: dict[str, Any]) -> dict[str, Any]:
        """Run a named capability as a tool (``NOT_FOUND`` for an unnamed one)."""
        ...

    async def flush(self) -> None:
        """Write queued usage counts and traces now."""
        ...


class UsageSink(Protocol):
    """Where tool calls are counted (``pml.execution.recorder.UsageRecorder``)."""

    def tool_call(
        self, scope: Scope, server_id: str, tool: str, *, latency_ms: float, success: bool
    ) -> None: ...
