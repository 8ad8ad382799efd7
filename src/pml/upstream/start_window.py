"""The start window: how long listings wait for upstream servers still starting.

The gateway answers ``initialize`` at once and starts its upstream servers in the
background. A listing (``tools/list`` with pass-through tools, ``pml_discover``) asked for
in the first ``[upstream] list_wait_s`` seconds waits for servers still starting, until the
window closes; later, it answers with what has started, and servers that join afterwards
arrive with ``notifications/tools/list_changed``.

    window = StartWindow(pool, wait_s=2.0)    # opened now, or at opened_at (process start)
    await window.wait()                       # returns at once once the window has closed
    tools = await window.list_tools()         # waits, then lists
"""

from __future__ import annotations

from collections.abc import Callable

import anyio

from pml.upstream.base import UpstreamPool, UpstreamTool


class StartWindow:
    """Waits for starting servers until ``wait_s`` after it was opened (a ``ToolSource``)."""

    def __init__(
        self,
        pool: UpstreamPool,
        wait_s: float,
        *,
        opened_at: float | None = None,
        clock: Callable[[], float] = anyio.current_time,
    ) -> None:
        self._pool = pool
        self._clock = clock
        self._closes_at = (clock() if opened_at is None else opened_at) + max(0.0, wait_s)
        self._closed = wait_s <= 0

    async def wait(self) -> None:
        """Wait for servers still starting, at most until the window closes."""
        if self._closed:
            return
        left = self._closes_at - self._clock()
        if left > 0:
            await self._pool.settled(left)
        self._closed = True  # every server settled, or the time is up: never wait again

    async def list_tools(self) -> list[UpstreamTool]:
        """The pool's tools, once the servers still starting have settled or the window closed."""
        await self.wait()
        return await self._pool.list_tools()
