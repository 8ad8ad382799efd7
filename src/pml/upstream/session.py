"""What one supervisor run of an upstream session holds, and what the pool lends it.

A ``Run`` is one start attempt and, once started, the open session that calls use; a newer
run replaces it after an idle stop or a crash. ``backoff_delay`` spaces restart attempts:

    >>> 0.375 <= backoff_delay(1) <= 0.625 and 15 <= backoff_delay(7) <= 30
    True
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Final

import anyio
import mcp_types
from mcp import Client

from pml.upstream.events import ClientCallbacks
from pml.upstream.transport import StderrTail

BACKOFF_BASE_S: Final = 0.5
BACKOFF_MAX_S: Final = 30.0
BACKOFF_JITTER: Final = 0.25


@dataclass(frozen=True, slots=True)
class ConnectionHooks:
    """What a connection needs from its pool."""

    spawn: Callable[[Callable[[], Coroutine[Any, Any, None]]], None]
    status_changed: Callable[[str], None]
    catalog_fetched: Callable[[str, Sequence[mcp_types.Tool]], Awaitable[tuple[str, ...]]]
    tools_changed: Callable[[str], Awaitable[None]]
    # What the session sends besides results (``upstream.events``): the pool's relay, if any.
    notification: Callable[[str, mcp_types.ServerNotification], Awaitable[None]]
    client_callbacks: Callable[[str], ClientCallbacks]


@dataclass(frozen=True, slots=True)
class PoolChanges:
    """What a ``reconfigure`` did, by server name (``failed``: started, and failed)."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    restarted: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.restarted)


def backoff_delay(failures: int) -> float:
    """Seconds before restart attempt ``failures`` (1, 2, ...): doubling, jittered, capped."""
    base = BACKOFF_BASE_S * 2 ** min(failures - 1, 16)
    return min(BACKOFF_MAX_S, base * random.uniform(1 - BACKOFF_JITTER, 1 + BACKOFF_JITTER))


class Run:
    """One supervisor run: a start attempt and, once started, its open session."""

    def __init__(self, server: str) -> None:
        self.settled = anyio.Event()
        self.wake = anyio.Event()
        self.scope: anyio.CancelScope | None = None
        self.stderr = StderrTail(server)
        self.session: Client | None = None
        self.tools: dict[str, mcp_types.Tool] = {}
        self.started = False
        self.stop = False
        self.refresh = False
        self.lost = False  # the connection ended under us
        self.closing = False  # calls may no longer use it
        self.idle = False  # we are closing it because it was idle
        self.failed = False
        self.done = False
        self.error: str | None = None

    @property
    def client(self) -> Client:
        """The open client (only valid on a run handed out by ``acquire``)."""
        if self.session is None:
            raise RuntimeError("the session is closed")
        return self.session

    def usable(self) -> bool:
        """True while calls may use this session."""
        return self.session is not None and not (self.lost or self.closing or self.stop)
