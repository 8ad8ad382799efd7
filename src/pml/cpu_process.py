"""The gateway's heavy pure-Python work, done by a child process, the tenants in turn.

    value = await cpu_process.run("diffs", (pairs,), tenant)   # a job of pml.cpu_worker

Some of the gateway's work is pure Python and grows with what a tenant sends: checking a
snippet of 80 KB (~1 s of CPU, ``pml.sandbox.study``), the diffs of 20 versions of such
code (~0.4 s, ``cap_history``). On the event loop that was every tenant's wait; on a worker
thread, the interpreter lock made each other tenant's request wait for it in 5 ms slices
(a victim's p95 500-700 ms while one tenant sent 80 KB snippets).

Such work goes to one child process (``pml.cpu_worker``) instead. The child runs at a lower
priority, stops a job after ``CPU_LIMIT_S`` of CPU (``LIMIT_EXCEEDED``) and within its
memory limit. It starts with the first job (~0.2 s), and again if it ends. One job runs at
a time: the waiting tenants take turns by org (``pml.fair_lane``), each with at most
``QUEUE_PER_TENANT`` waiting (one more is ``BUSY`` with ``retryAfterS``). A job that gets
no answer within ``WALL_LIMIT_S``, or whose child dies, fails (``EXECUTION_FAILED``); the
next job starts a new child. Where no child process can be started, jobs run on a worker
thread, as before, with a warning.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import pickle
import select
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any, Final

import anyio
import anyio.to_thread

from pml import cpu_worker
from pml.errors import Busy, ExecutionFailed, PmlError
from pml.fair_lane import FairLane, Tenant

logger = logging.getLogger(__name__)

QUEUE_PER_TENANT: Final = 16
FIRST_JOB_ESTIMATE_S: Final = 0.5
CPU_LIMIT_S: Final = cpu_worker.CPU_LIMIT_S
# The child stops a job after CPU_LIMIT_S of CPU; this bounds a job that cannot get the
# CPU (the machine saturated) or a child that stopped answering.
WALL_LIMIT_S: Final = 120.0


class CpuLane(FairLane):
    """One job at a time, the waiting tenants served in turn."""

    def __init__(self, *, queue_limit: int = QUEUE_PER_TENANT) -> None:
        super().__init__(slots=1, queue_limit=queue_limit, first_estimate_s=FIRST_JOB_ESTIMATE_S)

    def busy(self, tenant: Tenant) -> Busy:
        return Busy(
            f"Too many large requests at once for this tenant: {self.queue_limit} already "
            "wait for the gateway's checking process (large snippets are checked, and "
            "versions compared, one at a time, the tenants in turn)",
            retry_after_s=self.retry_after_s(tenant),
            queuePerTenant=self.queue_limit,
        )


class Unavailable(Exception):
    """No child process could be started here."""


class CpuProcess:
    """The child process (started on first use, again after it ends), one job at a time;
    ``call`` blocks, so it is called on a worker thread."""

    def __init__(
        self, *, cpu_limit_s: int = CPU_LIMIT_S, wall_limit_s: float = WALL_LIMIT_S
    ) -> None:
        self.cpu_limit_s, self.wall_limit_s = cpu_limit_s, wall_limit_s
        self._lock = threading.Lock()
        self._child: subprocess.Popen[bytes] | None = None
        self._owner = 0  # the pid that started the child (a fork must start its own)
        self.starts = 0
        self.answered = 0

    @property
    def pid(self) -> int | None:
        """The running child's pid (tests and benchmarks)."""
        child = self._child
        return None if child is None or child.poll() is not None else child.pid

    def call(self, job: str, args: Sequence[Any]) -> Any:
        """``job(*args)``'s value in the child, or the exception it answered, raised here;
        ``Unavailable`` when no child can be started."""
        request = pickle.dumps((job, tuple(args), self.cpu_limit_s), pickle.HIGHEST_PROTOCOL)
        with self._lock:
            child = self._running()
            stdin, stdout = child.stdin, child.stdout
            assert stdin is not None
            assert stdout is not None
            try:
                cpu_worker.write_frame(stdin, request)
                body = _read_frame(stdout.fileno(), time.monotonic() + self.wall_limit_s)
            except (OSError, EOFError, TimeoutError) as error:
                self._stop(child)
                raise self._stopped(error, child.returncode) from None
            self.answered += 1
        done, value = pickle.loads(body)
        if not done:
            raise value
        return value

    def close(self) -> None:
        """Stop the child (it would also end when this process ends)."""
        with self._lock:
            if self._child is not None:
                self._stop(self._child)

    def _stopped(self, error: Exception, returncode: int | None) -> PmlError:
        if isinstance(error, TimeoutError):
            return ExecutionFailed(
                f"The gateway's checking process took longer than {self.wall_limit_s:g} s "
                "on this request; it was stopped"
            )
        return ExecutionFailed(
            f"The gateway's checking process stopped on this request (exit status "
            f"{returncode}); nothing was run or stored"
        )

    def _running(self) -> subprocess.Popen[bytes]:
        child = self._child
        if child is not None and child.poll() is None and self._owner == os.getpid():
            return child
        try:
            child = subprocess.Popen(
                [sys.executable, "-m", cpu_worker.__name__],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                close_fds=True,
            )
        except OSError as error:
            raise Unavailable(str(error)) from error
        self._child, self._owner = child, os.getpid()
        self.starts += 1
        return child

    def _stop(self, child: subprocess.Popen[bytes]) -> None:
        if child.poll() is None:
            child.kill()
        child.wait()
        for stream in (child.stdin, child.stdout):
            if stream is not None:
                stream.close()
        self._child = None


def _read_frame(fd: int, deadline: float) -> bytes:
    header = _read_exactly(fd, cpu_worker.HEADER.size, deadline)
    (length,) = cpu_worker.HEADER.unpack(header)
    return _read_exactly(fd, length, deadline)


def _read_exactly(fd: int, size: int, deadline: float) -> bytes:
    parts: list[bytes] = []
    left = size
    while left:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            raise TimeoutError
        part = os.read(fd, min(left, 1 << 20))
        if not part:
            raise EOFError
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


PROCESS = CpuProcess()
atexit.register(PROCESS.close)
_lanes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, CpuLane] = weakref.WeakKeyDictionary()
_lanes_lock = threading.Lock()


def cpu_lane() -> CpuLane:
    """The lane of this process's event loop (its waiters belong to one loop)."""
    loop = asyncio.get_running_loop()
    with _lanes_lock:
        lane = _lanes.get(loop)
        if lane is None:
            lane = _lanes[loop] = CpuLane()
        return lane


def lane_tenant(tenant: Sequence[str] | None) -> Tenant:
    """``(org, project, user)`` of a tenant path (missing parts empty)."""
    org, project, user = (*(tenant or ()), "", "", "")[:3]
    return (org, project, user)


async def run(job: str, args: Sequence[Any], tenant: Sequence[str] | None) -> Any:
    """``job(*args)`` of ``pml.cpu_worker`` in ``tenant``'s turn: its value, or its error."""
    async with cpu_lane().turn(lane_tenant(tenant)):
        # Not abandoned on cancellation: the slot is held until the child has answered.
        return await anyio.to_thread.run_sync(_call_somewhere, job, args)


def _call_somewhere(job: str, args: Sequence[Any]) -> Any:
    try:
        return PROCESS.call(job, args)
    except Unavailable as error:
        logger.warning("heavy requests are worked in the gateway's own process: %s", error)
        return cpu_worker.JOBS[job](*args)  # no CPU limit here: it would be the gateway's
