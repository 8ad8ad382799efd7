"""Sandbox workers run at a lower CPU priority than the gateway that serves everyone.

    priority = WorkerPriority()       # the gateway's ``monty`` children, niceness 10
    priority.lower_new_workers()      # cheap: looks at most once a second

A snippet that spins keeps a core busy until its time limit; on a small machine a few of
them would otherwise take the CPU from the gateway's own event loop (HTTP, database,
other tenants' requests). pydantic-monty starts its workers itself (lazily, and again after
a crash), so the gateway looks for new ``monty`` children of its own process now and then
and raises their niceness; the workers compete among themselves as before, and a worker
woken for a short snippet still gets a core quickly. Linux only (``/proc``); elsewhere,
and when not permitted, nothing changes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Final

logger = logging.getLogger(__name__)

WORKER_NICENESS: Final = 10
LOOK_EVERY_S: Final = 1.0
_PROC: Final = Path("/proc")


class WorkerPriority:
    """Lowers the CPU priority of this process's sandbox worker children (see the module)."""

    def __init__(
        self,
        *,
        command: str = "monty",
        niceness: int = WORKER_NICENESS,
        every_s: float = LOOK_EVERY_S,
    ) -> None:
        self._command = command
        self._niceness = niceness
        self._every_s = every_s
        self._last = -every_s
        self._lowered: set[int] = set()
        self._available = hasattr(os, "setpriority") and (_PROC / "self" / "task").is_dir()

    def lower_new_workers(self) -> None:
        """Renice workers started since the last look (at most one look per ``every_s``)."""
        now = time.monotonic()
        if not self._available or now - self._last < self._every_s:
            return
        self._last = now
        children = _children()
        self._lowered &= children  # pids of workers that are gone may be reused
        for pid in children - self._lowered:
            if _command_of(pid) != self._command:
                continue  # an upstream server started over stdio, not a worker
            try:
                if os.getpriority(os.PRIO_PROCESS, pid) < self._niceness:
                    os.setpriority(os.PRIO_PROCESS, pid, self._niceness)
            except OSError:  # gone meanwhile, or not permitted: leave it as it is
                logger.debug("could not lower the priority of sandbox worker %d", pid)
                continue
            self._lowered.add(pid)


def _children() -> set[int]:
    pids: set[int] = set()
    with contextlib.suppress(OSError):
        for task in (_PROC / "self" / "task").iterdir():
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(pid) for pid in (task / "children").read_text().split())
    return pids


def _command_of(pid: int) -> str:
    try:
        return (_PROC / str(pid) / "comm").read_text().strip()
    except OSError:
        return ""
