"""Hand memory that C code freed back to the system.

    release_freed_memory()   # after building a model, or after a huge value was dropped

glibc keeps freed small blocks for the life of a process; after a burst (an embedding
session built, a catalog embedded, a huge exception message dropped) that is tens of MB the
gateway never uses again. ``malloc_trim(0)`` returns them. A no-op outside glibc (macOS,
musl).
"""

from __future__ import annotations

import ctypes
import functools
import sys
from typing import Any


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
