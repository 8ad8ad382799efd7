"""The audit events waiting for the writer: bounded, and fair between orgs when full.

    queue = FairQueue(limit=10_000, org_of=lambda entry: entry.org)
    dropped = queue.push(entry)     # None, or the event dropped to make room
    batch = queue.drain()           # every waiting event, in the order they came

A shared gateway audits every tenant into one queue that a writer empties every 0.2 s. When
the database or the disk is slow, the queue fills. Dropping the oldest event overall let one
org's flood (thousands of denied calls, failing runs, bad keys) push every other org's
events out. Here a full queue makes room by dropping the oldest event of the org with the
most events waiting (ties: the one whose oldest is oldest): a flood loses its own events
first, and an org with few waiting loses none while another has more. Each org's events
stay in order, and ``drain`` returns all of them in the order they came.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

_T = TypeVar("_T")


class FairQueue(Generic[_T]):
    """At most ``limit`` items; a full queue drops from the org with the most (see module)."""

    def __init__(self, limit: int, org_of: Callable[[_T], str]) -> None:
        self.limit = max(1, limit)
        self._org_of = org_of
        self._orgs: dict[str, deque[tuple[int, _T]]] = {}
        self._arrivals = 0
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def waiting_for(self, org: str) -> int:
        """Items of ``org`` waiting now."""
        return len(self._orgs.get(org, ()))

    def push(self, item: _T) -> _T | None:
        """Queue ``item``; when full, first drop (and return) the fairest item to lose."""
        dropped: _T | None = None
        if self._size >= self.limit:
            fullest = max(
                self._orgs, key=lambda org: (len(self._orgs[org]), -self._orgs[org][0][0])
            )
            items = self._orgs[fullest]
            dropped = items.popleft()[1]
            if not items:
                del self._orgs[fullest]
            self._size -= 1
        self._arrivals += 1
        self._orgs.setdefault(self._org_of(item), deque()).append((self._arrivals, item))
        self._size += 1
        return dropped

    def drain(self) -> list[_T]:
        """Every item waiting, in the order they came; the queue is empty afterwards."""
        merged = heapq.merge(*self._orgs.values(), key=lambda pair: pair[0])
        items = [item for _, item in merged]
        self._orgs.clear()
        self._size = 0
        return items
