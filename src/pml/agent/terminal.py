"""The person at the keyboard: approvals, consent and questions asked at the terminal.

    reader = LineReader(sys.stdin.fileno())
    person = TerminalPerson(reader, sys.stdout, interactive=sys.stdin.isatty())
    display = TerminalDisplay(sys.stdout)

Only a terminal counts as a person: without one (stdin is a pipe or a file, as in an
agent's own shell) every approval is denied, no sensitive memory is stored and a
clarifying question goes unanswered (the request goes on read-only), and the output says
so. Answers are read from the terminal's lines, never from anything the model wrote;
stored strings (arguments, facts) are shown with control characters escaped.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Final, TextIO

from pml.agent.model import ApprovalAsk, ConsentAsk, Decision

MAX_LINE_BYTES: Final = 100_000
SHOWN_CHARS: Final = 300
MAX_ASKS: Final = 3
_DECISIONS: Final[dict[str, Decision]] = {
    "o": "once",
    "once": "once",
    "s": "session",
    "session": "session",
    "a": "always",
    "always": "always",
    "d": "deny",
    "deny": "deny",
    "n": "deny",
    "no": "deny",
}


def plain(text: object, limit: int = SHOWN_CHARS) -> str:
    """``text`` on one line, control and bidi characters escaped, at most ``limit`` chars."""
    value = str(text)
    shown = "".join(
        char if char.isprintable() and not 0x202A <= ord(char) <= 0x202E else f"\\u{ord(char):04x}"
        for char in value[: limit + 1]
    )
    return shown if len(shown) <= limit else shown[:limit] + "…"


class LineReader:
    """Lines from a file descriptor without blocking the event loop (a terminal or a pipe)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = b""
        self._eof = False

    async def readline(self) -> str | None:
        """The next line without its newline, or None at the end of input."""
        while b"\n" not in self._buffer and not self._eof:
            await self._readable()
            try:
                chunk = os.read(self._fd, 4096)
            except BlockingIOError:
                continue
            if not chunk:
                self._eof = True
            self._buffer += chunk
            if len(self._buffer) > MAX_LINE_BYTES and b"\n" not in self._buffer:
                self._buffer = self._buffer[:MAX_LINE_BYTES] + b"\n"  # a huge line is cut
        if not self._buffer:
            return None
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode("utf-8", "replace").rstrip("\r")

    async def _readable(self) -> None:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not ready.done():
                ready.set_result(None)

        try:
            loop.add_reader(self._fd, wake)
        except (OSError, ValueError, NotImplementedError):
            return  # a regular file: reading never blocks
        try:
            await ready
        finally:
            loop.remove_reader(self._fd)


class TerminalDisplay:
    """Streams the answer and shows one line per tool call."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._mid_line = False

    def text(self, delta: str) -> None:
        self._out.write(delta)
        self._out.flush()
        self._mid_line = not delta.endswith("\n")

    def tool_line(self, line: str) -> None:
        self._line(f"  · {plain(line, 200)}")

    def notice(self, line: str) -> None:
        self._line(f"  ({plain(line, 300)})")

    def end(self) -> None:
        if self._mid_line:
            self._out.write("\n")
            self._mid_line = False
        self._out.flush()

    def _line(self, line: str) -> None:
        if self._mid_line:
            self._out.write("\n")
        self._out.write(line + "\n")
        self._out.flush()
        self._mid_line = False


class QuietDisplay:
    """Shows nothing (``--json``: the answer is printed once, at the end)."""

    def text(self, delta: str) -> None:
        del delta

    def tool_line(self, line: str) -> None:
        del line

    def notice(self, line: str) -> None:
        del line


class TerminalPerson:
    """Asks the person at the terminal; without a terminal, refuses (see module)."""

    def __init__(
        self,
        reader: LineReader,
        out: TextIO,
        *,
        interactive: bool,
        display: TerminalDisplay | None = None,
    ) -> None:
        self._reader = reader
        self._out = out
        self.interactive = interactive
        self._display = display  # its streamed line is ended before a question

    async def approve(self, ask: ApprovalAsk) -> Decision:
        if not self.interactive:
            self._say(f"approval needed for {plain(ask.tool)}: denied (no terminal to ask)")
            return "deny"
        lines = [
            f"approval needed: {plain(ask.tool)} ({plain(ask.capability)})",
            f"  intent {plain(ask.intent)}, rule {plain(ask.rule)}",
        ]
        for argument in list(ask.arguments)[:12]:
            name = plain(argument.get("name"), 60)
            lines.append(f"  {name}: {plain(argument.get('value', argument.get('preview', '')))}")
        if not ask.arguments and ask.summary:
            lines.append(f"  arguments: {plain(ask.summary)}")
        for choice, covers in ask.grants.items():
            lines.append(f"  {choice}: {plain(covers)}")
        self._say("\n".join(lines))
        for _ in range(MAX_ASKS):
            answer = await self._ask("allow? [o]nce / [s]ession / [a]lways / [d]eny: ")
            if answer is None:
                return "deny"
            decision = _DECISIONS.get(answer.strip().casefold())
            if decision is not None:
                return decision
        return "deny"

    async def consent(self, ask: ConsentAsk) -> bool:
        reasons = ", ".join(ask.reasons) or "sensitive"
        if not self.interactive:
            self._say(f"not stored: it looks sensitive ({plain(reasons)}) and no one can consent")
            return False
        self._say(f"store this in {plain(ask.target)}? it looks sensitive ({plain(reasons)}):")
        self._say(f"  {plain(ask.text, 500)}")
        answer = await self._ask("store it? [y/N]: ")
        return answer is not None and answer.strip().casefold() in ("y", "yes")

    async def clarify(self, question: str, choices: Sequence[str]) -> str | None:
        if not self.interactive:
            self._say("the request is unclear; going on read-only (no terminal to ask)")
            return None
        self._say(plain(question, 500))
        for number, choice in enumerate(choices, start=1):
            self._say(f"  {number}) {plain(choice)}")
        answer = await self._ask(f"choose 1-{len(choices)} (Enter: read-only): ")
        text = (answer or "").strip()
        if text.isdigit() and 1 <= int(text) <= len(choices):
            return choices[int(text) - 1]
        return None

    async def _ask(self, prompt: str) -> str | None:
        self._out.write(prompt)
        self._out.flush()
        return await self._reader.readline()

    def _say(self, text: str) -> None:
        if self._display is not None:
            self._display.end()
        self._out.write(text + "\n")
        self._out.flush()
