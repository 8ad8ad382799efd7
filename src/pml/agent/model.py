"""The seams of agent mode: the chat model, the person at the keyboard, what the turn shows.

    reply = await model.chat(messages, tools=specs, on_text=display.text)
    reply.content            # the text the model wrote this round ("" when it only called tools)
    reply.tool_calls         # (ToolCall(id, name, arguments_json_text), ...)

Messages and tool specs are the OpenAI chat-completions wire format (plain dicts), so any
OpenAI-compatible endpoint can be the executor. A ``Person`` is asked whatever only a person
may decide (approvals, memory consent, a clarifying question): the terminal in ``pml agent``,
nobody (every question refused) when no terminal is attached.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Decision = Literal["deny", "once", "session", "always"]
Sensitivity = Literal["low", "high", "credential"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call the model asked for; ``arguments`` is its JSON text, as sent (may be
    malformed: the turn checks it)."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ChatReply:
    """One round of the model: its text and the tool calls it asked for."""

    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None


class ChatModel(Protocol):
    """An OpenAI-compatible chat endpoint with tool calling (``pml.agent.chat.OpenAiChat``).

    Failures (network, timeout, HTTP status, an answer that is not a chat completion or is
    larger than allowed) raise ``UpstreamUnavailable`` (server ``"llm"``); cancellation
    propagates at once and closes the request."""

    model: str

    async def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        on_text: Callable[[str], None] | None = None,
    ) -> ChatReply: ...


@dataclass(frozen=True, slots=True)
class ApprovalAsk:
    """A tool call that needs a person's approval, as the person reviews it."""

    tool: str
    capability: str
    intent: str
    rule: str
    arguments: Sequence[Mapping[str, Any]] = ()
    summary: str = ""
    grants: Mapping[str, str] = field(default_factory=dict[str, str])


@dataclass(frozen=True, slots=True)
class ConsentAsk:
    """A memory write that waits for the person's consent (high sensitivity)."""

    text: str
    target: str
    reasons: tuple[str, ...]


class Person(Protocol):
    """The person at the keyboard: the only one who approves, consents or clarifies."""

    async def approve(self, ask: ApprovalAsk) -> Decision: ...

    async def consent(self, ask: ConsentAsk) -> bool: ...

    async def clarify(self, question: str, choices: Sequence[str]) -> str | None:
        """One of ``choices``, or None (no answer: the turn goes on read-only)."""
        ...


class Display(Protocol):
    """Where a turn shows itself while it runs (the terminal, or nothing with --json)."""

    def text(self, delta: str) -> None: ...

    def tool_line(self, line: str) -> None: ...

    def notice(self, line: str) -> None: ...
