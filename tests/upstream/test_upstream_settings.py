"""The ``[upstream]`` settings: timeouts with defaults, all positive, no unknown keys."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from pml.config import UpstreamSettings, load_settings
from pml.errors import ConfigError


def test_upstream_timeouts_default_to_a_minute_half_a_minute_and_five_minutes() -> None:
    settings = load_settings(environ={}, cwd=Path("/nonexistent"))
    assert settings.upstream == UpstreamSettings(
        call_timeout_s=60, start_timeout_s=30, idle_timeout_s=300
    )


def test_upstream_timeouts_come_from_the_environment() -> None:
    environ = {"PML_UPSTREAM__CALL_TIMEOUT_S": "2.5"}
    assert load_settings(environ=environ, cwd=Path("/nonexistent")).upstream.call_timeout_s == 2.5


@pytest.mark.parametrize("field", ["call_timeout_s", "start_timeout_s", "idle_timeout_s"])
def test_a_timeout_must_be_positive(field: str) -> None:
    with pytest.raises(ValidationError, match="greater than 0"):
        UpstreamSettings.model_validate({field: 0})


def test_an_unknown_upstream_key_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"upstream\.retries: unknown key"):
        load_settings(environ={"PML_UPSTREAM__RETRIES": "3"}, cwd=Path("/nonexistent"))
