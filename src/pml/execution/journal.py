"""The tool calls a run has completed, so that a resumed run does not send them again.

    journal = Journal.resumed(state["journal"])        # what the paused run had done
    raw = journal.replay("filesystem:read_file", digest) # its recorded result, or None
    journal.record("filesystem:write_file", digest, raw) # a call sent now
    state["journal"] = journal.to_json()                # stored when the run pauses again

A run that pauses for approval stores its journal; when it is approved, the snippet runs
again from the start and each call that matches a recorded one (same tool, same argument
digest, taken in order among equal ones) gets the recorded result instead of being sent:
upstream servers see every call exactly once. A call whose arguments differ from what was
recorded is sent (the recorded entry is never reused for different arguments).

A journal holds only what a pause needs: a run that cannot pause (no policy that could
ask for approval) records nothing (``pml.execution.caller``), and once the results kept
pass ``MAX_JOURNAL_BYTES`` the journal stops keeping them — such a run could not be
stored anyway, so a pause then fails with ``LIMIT_EXCEEDED`` rather than the gateway
holding every result until the run ends.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, cast

from pml.errors import LimitExceeded

# A run keeps at most this much recorded result text to be able to pause (16 MB).
MAX_JOURNAL_BYTES = 16 * 1024 * 1024


@dataclass(slots=True)
class Journal:
    """The calls completed so far (``recorded``) and those left to replay (``pending``)."""

    recorded: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    pending: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    size: int = 0
    # Bytes of the results kept so far (as measured when recorded), and whether one was
    # dropped for going past the bound.
    kept_bytes: int = 0
    overflowed: bool = False

    @classmethod
    def resumed(cls, entries: object) -> Journal:
        """A journal replaying ``entries`` (as stored by ``to_json``; bad entries are dropped)."""
        pending: list[dict[str, Any]] = []
        if isinstance(entries, list):
            for entry in cast(list[object], entries):
                if isinstance(entry, dict):
                    item = cast(dict[str, Any], entry)
                    if isinstance(item.get("tool"), str) and isinstance(item.get("digest"), str):
                        pending.append(item)
        return cls(pending=pending)

    def replay(self, address: str, digest: str) -> dict[str, Any] | None:
        """The recorded raw result of this call, taken from the pending entries (or None)."""
        for index, entry in enumerate(self.pending):
            if entry["tool"] == address and entry["digest"] == digest:
                del self.pending[index]
                self._keep(entry)
                result = entry.get("result")
                return cast(dict[str, Any], result) if isinstance(result, dict) else {}
        return None

    def record(
        self, address: str, digest: str, result: dict[str, Any], *, size: int | None = None
    ) -> None:
        """A call that was sent and answered (``size``: its bytes, when already measured)."""
        if self.overflowed:
            self._keep({"tool": address, "digest": digest})
            return
        measured = size if size is not None else _measure(result)
        if self.kept_bytes + measured > MAX_JOURNAL_BYTES:
            self.overflowed = True  # the run can no longer pause: keep no more results
            self._keep({"tool": address, "digest": digest})
            return
        self.kept_bytes += measured
        self._keep({"tool": address, "digest": digest, "result": result})

    def _keep(self, entry: dict[str, Any]) -> None:
        self.recorded.append(entry)

    def to_json(self) -> list[dict[str, Any]]:
        """What to store with a paused run (``LIMIT_EXCEEDED`` when too large to keep).

        Sizes are measured again here, exactly as stored."""
        self.size = sum(_measure(e.get("result")) for e in self.recorded)
        if self.overflowed or self.size > MAX_JOURNAL_BYTES:
            raise LimitExceeded(
                f"The run cannot wait for approval: its {len(self.recorded)} completed tool "
                f"calls returned more than {MAX_JOURNAL_BYTES // (1024 * 1024)} MB to replay",
                limit="journal_bytes",
            )
        return list(self.recorded)


def _measure(result: object) -> int:
    return len(json.dumps(result, default=str))
