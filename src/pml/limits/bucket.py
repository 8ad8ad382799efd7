"""A token bucket: ``rate`` tokens a second, up to ``burst`` held, one taken per request.

    bucket = TokenBucket.full(rate=20.0, burst=100, now=clock())
    wait = bucket.take(clock())     # 0.0: taken; else the seconds until a token is free
    bucket.wait(clock())            # the same answer, nothing taken
    bucket.idle(clock())            # full again: as good as a new bucket (may be forgotten)

Time is whatever the caller's clock says (``time.monotonic`` in service, a fake in tests);
a clock that steps back never adds tokens. Plain arithmetic, O(1), no lock: the event loop
runs one request's check at a time.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class TokenBucket:
    """Tokens held now (``tokens``, as of ``stamp``), refilled at ``rate`` up to ``burst``."""

    rate: float
    burst: float
    tokens: float
    stamp: float

    @classmethod
    def full(cls, *, rate: float, burst: float, now: float) -> TokenBucket:
        """A bucket holding its whole burst at ``now``."""
        return cls(rate=rate, burst=burst, tokens=burst, stamp=now)

    def take(self, now: float) -> float:
        """Take a token: 0.0 when taken, else the seconds until one is free (nothing taken)."""
        wait = self.wait(now)
        if wait == 0.0:
            self.tokens -= 1.0
        return wait

    def wait(self, now: float) -> float:
        """The seconds until a token is free (0.0: one is now); nothing is taken."""
        self._refill(now)
        if self.tokens >= 1.0:
            return 0.0
        if self.rate <= 0.0:  # never refills: a day, the longest delay an error states
            return 86_400.0
        return (1.0 - self.tokens) / self.rate

    def idle(self, now: float) -> bool:
        """Whether the bucket is full again (forgetting it changes nothing)."""
        self._refill(now)
        return self.tokens >= self.burst

    def _refill(self, now: float) -> None:
        if now > self.stamp:
            self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now
