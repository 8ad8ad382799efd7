"""The child process that does the gateway's heavy pure-Python work: ``python -m pml.cpu_worker``.

It reads requests from stdin and writes answers to stdout, one frame each: a 4-byte
big-endian length, then a pickle. A request is ``(job, args, cpu_limit_s)``, ``job`` one of
``JOBS``; its answer is ``(True, value)`` or ``(False, exception)`` (``LIMIT_EXCEEDED``
past ``cpu_limit_s`` of CPU). It ends at the end of its input: when the gateway closes the
pipe or exits, however it exits. It imports only what its jobs need (~18 MB, 0.2 s), runs
at a lower priority than the gateway (the gateway's answers win the CPU), and holds at
most ``MEMORY_LIMIT_BYTES`` of address space. Only the gateway writes to it
(``pml.cpu_process``): the pickles it reads are its parent's.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import resource
import signal
import struct
import sys
from collections.abc import Callable, Sequence
from types import FrameType
from typing import IO, Any, BinaryIO, Final

from pml.analysis.snippet import analyze_snippet
from pml.errors import LimitExceeded, PmlError
from pml.registry.versions import unified_diff
from pml.sandbox.program import build_program

HEADER: Final = struct.Struct(">I")
MEMORY_LIMIT_BYTES: Final = 2 * 1024**3
NICENESS: Final = 10
# The CPU one request may take (the worst 100 KB snippet measured takes ~1.5 s to check).
CPU_LIMIT_S: Final = 10


class OutOfTime(BaseException):  # not caught by the jobs' own `except Exception`
    """Raised in a job when its CPU time is up (``SIGPROF``)."""


def study(code: str, max_code_bytes: int) -> tuple[Any, Any]:
    """``(analysis, program)`` of a snippet: each the value, or the ``PmlError`` raised."""
    return _outcome(analyze_snippet, code, max_code_bytes=max_code_bytes), _outcome(
        build_program, code
    )


def diffs(pairs: Sequence[tuple[str, str, str, str]]) -> list[str]:
    """``unified_diff(old, new, old_label, new_label)`` of each pair."""
    return [unified_diff(*pair) for pair in pairs]


JOBS: Final[dict[str, Callable[..., Any]]] = {"study": study, "diffs": diffs}


def too_long(cpu_limit_s: int) -> LimitExceeded:
    return LimitExceeded(
        f"This request took more than {cpu_limit_s} s of CPU to check or compare code: "
        "split the code into smaller snippets or capabilities",
        limit="check_cpu_s",
        max=cpu_limit_s,
    )


def _outcome(build: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return build(*args, **kwargs)
    except PmlError as error:
        return error
    except MemoryError:
        return LimitExceeded("Checking this code needs more memory than PML allows; split it")


def answer(job: str, args: Sequence[Any], cpu_limit_s: int) -> tuple[bool, Any]:
    """``(True, value)`` of one job, or ``(False, exception)``."""
    work = JOBS.get(job)
    if work is None:
        return False, RuntimeError(f"unknown job {job!r}")
    _limit_cpu(cpu_limit_s)
    try:
        return True, work(*args)
    except OutOfTime:
        return False, too_long(cpu_limit_s)
    except MemoryError:
        return False, LimitExceeded("This request needs more memory than PML allows")
    except Exception as error:  # noqa: BLE001 - a bug in a job: the gateway reports it
        return False, RuntimeError(f"{type(error).__name__}: {error}"[:2000])
    finally:
        _limit_cpu(None)


def read_frame(stream: BinaryIO) -> bytes | None:
    """The next frame's body, or None at the end of the input."""
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    (length,) = HEADER.unpack(header)
    body = stream.read(length)
    return body if len(body) == length else None


def write_frame(stream: IO[bytes], body: bytes) -> None:
    stream.write(HEADER.pack(len(body)) + body)
    stream.flush()


def serve(source: BinaryIO, sink: BinaryIO) -> None:
    """Answer requests until the input ends."""
    while (body := read_frame(source)) is not None:
        job, args, cpu_limit_s = pickle.loads(body)
        outcome = answer(job, args, cpu_limit_s)
        try:
            data = pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as error:  # noqa: BLE001 - e.g. an exception holding a frame
            data = pickle.dumps((False, RuntimeError(f"unpicklable answer: {error}")))
        write_frame(sink, data)


def _limit_cpu(seconds: int | None) -> None:
    """``SIGPROF`` (so ``OutOfTime``) once this process has used ``seconds`` more CPU; None:
    no limit (the process is waiting for its next request).

    A profiling timer counts from now. ``RLIMIT_CPU`` set to the CPU used so far plus
    ``seconds`` did not: the kernel checks it against CPU time sampled at each tick, which
    drifts above the precise time ``getrusage`` reports, so after some minutes of work a
    child on a busy machine refused ordinary jobs at once."""
    signal.setitimer(signal.ITIMER_PROF, float(seconds or 0))


def _out_of_time(signum: int, frame: FrameType | None) -> None:
    raise OutOfTime


def main() -> None:
    signal.signal(signal.SIGPROF, _out_of_time)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in a terminal is the gateway's
    os.nice(NICENESS)
    with contextlib.suppress(ValueError, OSError):  # a lower hard limit already holds
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    main()
