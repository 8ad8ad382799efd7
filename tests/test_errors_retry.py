"""BUSY and RATE_LIMITED carry ``retryAfterS``, also when read back from an error result."""

from __future__ import annotations

from typing import Any

import pytest

from pml.errors import Busy, RateLimited, error_from_dict


@pytest.mark.parametrize("cls", [Busy, RateLimited])
def test_retry_after_is_carried_and_read_back(cls: type[Busy] | type[RateLimited]) -> None:
    error = cls("wait a little", retry_after_s=0.25)
    assert error.to_dict() == {"code": error.code, "message": "wait a little", "retryAfterS": 0.25}
    again = error_from_dict(error.to_dict())
    assert type(again) is cls
    assert again.to_dict() == error.to_dict()


@pytest.mark.parametrize(
    ("carried", "expected"),
    [
        ("soon", 1.0),
        (None, 1.0),
        (True, 1.0),
        (float("nan"), 1.0),
        (-5, 0.0),
        (10**12, 86_400.0),
        (2, 2.0),
    ],
)
def test_hostile_retry_after_read_back_is_a_sane_delay(carried: Any, expected: float) -> None:
    again = error_from_dict({"code": "RATE_LIMITED", "message": "m", "retryAfterS": carried})
    assert isinstance(again, RateLimited)
    assert again.retry_after_s == expected
    assert again.to_dict()["retryAfterS"] == expected
