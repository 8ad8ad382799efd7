"""Hand memory that C code freed back to the system.

    release_freed_memory()   # after building a model, or after a huge value was dropped
    await release_periodically()   # a long-running gateway: every minute, until cancelled

glibc keeps freed small blocks for the life of a process; after a burst (an embedding
session built, a catalog embedded, a huge exception message dropped) that is tens of MB the
gateway never uses again. ``malloc_trim(0)`` returns them. A no-op outside glibc (macOS,
musl).

A gateway that serves for days frees memory all the time, and glibc hands little of it
back: in soaks the resident size of a busy HTTP gateway kept rising by 1-2 MB every 10
minutes after warm-up while the Python objects it held stayed flat, and one ``malloc_trim``
returned ~25 MB (docs/performance.md). So a gateway trims every ``RELEASE_INTERVAL_S`` (in
a worker thread: it walks the heap, ~10-25 ms for a few hundred MB).
"""

from __future__ import annotations

import ctypes
import functools
import sys
from typing import Any, Final

import anyio

RELEASE_INTERVAL_S: Final = 60.0


def release_freed_memory() -> None:
    """Return freed heap memory to the system (glibc's ``malloc_trim``; elsewhere nothing)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None).malloc_trim  # absent outside glibc (musl)
    except (OSError, AttributeError):
        return None


async def release_periodically(interval_s: float = RELEASE_INTERVAL_S) -> None:
    """Release freed memory every ``interval_s``, until cancelled (returns at once outside
    glibc, where there is nothing to do)."""
    if _malloc_trim() is None:
        return
    while True:
        await anyio.sleep(interval_s)
        await anyio.to_thread.run_sync(release_freed_memory)
