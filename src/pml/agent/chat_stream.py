"""Reading one chat-completions answer: a Server-Sent Events stream, or one JSON completion.

    reader = StreamReader(on_text=display.text)
    async for piece in response.aiter_bytes():
        reader.feed(piece)                # on_text(delta) for each piece of text, as it comes
        if reader.done:                   # ``data: [DONE]``
            break
    reader.finish()                       # the stream ended
    reply = reader.reply()                # ChatReply(content, tool_calls, finish_reason)

    reply = completion_reply(raw_bytes, on_text)   # an endpoint that ignored ``stream``

Answers are untrusted: malformed lines are skipped (a stream without one valid chunk fails),
JSON nesting too deep to decode counts as malformed, and a reply may ask for at most
``MAX_TOOL_CALLS`` tool calls. Tool calls are assembled from their fragments by ``index``:
the first id seen is kept, names and arguments are concatenated (a server that repeats the
whole name in every fragment is read as meaning it once). A call whose name is not a string
is kept with the name ``""`` so the turn answers it with an error the model can read; a call
without an id (or with one already used) gets ``call_<n>``, n its position in the reply.
Failures raise ``UpstreamUnavailable`` (server ``"llm"``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, cast

from pml.agent.model import ChatReply, ToolCall
from pml.errors import UpstreamUnavailable
from pml.llm import short_text, text_of

MAX_TOOL_CALLS: Final = 64
MAX_CALL_ID_CHARS: Final = 256

TextSink = Callable[[str], None]


def unavailable(message: str) -> UpstreamUnavailable:
    """The error every failed exchange with the model raises."""
    return UpstreamUnavailable(message, server="llm")


short = short_text  # one line, at most 200 printable characters


def error_detail(data: object) -> str:
    """``: <message>`` from an OpenAI-style error object (``{"error": {"message": ...}}``)."""
    error = cast(dict[str, Any], data).get("error") if isinstance(data, dict) else None
    message = cast(dict[str, Any], error).get("message") if isinstance(error, dict) else error
    return f": {short(message)}" if isinstance(message, str) and message else ""


def decode_json(raw: bytes | str) -> object:
    """The JSON value of ``raw``, or None when it is not JSON (or nested beyond decoding)."""
    try:
        return cast(object, json.loads(raw))
    except (ValueError, RecursionError):
        return None


@dataclass(slots=True)
class _CallParts:
    id: str = ""
    name: list[str] = field(default_factory=list[str])
    arguments: list[str] = field(default_factory=list[str])
    name_is_text: bool = True

    def add_name(self, name: object) -> None:
        if not isinstance(name, str):
            self.name_is_text = False
        elif not (name and name == "".join(self.name)):  # a whole name repeated: said once
            self.name.append(name)

    def add_arguments(self, arguments: object) -> None:
        if isinstance(arguments, str):
            self.arguments.append(arguments)
        elif isinstance(arguments, dict | list):  # some servers send the object itself
            try:
                self.arguments.append(json.dumps(arguments))
            except (ValueError, RecursionError):
                self.arguments.append("")


class ToolCallAssembler:
    """Tool calls put together from their fragments (streamed deltas or whole calls)."""

    def __init__(self) -> None:
        self._calls: dict[int, _CallParts] = {}
        self._last: int | None = None

    def add(self, fragment: object, index: int | None = None) -> None:
        """One fragment ``{"index", "id", "function": {"name", "arguments"}}``."""
        if not isinstance(fragment, dict):
            return
        data = cast(dict[str, Any], fragment)
        given = data.get("index")
        call_id = data.get("id")
        call_id = call_id if isinstance(call_id, str) and call_id else None
        if index is None:
            index = given if isinstance(given, int) and not isinstance(given, bool) else None
        if index is None:
            index = self._index_for(call_id)
        parts = self._calls.get(index)
        if parts is None:
            if len(self._calls) >= MAX_TOOL_CALLS:
                raise unavailable(f"LLM reply asks for more than {MAX_TOOL_CALLS} tool calls")
            parts = self._calls[index] = _CallParts()
        self._last = index
        if call_id is not None and not parts.id:
            parts.id = call_id
        function = data.get("function")
        if isinstance(function, dict):
            function_data = cast(dict[str, Any], function)
            if "name" in function_data:
                parts.add_name(function_data["name"])
            parts.add_arguments(function_data.get("arguments"))

    def _index_for(self, call_id: str | None) -> int:
        """Where a fragment without an index belongs: its id's call, a new call, the last."""
        for index, parts in self._calls.items():
            if call_id is not None and parts.id == call_id:
                return index
        if call_id is not None or self._last is None:
            return max(self._calls, default=-1) + 1
        return self._last

    def calls(self) -> tuple[ToolCall, ...]:
        """The calls in index order, each with a usable, distinct id."""
        result: list[ToolCall] = []
        seen: set[str] = set()
        for position, index in enumerate(sorted(self._calls)):
            parts = self._calls[index]
            call_id = parts.id
            if not call_id or call_id in seen or len(call_id) > MAX_CALL_ID_CHARS:
                call_id = f"call_{position}"
                while call_id in seen:
                    call_id += "_"
            seen.add(call_id)
            name = "".join(parts.name) if parts.name_is_text else ""
            result.append(ToolCall(id=call_id, name=name, arguments="".join(parts.arguments)))
        return tuple(result)


class StreamReader:
    """The chunks of a streamed chat completion, fed as bytes in whatever pieces arrive."""

    def __init__(self, on_text: TextSink | None = None) -> None:
        self.done = False
        self.chunks = 0  # valid chat-completion chunks seen
        self._on_text = on_text
        self._partial: list[bytes] = []  # the start of a line whose end has not come yet
        self._content: list[str] = []
        self._tool_calls = ToolCallAssembler()
        self._finish_reason: str | None = None

    def feed(self, data: bytes) -> None:
        """Read the complete lines ``data`` ends (the rest waits for the next piece)."""
        if self.done:
            return
        if b"\n" not in data:
            self._partial.append(data)
            return
        lines = data.split(b"\n")
        self._partial.append(lines[0])
        lines[0] = b"".join(self._partial)
        tail = lines.pop()
        self._partial = [tail] if tail else []
        for line in lines:
            self._line(line)
            if self.done:
                return

    def finish(self) -> None:
        """Read the last line, which may lack its newline (the stream has ended)."""
        if not self.done and self._partial:
            line, self._partial = b"".join(self._partial), []
            self._line(line)

    def reply(self) -> ChatReply:
        """The reply the stream made (after ``finish``)."""
        self.finish()
        if self.chunks == 0:
            raise unavailable("LLM endpoint answered no chat completion chunk")
        return ChatReply(
            content="".join(self._content),
            tool_calls=self._tool_calls.calls(),
            finish_reason=self._finish_reason,
        )

    def _line(self, line: bytes) -> None:
        # Only ``data:`` lines matter; ``event:``, ``id:``, comments and blank lines do not.
        # OpenAI-compatible servers put one JSON chunk on each data line.
        line = line.rstrip(b"\r")
        if not line.startswith(b"data:"):
            return
        payload = line[5:].strip()
        if payload == b"[DONE]":
            self.done = True
            return
        data = decode_json(payload)
        if not isinstance(data, dict):
            return  # malformed: skipped
        chunk = cast(dict[str, Any], data)
        if chunk.get("error") is not None:
            raise unavailable(f"LLM stream reported an error{error_detail(chunk)}")
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            return
        self.chunks += 1
        first = cast(list[object], choices)[0] if choices else None
        if isinstance(first, dict):
            self._choice(cast(dict[str, Any], first))

    def _choice(self, choice: dict[str, Any]) -> None:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            delta_data = cast(dict[str, Any], delta)
            for key in ("content", "refusal"):
                text = text_of(delta_data.get(key))
                if text:
                    self._content.append(text)
                    if self._on_text is not None:
                        self._on_text(text)
            fragments = delta_data.get("tool_calls")
            if isinstance(fragments, list):
                for fragment in cast(list[object], fragments):
                    self._tool_calls.add(fragment)
        finish_reason = choice.get("finish_reason")
        if isinstance(finish_reason, str) and finish_reason:
            self._finish_reason = finish_reason


def completion_reply(raw: bytes, on_text: TextSink | None = None) -> ChatReply:
    """The reply in one whole chat completion (``choices[0].message``); text to on_text once."""
    data = decode_json(raw)
    if not isinstance(data, dict):
        raise unavailable("LLM endpoint answered something that is not a JSON object")
    completion = cast(dict[str, Any], data)
    if completion.get("error") is not None:
        raise unavailable(f"LLM endpoint reported an error{error_detail(completion)}")
    choices = completion.get("choices")
    first = cast(list[object], choices)[0] if isinstance(choices, list) and choices else None
    choice = cast(dict[str, Any], first) if isinstance(first, dict) else {}
    message = choice.get("message")
    if not isinstance(message, dict):
        raise unavailable("LLM answer is not a chat completion (no choices[0].message)")
    message_data = cast(dict[str, Any], message)
    content = text_of(message_data.get("content")) or text_of(message_data.get("refusal"))
    assembler = ToolCallAssembler()
    calls = message_data.get("tool_calls")
    if isinstance(calls, list):
        for position, call in enumerate(cast(list[object], calls)):
            assembler.add(call, index=position)
    if content and on_text is not None:
        on_text(content)
    finish_reason = choice.get("finish_reason")
    return ChatReply(
        content=content or "",
        tool_calls=assembler.calls(),
        finish_reason=finish_reason if isinstance(finish_reason, str) else None,
    )
