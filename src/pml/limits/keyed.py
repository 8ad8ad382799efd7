"""One token bucket per key (an API key's id, a source address), bounded in memory.

    limiter = KeyedLimiter(rate_per_s=20.0, burst=100, max_keys=10_000)
    wait = limiter.take("key-id")   # 0.0: go; else the seconds to wait (a 429's Retry-After)
    limiter.wait("10.0.0.7")        # the same, nothing taken (an unknown key: 0.0)

Buckets are kept least recently used first. Each call forgets the oldest buckets that are
full again (idle: a new bucket would be the same), and beyond ``max_keys`` the least
recently used one, so a flood of distinct keys holds at most ``max_keys`` buckets. Every
operation is O(1) (amortised) and synchronous: nothing is awaited, so no lock is needed on
the event loop. A ``rate_per_s`` of 0 turns the limiter off (``take`` always answers 0.0).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

from pml.limits.bucket import TokenBucket

Clock = Callable[[], float]
DEFAULT_MAX_KEYS: Final = 10_000
# Idle buckets forgotten per call at most: two per call outpace the one a call can add.
EVICT_PER_CALL: Final = 2


class KeyedLimiter:
    """A token bucket per key (see the module)."""

    def __init__(
        self,
        *,
        rate_per_s: float,
        burst: int,
        max_keys: int = DEFAULT_MAX_KEYS,
        clock: Clock = time.monotonic,
    ) -> None:
        self.rate_per_s = max(0.0, float(rate_per_s))
        self.burst = max(1, int(burst))
        self.max_keys = max(1, int(max_keys))
        self._clock = clock
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()

    @property
    def enabled(self) -> bool:
        """Whether the limiter refuses anything (a rate of 0 means off)."""
        return self.rate_per_s > 0.0

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, key: str) -> float:
        """Take one of ``key``'s tokens: 0.0 when taken, else the seconds until one is free."""
        if not self.enabled:
            return 0.0
        now = self._clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = TokenBucket.full(rate=self.rate_per_s, burst=self.burst, now=now)
            self._buckets[key] = bucket
        else:
            self._buckets.move_to_end(key)
        wait = bucket.take(now)
        self._evict(now)
        return wait

    def wait(self, key: str) -> float:
        """The seconds until ``key`` has a token (0.0: it has one, or no bucket yet)."""
        if not self.enabled:
            return 0.0
        bucket = self._buckets.get(key)
        if bucket is None:
            return 0.0
        now = self._clock()
        wait = bucket.wait(now)
        if wait == 0.0 and bucket.idle(now):
            del self._buckets[key]
        return wait

    def _evict(self, now: float) -> None:
        """Forget the oldest idle buckets, then the least recently used beyond ``max_keys``."""
        for _ in range(EVICT_PER_CALL):
            oldest = next(iter(self._buckets.items()), None)
            if oldest is None or not oldest[1].idle(now):
                break
            del self._buckets[oldest[0]]
        while len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)
