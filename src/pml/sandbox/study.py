"""Large snippets checked in a child process, the tenants served in turn.

    analysis = await study.analysis(code, max_code_bytes, tenant)  # keeps its program too
    program = await study.program(code, max_code_bytes, tenant)    # what the sandbox runs

Before a snippet runs, PML analyses it (calls, parameters, secrets: ``pml.analysis``) and
builds the program the sandbox runs (``pml.sandbox.program``). Both are pure Python: for
a snippet of a few KB they take milliseconds and run where the request arrives, but for
~80 KB they took ~1 s of CPU (0.7 s analysis, 0.25 s program). On the event loop that was
every tenant's wait; on a worker thread, the interpreter lock made each other tenant's
request wait for it in 5 ms slices (a victim's p95 500-700 ms while one tenant sent
such snippets).

Snippets over ``INLINE_BYTES`` are therefore checked by one child process
(``pml.sandbox.study_worker``), both results in one round trip. The child runs at a lower
priority, stops a check after ``CPU_LIMIT_S`` of CPU (``LIMIT_EXCEEDED``) and within
``MEMORY_LIMIT_BYTES``. It starts on the first large snippet (~0.2 s) and again if it ends.
One check runs at a time: the waiting tenants take turns by org (``pml.fair_lane``), each
with at most ``QUEUE_PER_TENANT`` waiting (one more is ``BUSY`` with ``retryAfterS``).
Where no child process can be started, the checks run on a worker thread, as before.
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
from collections import OrderedDict
from typing import Any, Final

import anyio
import anyio.to_thread

from pml.analysis.snippet import SnippetAnalysis
from pml.errors import Busy, ExecutionFailed, PmlError
from pml.fair_lane import FairLane, Tenant
from pml.sandbox import study_worker
from pml.sandbox.base import TenantKey
from pml.sandbox.program import Program, build_program, cached_program, check_size, remember

logger = logging.getLogger(__name__)

INLINE_BYTES: Final = 4096
QUEUE_PER_TENANT: Final = 16
FIRST_STUDY_ESTIMATE_S: Final = 0.5
# The child stops a check after CPU_LIMIT_S of CPU; this bounds a check that cannot get
# the CPU (the machine saturated) or a child that stopped answering.
WALL_LIMIT_S: Final = 120.0
_REMEMBERED_FAILURES: Final = 64
CPU_LIMIT_S: Final = study_worker.CPU_LIMIT_S


class StudyLane(FairLane):
    """One check at a time, the waiting tenants served in turn."""

    def __init__(self, *, queue_limit: int = QUEUE_PER_TENANT) -> None:
        super().__init__(slots=1, queue_limit=queue_limit, first_estimate_s=FIRST_STUDY_ESTIMATE_S)

    def busy(self, tenant: Tenant) -> Busy:
        return Busy(
            f"Too many large snippets at once for this tenant: {self.queue_limit} already "
            f"wait to be checked (snippets over {INLINE_BYTES} bytes are checked one at a "
            "time, the tenants in turn)",
            retry_after_s=self.retry_after_s(tenant),
            queuePerTenant=self.queue_limit,
        )


class _Unavailable(Exception):
    """No child process could be started here."""


class StudyProcess:
    """The child process (started on first use, again after it ends), one request at a
    time; ``study`` blocks, so it is called on a worker thread."""

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

    def study(self, code: str, max_code_bytes: int) -> tuple[Any, Any]:
        """``(analysis, program)`` from the child (see ``study_worker.study``)."""
        request = pickle.dumps(
            (code, max_code_bytes, self.cpu_limit_s), protocol=pickle.HIGHEST_PROTOCOL
        )
        with self._lock:
            child = self._running()
            stdin, stdout = child.stdin, child.stdout
            assert stdin is not None
            assert stdout is not None
            try:
                study_worker.write_frame(stdin, request)
                body = _read_frame(stdout.fileno(), time.monotonic() + self.wall_limit_s)
            except (OSError, EOFError, TimeoutError) as error:
                self._stop(child)
                raise self._stopped(error, child.returncode) from None
            self.answered += 1
        return pickle.loads(body)

    def close(self) -> None:
        """Stop the child (it would also end when this process ends)."""
        with self._lock:
            if self._child is not None:
                self._stop(self._child)

    def _stopped(self, error: Exception, returncode: int | None) -> PmlError:
        if isinstance(error, TimeoutError):
            return ExecutionFailed(
                f"Checking this code took longer than {self.wall_limit_s:g} s; it was stopped"
            )
        return ExecutionFailed(
            f"The checker stopped while checking this code (exit status {returncode}); "
            "the code was not run"
        )

    def _running(self) -> subprocess.Popen[bytes]:
        child = self._child
        if child is not None and child.poll() is None and self._owner == os.getpid():
            return child
        try:
            child = subprocess.Popen(
                [sys.executable, "-m", study_worker.__name__],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                close_fds=True,
            )
        except OSError as error:
            raise _Unavailable(str(error)) from error
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
    header = _read_exactly(fd, study_worker.HEADER.size, deadline)
    (length,) = study_worker.HEADER.unpack(header)
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


PROCESS = StudyProcess()
atexit.register(PROCESS.close)
_failures: OrderedDict[str, PmlError] = OrderedDict()  # recent codes whose program failed
_lanes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, StudyLane] = (
    weakref.WeakKeyDictionary()
)
_lanes_lock = threading.Lock()


def study_lane() -> StudyLane:
    """The lane of this process's event loop (its waiters belong to one loop)."""
    loop = asyncio.get_running_loop()
    with _lanes_lock:
        lane = _lanes.get(loop)
        if lane is None:
            lane = _lanes[loop] = StudyLane()
        return lane


def lane_tenant(tenant: TenantKey | None) -> Tenant:
    """``(org, project, user)`` of a tenant path (missing parts empty)."""
    org, project, user = (*(tenant or ()), "", "", "")[:3]
    return (org, project, user)


def is_large(code: str) -> bool:
    return len(code) > INLINE_BYTES or len(code.encode("utf-8", "surrogatepass")) > INLINE_BYTES


async def analysis(code: str, max_code_bytes: int, tenant: TenantKey | None) -> SnippetAnalysis:
    """The analysis of a large ``code`` (checked against ``max_code_bytes``); its program is
    kept for the run that follows."""
    return _value((await _studied(code, max_code_bytes, tenant))[0])


async def program(code: str, max_code_bytes: int, tenant: TenantKey | None) -> Program:
    """``code``'s sandbox program: kept, built here (small), or built by the child."""
    check_size(code, max_code_bytes)
    found = cached_program(code)
    if found is not None:
        return found
    failed = _failures.get(code)
    if failed is not None:
        raise type(failed)(failed.message, **failed.data)
    if not is_large(code):
        return remember(code, build_program(code))
    size = len(code.encode("utf-8", "surrogatepass"))
    return _value((await _studied(code, size, tenant))[1])


async def _studied(code: str, max_code_bytes: int, tenant: TenantKey | None) -> tuple[Any, Any]:
    async with study_lane().turn(lane_tenant(tenant)):
        # Not abandoned on cancellation: the slot is held until the child has answered.
        analysis, built = await anyio.to_thread.run_sync(_study_somewhere, code, max_code_bytes)
    if isinstance(built, Program):
        remember(code, built)
    elif isinstance(built, PmlError):
        _failures[code] = built
        while len(_failures) > _REMEMBERED_FAILURES:
            _failures.popitem(last=False)
    return analysis, built


def _study_somewhere(code: str, max_code_bytes: int) -> tuple[Any, Any]:
    try:
        return PROCESS.study(code, max_code_bytes)
    except _Unavailable as error:
        logger.warning("large snippets are checked in this process: %s", error)
        return study_worker.study(code, max_code_bytes)


def _value(outcome: Any) -> Any:
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome
