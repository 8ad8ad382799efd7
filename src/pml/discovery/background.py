"""Background embedding on one thread of lower CPU priority.

    vectors = await embed_in_background(embedder.embed, texts)   # the index, the intents

Indexing new tools and capabilities and comparing new intents can wait; answers cannot. On
a loaded machine these batches competed for the CPU with the event loop that answers calls
(a stream of new code embeds one text per new capability). They run here, one at a time, on
a thread whose nice value is ``NICE`` above the process's (Linux, where each thread has its
own): when the CPU is free they run at full speed, when it is not the answers go first. A
query's own embedding (``pml_discover``) does not come here. Elsewhere the thread keeps the
process's priority (``setpriority`` names a process, not a thread, outside Linux).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Final, TypeVar

logger = logging.getLogger(__name__)

NICE: Final = 10  # CFS gives a nice-10 thread about a tenth of a contended core

_T = TypeVar("_T")
_lock = threading.Lock()
_executor: concurrent.futures.ThreadPoolExecutor | None = None


async def embed_in_background(work: Callable[..., _T], *args: object) -> _T:
    """``work(*args)`` on the background thread; its result, or its exception."""
    return await asyncio.get_running_loop().run_in_executor(_background(), work, *args)


def _background() -> concurrent.futures.ThreadPoolExecutor:
    global _executor
    with _lock:
        if _executor is None:
            _executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="pml-background", initializer=lower_priority
            )
        return _executor


def lower_priority() -> None:
    """Raise the calling thread's nice value by ``NICE`` (Linux only; never fails)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        thread = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, thread, os.getpriority(os.PRIO_PROCESS, thread) + NICE)
    except OSError as error:  # a sandbox forbidding it: the work runs all the same
        logger.debug("background thread keeps its priority: %s", error)
