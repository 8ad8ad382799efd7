"""Last-resort stop of this process's stdio upstream servers (Linux ``/proc``).

    terminate_children()      # SIGTERM every child's process group; returns their pids

The SDK starts each stdio server in a session of its own (``start_new_session``), so a
signal sent to PML's process group never reaches them. When PML itself is told to stop by a
signal, its orderly shutdown may not finish before its parent's patience does; signalling the
children first means none of them outlives PML.
"""

from __future__ import annotations

import os
import signal
from contextlib import suppress
from pathlib import Path


def child_pids() -> list[int]:
    """The direct children of this process (empty where ``/proc`` does not list them)."""
    pids: set[int] = set()
    with suppress(OSError):
        for task in Path("/proc/self/task").iterdir():
            with suppress(OSError):
                pids.update(int(pid) for pid in (task / "children").read_text().split())
    return sorted(pids)


def terminate_children(sig: int = signal.SIGTERM) -> list[int]:
    """Send ``sig`` to each child's process group (or to the child alone if it leads none)."""
    signalled: list[int] = []
    for pid in child_pids():
        with suppress(ProcessLookupError, PermissionError):
            if os.getpgid(pid) == pid:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
            signalled.append(pid)
    return signalled
