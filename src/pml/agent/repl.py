"""The ``pml agent`` loops: one turn (``--once``), or a conversation at the terminal.

    code = await run_once(agent, "what time is it in Tokyo", display, out, as_json=False)
    await run_conversation(agent, reader, display, out)

Ctrl-C while a turn runs cancels that turn (the model's request or the tool call in flight)
and, in a conversation, returns to the prompt; Ctrl-C at the prompt, Ctrl-D or ``/exit``
ends the conversation. ``/clear`` forgets the conversation so far.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections.abc import Callable, Generator
from typing import Any, Final, TextIO, cast

import anyio

from pml.agent.terminal import LineReader, TerminalDisplay
from pml.agent.turn import Agent, TurnResult

EXIT_CANCELLED: Final = 130
PROMPT: Final = "you> "


class _Interrupts:
    """Ctrl-C cancels the current scope (the turn, or the prompt)."""

    def __init__(self) -> None:
        self.scope: anyio.CancelScope | None = None

    def fire(self) -> None:
        if self.scope is not None:
            self.scope.cancel()


@contextlib.contextmanager
def _on_sigint(handler: Callable[[], None]) -> Generator[None]:
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(signal.SIGINT, handler)
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
        yield
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGINT)


async def _turn(agent: Agent, text: str, interrupts: _Interrupts) -> TurnResult | None:
    """One turn, or None when Ctrl-C cancelled it."""
    with anyio.CancelScope() as scope:
        interrupts.scope = scope
        try:
            return await agent.turn(text)
        finally:
            interrupts.scope = None
    return None


async def run_once(
    agent: Agent, text: str, display: TerminalDisplay | None, out: TextIO, *, as_json: bool
) -> int:
    """One turn; the exit code (0 answered, 1 failed, 130 cancelled)."""
    interrupts = _Interrupts()
    with _on_sigint(interrupts.fire):
        result = await _turn(agent, text, interrupts)
    if display is not None:
        display.end()
    if result is None:
        if as_json:
            out.write(json.dumps({"outcome": "cancelled"}) + "\n")
        else:
            out.write("(turn cancelled)\n")
        return EXIT_CANCELLED
    if as_json:
        out.write(json.dumps(_json_result(result), ensure_ascii=False, default=str) + "\n")
    elif result.error is not None:
        out.write(f"error: {result.error}\n")
    out.flush()
    return 0 if result.outcome == "answered" else 1


async def run_conversation(
    agent: Agent, reader: LineReader, display: TerminalDisplay, out: TextIO
) -> int:
    """Turns until Ctrl-D, ``/exit`` or Ctrl-C at the prompt."""
    interrupts = _Interrupts()
    with _on_sigint(interrupts.fire):
        while True:
            out.write(PROMPT)
            out.flush()
            line: str | None = None
            with anyio.CancelScope() as waiting:
                interrupts.scope = waiting
                line = await reader.readline()
            interrupts.scope = None
            if waiting.cancel_called or line is None:
                out.write("\n")
                return 0
            text = line.strip()
            if not text:
                continue
            if text in ("/exit", "/quit"):
                return 0
            if text == "/clear":
                agent.history.clear()
                out.write("(conversation cleared)\n")
                continue
            result = await _turn(agent, text, interrupts)
            display.end()
            if result is None:
                out.write("(turn cancelled)\n")
            elif result.error is not None:
                out.write(f"error: {result.error}\n")
            out.flush()


def _json_result(result: TurnResult) -> dict[str, Any]:
    record = result.record
    return {
        "request_id": result.request_id,
        "outcome": result.outcome,
        "answer": result.answer,
        "error": result.error,
        "intent": cast(dict[str, Any], record.get("router") or {}).get("intent"),
        "tools_offered": record.get("tools_offered", []),
        "tool_calls": record.get("tool_calls", []),
        "memory": record.get("memory", {}),
        "permissions": record.get("permissions", {}),
    }
