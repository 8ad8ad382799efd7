"""How a capability's last runs went: the signal that marks one that keeps failing.

    seen = Reliability.of(record.recent_outcomes, record.recent_runs, record.recent_latency_ms)
    seen.success_rate        # 0.3 (3 of its last 10 runs succeeded), None before any run
    seen.failing             # True: under FAILING_BELOW of at least MIN_RUNS recent runs

Each run shifts one bit into ``recent_outcomes`` (1 = success, the newest in the lowest
bit); ``recent_runs`` says how many bits count (at most ``WINDOW``). Batched writes shift
several bits at once (``shifted``), so the signal costs no read.

Only a run's own failures count against it (``counts_against``): an exception in its code,
a tool error, a timeout, a limit, an upstream server down, a tool it names gone. A run
refused before it started, or stopped by the caller's side (bad arguments, a policy or
permission denial, an approval to wait for, a full queue) says nothing about the capability.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

WINDOW: Final = 10  # runs remembered
MIN_RUNS: Final = 4  # fewer recent runs than this never mark a capability as failing
FAILING_BELOW: Final = 0.5  # success rate of the recent runs under which it is failing
LATENCY_WEIGHT: Final = 0.3  # weight of the newest run in the moving latency average
MASK: Final = (1 << WINDOW) - 1
MAX_LATENCY_MS: Final = 86_400_000.0  # a day: a longer (or non-finite) latency is cut to it
# The error codes of a run that failed by itself (SPEC §5): they count against the capability.
RUN_FAILURES: Final = frozenset(
    {
        "EXECUTION_FAILED",
        "TOOL_ERROR",
        "TIMEOUT",
        "LIMIT_EXCEEDED",
        "UPSTREAM_UNAVAILABLE",
        "UNKNOWN_TOOL",
    }
)


class RecentRuns(Protocol):
    """What carries the three columns (a ``CapabilityRecord``, a discovery row)."""

    @property
    def recent_outcomes(self) -> int: ...
    @property
    def recent_runs(self) -> int: ...
    @property
    def recent_latency_ms(self) -> float: ...


def counts_against(code: str | None) -> bool:
    """Whether a run that ended with error ``code`` (None: it succeeded) enters the recent
    runs of its capability (see module)."""
    return code is None or code in RUN_FAILURES


def clean_latency(value: object) -> float:
    """A latency fit to store: a finite number in ``[0, MAX_LATENCY_MS]`` (else 0)."""
    try:
        number = float(value)  # pyright: ignore[reportArgumentType]
    except (TypeError, ValueError, OverflowError):
        return 0.0
    if math.isnan(number):
        return 0.0
    return min(max(number, 0.0), MAX_LATENCY_MS)


@dataclass(frozen=True, slots=True)
class Reliability:
    """The recent runs of one capability, read from its three columns."""

    runs: int
    successes: int
    latency_ms: float

    @classmethod
    def of(cls, outcomes: int, runs: int, latency_ms: float) -> Reliability:
        runs = max(0, min(int(runs), WINDOW))
        window = int(outcomes) & ((1 << runs) - 1)
        return cls(runs, window.bit_count(), clean_latency(latency_ms))

    @classmethod
    def of_record(cls, record: RecentRuns) -> Reliability:
        """The signal of a record (or any row with the three columns)."""
        return cls.of(record.recent_outcomes, record.recent_runs, record.recent_latency_ms)

    @property
    def success_rate(self) -> float | None:
        """Share of the recent runs that succeeded; None before any run."""
        return round(self.successes / self.runs, 4) if self.runs else None

    @property
    def failing(self) -> bool:
        """Whether it keeps failing: under ``FAILING_BELOW`` of at least ``MIN_RUNS`` runs."""
        return self.runs >= MIN_RUNS and self.successes < FAILING_BELOW * self.runs

    def fields(self) -> dict[str, Any]:
        """The answer fields (``cap_list``, ``cap_lookup``, discovery results, status)."""
        fields: dict[str, Any] = {
            "recent_runs": self.runs,
            "recent_success_rate": self.success_rate,
            "recent_latency_ms": round(self.latency_ms, 1),
        }
        if self.failing:
            fields["failing"] = True
        return fields


def outcome_bits(outcomes: Sequence[bool]) -> tuple[int, int]:
    """``(bits, count)`` of runs in the order they happened (the last is the newest),
    at most ``WINDOW`` of them."""
    recent = list(outcomes)[-WINDOW:]
    bits = 0
    for success in recent:
        bits = (bits << 1) | int(success)
    return bits, len(recent)


def shifted(outcomes: int, runs: int, new_bits: int, new_count: int) -> tuple[int, int]:
    """The columns after ``new_count`` more runs (what the SQL update computes)."""
    new_count = min(new_count, WINDOW)
    return ((outcomes << new_count) | new_bits) & MASK, min(runs + new_count, WINDOW)


def moving_latency(current_ms: float, runs: int, batch_mean_ms: float, count: int) -> float:
    """The moving average after ``count`` runs averaging ``batch_mean_ms``."""
    if runs <= 0:
        return batch_mean_ms
    keep = (1 - LATENCY_WEIGHT) ** min(count, WINDOW)
    return current_ms * keep + batch_mean_ms * (1 - keep)
