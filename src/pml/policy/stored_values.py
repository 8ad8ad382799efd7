"""Values read back from the audit log, bounded: every one is untrusted (SPEC §10.6).

    clip({"text": "x" * 10_000, "n": float("nan")})     # {"text": "xxx…", "n": None}
    text_of(42, 200)                                     # None: not a string
    number_of(True)                                      # None: a flag, not a number
    span_ms(first.ts, last.ts)                           # 1234.5

The audit table holds JSON written by the pipeline, but also whatever else reached it (an
older version, a hand-edited row, a hostile client's trace): a reader takes each field
only in the shape it expects and never raises. Strings are cut at ``MAX_TEXT`` characters,
containers at ``MAX_ITEMS`` entries, nesting at ``MAX_DEPTH`` levels.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, cast

MAX_TEXT = 1000
MAX_NAME = 200
MAX_ITEMS = 200
MAX_DEPTH = 6
LARGEST_INT = 2**63


def clip(value: object, depth: int = 0, text_limit: int = MAX_TEXT) -> Any:
    """``value`` as bounded JSON data: strings cut, containers shortened, nesting capped,
    non-finite numbers and other types replaced; never raises."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if -LARGEST_INT < value < LARGEST_INT else None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return cut(value, text_limit)
    if depth >= MAX_DEPTH:
        return "[…]"
    if isinstance(value, Mapping):
        items = list(cast("Mapping[object, object]", value).items())[:MAX_ITEMS]
        return {
            cut(key if isinstance(key, str) else type(key).__name__, MAX_NAME): clip(
                item, depth + 1, text_limit
            )
            for key, item in items
        }
    if isinstance(value, list | tuple):
        items = list(cast("Sequence[object]", value)[:MAX_ITEMS])
        return [clip(item, depth + 1, text_limit) for item in items]
    return f"[{type(value).__name__}]"


def cut(text: str, limit: int) -> str:
    """``text``, or its first ``limit - 1`` characters and an ellipsis."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def text_of(value: object, limit: int) -> str | None:
    """A non-empty string, cut to ``limit``; anything else is None."""
    return cut(value, limit) if isinstance(value, str) and value else None


def number_of(value: object) -> float | int | None:
    """A finite int or float of a sane size (never a bool); anything else is None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value if abs(value) < LARGEST_INT else None


def iso_utc(moment: object) -> str | None:
    """ISO 8601 in UTC, as ``AuditRow.to_dict`` writes it."""
    if not isinstance(moment, datetime):
        return None
    try:
        return moment.astimezone(UTC).isoformat()
    except (OverflowError, ValueError):  # at the ends of the calendar
        return moment.isoformat()


def count_of(value: object) -> int | None:
    """A count: an int from 0 (never a bool); anything else is None."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value < LARGEST_INT else None


def span_ms(start: object, end: object) -> float | None:
    """Milliseconds from ``start`` to ``end`` (None unless both are comparable times)."""
    if not isinstance(start, datetime) or not isinstance(end, datetime):
        return None
    try:
        return round((end - start).total_seconds() * 1000, 3)
    except (TypeError, OverflowError):  # naive and aware times mixed
        return None
