"""Helpers for the sandbox tests: a recording ``ToolCaller`` and small limits.

Example::

    caller = RecordingCaller({"fs.read": "contents", "fs.fail": SnippetToolError("fs.fail", "x")})
    outcome = await engine.run(code, args={}, caller=caller, limits=limits(max_tool_calls=3))
    caller.refs  # ["fs.read", ...]
"""

from __future__ import annotations

from typing import Any

import anyio

from pml.config import SandboxSettings
from pml.sandbox.base import ToolRef


def limits(**overrides: Any) -> SandboxSettings:
    """Test limits: a short wall time unless told otherwise."""
    return SandboxSettings(**{"wall_time_s": 5.0, **overrides})


class RecordingCaller:
    """Records every call; answers from ``answers`` by tool name (``str(ref)``).

    An answer that is an exception is raised; a missing answer echoes the call back as
    ``{"tool": ..., "arguments": ...}``. ``delay`` sleeps before answering; calls that are
    cancelled while sleeping are listed in ``cancelled``.
    """

    def __init__(self, answers: dict[str, Any] | None = None, *, delay: float = 0.0) -> None:
        self.answers = answers or {}
        self.delay = delay
        self.calls: list[tuple[ToolRef, dict[str, Any]]] = []
        self.cancelled: list[ToolRef] = []

    @property
    def refs(self) -> list[str]:
        return [str(ref) for ref, _ in self.calls]

    async def call_tool(self, ref: ToolRef, arguments: dict[str, Any]) -> Any:
        self.calls.append((ref, arguments))
        if self.delay:
            try:
                await anyio.sleep(self.delay)
            except anyio.get_cancelled_exc_class():
                self.cancelled.append(ref)
                raise
        answer = self.answers.get(str(ref), _ECHO)
        if isinstance(answer, BaseException):
            raise answer
        if answer is _ECHO:
            return {"tool": str(ref), "arguments": arguments}
        return answer


_ECHO = object()
