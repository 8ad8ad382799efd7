"""Which orgs, projects and users are active: ran or waited for a sandbox worker lately.

    recent = RecentTenants(window_s=30.0)
    recent.touch(("acme", "webapp", "erwan"))      # a run asked for a worker, or ended
    recent.active_under(())                         # orgs active now: 1
    recent.active_under(("acme",))                  # acme's projects active now: 1

``pml.sandbox.shares.FairShares`` splits the pool between the orgs active now, each org's
part between its active projects, and so on. "Active" reaches back ``window_s``: an agent's
calls come a few seconds apart, and an org whose last run ended a moment ago must still find
its part free for its next one, not taken by a busy neighbour for the next 30 s.

A path prefix is remembered from the last time it was touched until ``window_s`` later; one
that still holds or waits for a worker then (``in_use``) is kept as if touched again. At
most ``max_remembered`` prefixes are kept (the least recently touched idle ones go first),
so memory follows the tenants of the last window, never everyone who ever ran.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

from pml.sandbox.base import TenantKey

ACTIVE_WINDOW_S: Final = 30.0
MAX_REMEMBERED: Final = 50_000


class RecentTenants:
    """Path prefixes touched within the last ``window_s`` (see the module)."""

    def __init__(
        self,
        *,
        window_s: float = ACTIVE_WINDOW_S,
        in_use: Callable[[TenantKey], bool] = lambda _prefix: False,
        clock: Callable[[], float] = time.monotonic,
        max_remembered: int = MAX_REMEMBERED,
    ) -> None:
        self.window_s = window_s
        self._in_use = in_use
        self._clock = clock
        self._max = max_remembered
        self._touched: OrderedDict[TenantKey, float] = OrderedDict()  # oldest first
        self._children: dict[TenantKey, set[str]] = {}  # a prefix → its active children

    @property
    def remembered(self) -> int:
        """Path prefixes remembered now."""
        return len(self._touched)

    def touch(self, tenant: TenantKey) -> None:
        """``tenant`` and every prefix of it are active from now."""
        now = self._clock()
        for depth in range(len(tenant), 0, -1):  # parents last: forgotten after children
            prefix = tenant[:depth]
            self._touched[prefix] = now
            self._touched.move_to_end(prefix)
            self._children.setdefault(prefix[:-1], set()).add(prefix[-1])
        self._forget(now)

    def active_under(self, parent: TenantKey) -> int:
        """How many children of ``parent`` (``()``: orgs) are active now."""
        self._forget(self._clock())
        return len(self._children.get(parent, ()))

    def next_change_in_s(self) -> float | None:
        """Seconds until the oldest prefix may be forgotten (None: nothing remembered)."""
        if not self._touched:
            return None
        oldest = next(iter(self._touched.values()))
        return max(oldest + self.window_s - self._clock(), 0.0)

    def _forget(self, now: float) -> None:
        """Drop what is past the window (or beyond the bound) and idle; keep what is in use."""
        for _ in range(len(self._touched)):
            prefix, at = next(iter(self._touched.items()))
            past = now - at > self.window_s
            if not past and len(self._touched) <= self._max:
                return
            if self._in_use(prefix):
                self._touched[prefix] = now
                self._touched.move_to_end(prefix)
                continue
            del self._touched[prefix]
            siblings = self._children[prefix[:-1]]
            siblings.discard(prefix[-1])
            if not siblings:
                del self._children[prefix[:-1]]
