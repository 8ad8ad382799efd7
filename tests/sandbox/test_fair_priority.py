"""Sandbox workers are lowered below the gateway's CPU priority; other children are not."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest

from pml.config import SandboxSettings
from pml.sandbox.monty import MontyEngine
from pml.sandbox.priority import WORKER_NICENESS, WorkerPriority
from sandbox.fair_kit import NoCalls

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="Linux /proc only"),
]


def children_named(name: str) -> list[int]:
    found: list[int] = []
    for task in Path("/proc/self/task").iterdir():
        for pid in (task / "children").read_text().split():
            comm = Path(f"/proc/{pid}/comm")
            if comm.exists() and comm.read_text().strip() == name:
                found.append(int(pid))
    return found


async def test_the_workers_of_the_pool_are_niced_and_an_upstream_child_is_not() -> None:
    # an upstream server started over stdio is a child like this one
    other = await anyio.open_process([sys.executable, "-c", "import sys; sys.stdin.read()"])
    engine = MontyEngine(min_workers=2, max_workers=2)
    try:
        outcome = await engine.run(
            "return 1", args={}, caller=NoCalls(), limits=SandboxSettings(wall_time_s=5)
        )
        assert outcome.value == 1
        workers = children_named("monty")
        assert len(workers) == 2
        assert all(os.getpriority(os.PRIO_PROCESS, pid) == 0 for pid in workers)
        priority = WorkerPriority(every_s=60.0)
        priority.lower_new_workers()
        assert all(os.getpriority(os.PRIO_PROCESS, pid) == WORKER_NICENESS for pid in workers)
        assert os.getpriority(os.PRIO_PROCESS, other.pid) == 0
        os.setpriority(os.PRIO_PROCESS, workers[0], 0)
        priority.lower_new_workers()  # within a minute of the last look: nothing is read
        assert os.getpriority(os.PRIO_PROCESS, workers[0]) == 0
    finally:
        await engine.aclose()
        assert other.stdin is not None
        await other.stdin.aclose()
        with anyio.fail_after(10):
            await other.wait()
