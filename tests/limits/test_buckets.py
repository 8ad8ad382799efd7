"""Token buckets and the keyed limiter, on a fake clock: the arithmetic and the memory bound."""

from __future__ import annotations

import math

import pytest

from pml.limits.bucket import TokenBucket
from pml.limits.keyed import KeyedLimiter


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_a_full_bucket_gives_its_burst_then_says_how_long_to_wait() -> None:
    bucket = TokenBucket.full(rate=2.0, burst=3, now=0.0)
    assert [bucket.take(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take(0.0) == pytest.approx(0.5)  # 1 token at 2/s
    assert bucket.wait(0.25) == pytest.approx(0.25)
    assert bucket.take(0.5) == 0.0
    assert bucket.take(0.5) == pytest.approx(0.5)


def test_a_refused_take_takes_nothing_and_waiting_takes_nothing() -> None:
    bucket = TokenBucket.full(rate=1.0, burst=1, now=0.0)
    assert bucket.take(0.0) == 0.0
    for _ in range(100):
        assert bucket.take(0.0) == pytest.approx(1.0)
        assert bucket.wait(0.0) == pytest.approx(1.0)
    assert bucket.take(1.0) == 0.0


def test_refill_stops_at_the_burst() -> None:
    bucket = TokenBucket.full(rate=10.0, burst=5, now=0.0)
    for _ in range(5):
        bucket.take(0.0)
    assert not bucket.idle(0.1)
    assert bucket.idle(3600.0)
    assert bucket.tokens == 5
    assert [bucket.take(3600.0) for _ in range(6)][-1] == pytest.approx(0.1)


def test_a_clock_stepping_back_adds_no_tokens() -> None:
    bucket = TokenBucket.full(rate=1.0, burst=2, now=100.0)
    bucket.take(100.0)
    bucket.take(100.0)
    assert bucket.take(50.0) == pytest.approx(1.0)  # stamp kept at 100: nothing added
    assert bucket.take(100.5) == pytest.approx(0.5)
    assert bucket.take(101.0) == 0.0


def test_a_bucket_that_never_refills_states_a_day() -> None:
    bucket = TokenBucket.full(rate=0.0, burst=1, now=0.0)
    assert bucket.take(0.0) == 0.0
    assert bucket.take(10.0**9) == 86_400.0


def test_each_key_has_its_own_bucket() -> None:
    clock = FakeClock()
    limiter = KeyedLimiter(rate_per_s=1.0, burst=2, clock=clock)
    assert [limiter.take("a") for _ in range(2)] == [0.0, 0.0]
    assert limiter.take("a") == pytest.approx(1.0)
    assert limiter.take("b") == 0.0  # another key is unaffected
    clock.advance(1.0)
    assert limiter.take("a") == 0.0


def test_wait_reads_without_taking_and_knows_no_unseen_key() -> None:
    clock = FakeClock()
    limiter = KeyedLimiter(rate_per_s=0.5, burst=1, clock=clock)
    assert limiter.wait("nobody") == 0.0
    assert len(limiter) == 0  # asking creates nothing
    limiter.take("x")
    assert limiter.wait("x") == pytest.approx(2.0)
    assert limiter.wait("x") == pytest.approx(2.0)
    clock.advance(2.0)
    assert limiter.wait("x") == 0.0
    assert len(limiter) == 0  # full again: forgotten


def test_a_rate_of_zero_turns_the_limiter_off() -> None:
    limiter = KeyedLimiter(rate_per_s=0.0, burst=1, clock=FakeClock())
    assert not limiter.enabled
    assert all(limiter.take("k") == 0.0 for _ in range(10_000))
    assert len(limiter) == 0


def test_a_flood_of_distinct_keys_holds_at_most_max_keys_buckets() -> None:
    clock = FakeClock()
    limiter = KeyedLimiter(rate_per_s=1.0, burst=5, max_keys=100, clock=clock)
    for n in range(50_000):
        limiter.take(f"key-{n}")
        assert len(limiter) <= 100
    assert len(limiter) == 100


def test_idle_buckets_are_forgotten_as_new_keys_come() -> None:
    clock = FakeClock()
    limiter = KeyedLimiter(rate_per_s=1.0, burst=1, max_keys=10_000, clock=clock)
    for n in range(1000):
        limiter.take(f"old-{n}")
    clock.advance(10.0)  # every old bucket is full again
    for n in range(600):
        limiter.take(f"new-{n}")
    # two idle buckets forgotten per call: the 1000 old ones are gone after 500 new calls
    assert len(limiter) == 600


def test_a_busy_key_is_not_forgotten_while_it_is_empty() -> None:
    clock = FakeClock()
    limiter = KeyedLimiter(rate_per_s=0.001, burst=1, max_keys=1000, clock=clock)
    limiter.take("busy")
    for n in range(500):
        clock.advance(0.001)
        limiter.take(f"other-{n}")
    assert limiter.wait("busy") > 0  # still remembered, still limited


def test_hostile_settings_are_clamped() -> None:
    limiter = KeyedLimiter(rate_per_s=-5.0, burst=0, max_keys=0, clock=FakeClock())
    assert not limiter.enabled
    assert limiter.burst == 1
    assert limiter.max_keys == 1
    huge = KeyedLimiter(rate_per_s=math.inf, burst=1, clock=FakeClock())
    assert huge.take("k") == 0.0


@pytest.mark.parametrize("key", ["", "\x00", "ключ", "k" * 100_000, "🙂" * 10])
def test_any_text_is_a_key(key: str) -> None:
    limiter = KeyedLimiter(rate_per_s=1.0, burst=1, clock=FakeClock())
    assert limiter.take(key) == 0.0
    assert limiter.take(key) == pytest.approx(1.0)
