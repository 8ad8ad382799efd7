"""``[limits] sessions_per_key`` and ``sessions_per_org``: hostile values are a clear
``CONFIG_ERROR`` naming the key, from the config file and from the environment; the manager
refuses a cap below 1 per key, below 0 per organisation."""

from __future__ import annotations

from pathlib import Path

import pytest

from pml.config import load_settings
from pml.errors import ConfigError
from pml.gateway.session_caps import CappedSessionManager
from pml.sections_limits import LimitsSettings


@pytest.mark.parametrize(
    ("written", "why"),
    [
        ("0", "greater than or equal to 1"),
        ("-1", "greater than or equal to 1"),
        ("-9223372036854775808", "greater than or equal to 1"),
        ("10001", "less than or equal to 10000"),
        ("9223372036854775807", "less than or equal to 10000"),
        ("3.5", "valid integer"),
        ("inf", "finite number"),
        ("nan", "finite number"),
        ("true", "not True"),
        ('"lots"', "valid integer"),
        ('""', "valid integer"),
        ('"64 sessions"', "valid integer"),
        ("[3]", "valid integer"),
        ("{ n = 3 }", "valid integer"),
    ],
)
def test_a_hostile_sessions_per_key_in_the_file_is_a_config_error_naming_it(
    tmp_path: Path, written: str, why: str
) -> None:
    config = tmp_path / "pml.toml"
    config.write_text(f"[limits]\nsessions_per_key = {written}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        load_settings(config, environ={}, cwd=tmp_path)
    assert "limits.sessions_per_key" in raised.value.message
    assert why in raised.value.message
    assert raised.value.code == "CONFIG_ERROR"


@pytest.mark.parametrize("value", ["0", "-5", "lots", "", "1e3", "99999999999999999999999"])
def test_a_hostile_sessions_per_key_in_the_environment_is_a_config_error(
    tmp_path: Path, value: str
) -> None:
    environ = {"PML_LIMITS__SESSIONS_PER_KEY": value}
    with pytest.raises(ConfigError) as raised:
        load_settings(environ=environ, cwd=tmp_path)
    assert "sessions_per_key" in raised.value.message
    assert raised.value.message.startswith("environment")


def test_sessions_per_key_defaults_to_64_and_is_read_from_the_environment(
    tmp_path: Path,
) -> None:
    assert load_settings(environ={}, cwd=tmp_path).limits.sessions_per_key == 64
    environ = {"PML_LIMITS__SESSIONS_PER_KEY": "8"}
    assert load_settings(environ=environ, cwd=tmp_path).limits.sessions_per_key == 8
    assert LimitsSettings(sessions_per_key=10_000).sessions_per_key == 10_000


@pytest.mark.parametrize("cap", [0, -1, True])
def test_the_session_manager_refuses_a_cap_below_one(cap: int) -> None:
    with pytest.raises(ValueError, match="sessions_per_key must be at least 1"):
        CappedSessionManager(object(), sessions_per_key=cap)


@pytest.mark.parametrize(
    ("written", "why"),
    [
        ("-1", "greater than or equal to 0"),
        ("10001", "less than or equal to 10000"),
        ("2.5", "valid integer"),
        ("nan", "finite number"),
        ("false", "not False"),
        ('"all"', "valid integer"),
        ("'0; DROP TABLE mcp_sessions'", "valid integer"),
        ('"\u00e9\u00e9"', "valid integer"),
        ("[1, 2]", "valid integer"),
    ],
)
def test_a_hostile_sessions_per_org_in_the_file_is_a_config_error_naming_it(
    tmp_path: Path, written: str, why: str
) -> None:
    config = tmp_path / "pml.toml"
    config.write_text(f"[limits]\nsessions_per_org = {written}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        load_settings(config, environ={}, cwd=tmp_path)
    assert "limits.sessions_per_org" in raised.value.message
    assert why in raised.value.message


def test_sessions_per_org_defaults_to_2500_and_0_turns_it_off(tmp_path: Path) -> None:
    assert load_settings(environ={}, cwd=tmp_path).limits.sessions_per_org == 2_500
    environ = {"PML_LIMITS__SESSIONS_PER_ORG": "0"}
    assert load_settings(environ=environ, cwd=tmp_path).limits.sessions_per_org == 0
    with pytest.raises(ConfigError):
        load_settings(environ={"PML_LIMITS__SESSIONS_PER_ORG": "-3"}, cwd=tmp_path)


@pytest.mark.parametrize("cap", [-1, True])
def test_the_session_manager_refuses_an_org_cap_below_zero(cap: int) -> None:
    with pytest.raises(ValueError, match="sessions_per_org must be 0 or more"):
        CappedSessionManager(object(), sessions_per_org=cap)
