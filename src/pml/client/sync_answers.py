"""Reading the trace server's answers, and when to send again (``pml connect``'s syncer).

    backoff_delay(3, base_s=0.5, max_s=60.0, rng=random.Random())   # full jitter
    parse_retry_after("120") == 120.0         # or an HTTP-date; None when unusable
    results_of(response.json())               # [{"traceId", "status", ...}, ...] or None

Every reader takes whatever the server (or a proxy in front of it) sent and never raises.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, cast

import httpx


def backoff_delay(attempt: int, *, base_s: float, max_s: float, rng: random.Random) -> float:
    """Full-jitter backoff: uniform in [0, min(max_s, base_s * 2**attempt)]."""
    ceiling = min(max_s, base_s * 2.0 ** min(max(attempt, 0), 64))
    return rng.uniform(0.0, max(0.0, ceiling))


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (seconds or HTTP-date); None if unusable."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        try:
            when = parsedate_to_datetime(value.strip())
        except (TypeError, ValueError, IndexError):
            return None
        when = when if when.tzinfo is not None else when.replace(tzinfo=UTC)
        return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def seconds_or(value: object, default: float) -> float:
    """A server's ``retryAfterS`` when it is a sane number of seconds, else ``default``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    return float(value) if math.isfinite(value) and value >= 0 else default


def body_of(response: httpx.Response) -> object:
    try:
        return response.json()
    except ValueError:
        return None


def describe(response: httpx.Response | str) -> str:
    """``HTTP <status>: <the server's error message>``, for logs."""
    if isinstance(response, str):
        return response
    body, message = body_of(response), ""
    if isinstance(body, Mapping):
        error = cast(Mapping[str, object], body).get("error")
        if isinstance(error, Mapping):
            message = str(cast(Mapping[str, object], error).get("message", ""))
    return f"HTTP {response.status_code}: {message[:200]}".rstrip(": ")


def results_of(body: object) -> list[Mapping[str, Any]] | None:
    results = cast(Mapping[str, object], body).get("results") if isinstance(body, Mapping) else None
    if not isinstance(results, list):
        return None
    # a malformed entry keeps its place: answers are matched to traces by position first
    items = cast(list[object], results)
    return [cast(Mapping[str, Any], item) if isinstance(item, Mapping) else {} for item in items]
