"""The JSON-lines file of the audit log: one object per line, appended, never rewritten.

    sink = AuditFile(Path("audit.jsonl"))
    sink.add(entries)             # encoded now, kept until written
    error = await sink.write()    # None, or the OSError that stopped it (the rest is kept)

The file is created ``0o600`` (its folder too, if missing). A write that fails half way
keeps exactly the bytes that did not land, so the next write completes the broken line
instead of duplicating or losing events. Lines never contain a character that
``str.splitlines()`` would split on.
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Final

import anyio

from pml.storage.audit_repo import AuditEntry

# JSON leaves these unescaped with ensure_ascii off, yet str.splitlines() splits on them.
_LINE_BREAKS: Final = {"\u0085": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def encode_line(entry: AuditEntry) -> bytes:
    """One event as a UTF-8 JSON line (unicode kept readable, line breaks escaped)."""
    text = json.dumps(entry.to_dict(), ensure_ascii=False, allow_nan=False)
    for char, escaped in _LINE_BREAKS.items():
        if char in text:
            text = text.replace(char, escaped)
    return text.encode("utf-8") + b"\n"


class AuditFile:
    """Encoded events waiting for the file, and the appending of them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lines: deque[tuple[str, str, bytes, bool]] = deque()  # org, project, line, pinned
        self._tail = b""  # the rest of a line a failed write left half written

    def __len__(self) -> int:
        """Events not yet (completely) written."""
        return len(self._lines) + (1 if self._tail else 0)

    def add(self, entries: Iterable[AuditEntry], *, pinned: bool = False) -> None:
        """Queue events for the next ``write`` (``pinned`` ones are never trimmed)."""
        self._lines.extend(
            (entry.org, entry.project, encode_line(entry), pinned) for entry in entries
        )

    def trim(self, keep: int) -> list[tuple[str, str]]:
        """Drop the oldest unpinned events beyond ``keep``; the org/project of each dropped."""
        excess = len(self._lines) - keep
        if excess <= 0:
            return []
        dropped: list[tuple[str, str]] = []
        kept: deque[tuple[str, str, bytes, bool]] = deque()
        for line in self._lines:
            if excess > 0 and not line[3]:
                dropped.append((line[0], line[1]))
                excess -= 1
            else:
                kept.append(line)
        self._lines = kept
        return dropped

    async def write(self) -> OSError | None:
        """Append everything waiting; on error keep what did not land and return the error."""
        if not self._tail and not self._lines:
            return None
        data = self._tail + b"".join(line[2] for line in self._lines)
        written, error = await anyio.to_thread.run_sync(_append, self.path, data)
        self._consume(written)
        return error

    def _consume(self, written: int) -> None:
        """Forget the first ``written`` bytes of the tail and lines (they are on disk)."""
        if written < len(self._tail):
            self._tail = self._tail[written:]
            return
        written -= len(self._tail)
        self._tail = b""
        while self._lines and written >= len(self._lines[0][2]):
            written -= len(self._lines.popleft()[2])
        if written:
            self._tail = self._lines.popleft()[2][written:]


def _append(path: Path, data: bytes) -> tuple[int, OSError | None]:
    """Append ``data`` to ``path`` (created 0o600); how many bytes landed, and the error."""
    written = 0
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    except OSError as error:
        return 0, error
    try:
        view = memoryview(data)
        while written < len(data):
            written += os.write(fd, view[written:])
    except OSError as error:
        return written, error
    finally:
        os.close(fd)
    return written, None
