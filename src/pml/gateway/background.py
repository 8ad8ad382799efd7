"""A task that runs beside a block and ends with it.

    async with in_background(purge_forever):
        ...                       # purge_forever runs until this block ends

Unlike a bare task group, an exception of the block is raised as it is, not wrapped in an
``ExceptionGroup``, so callers catch what they expect.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import anyio


@asynccontextmanager
async def in_background(task: Callable[[], Coroutine[Any, Any, None]]) -> AsyncGenerator[None]:
    """Run ``task`` while the block runs; cancel it when the block ends."""
    raised: BaseException | None = None
    async with anyio.create_task_group() as group:
        group.start_soon(task)
        try:
            yield
        except BaseException as error:  # noqa: BLE001 - re-raised below, unwrapped
            raised = error
        finally:
            group.cancel_scope.cancel()
    if raised is not None:
        raise raised
