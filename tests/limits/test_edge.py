"""The edge's pieces: the source address, the 429 answer, and RequestLimits with its audit."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import pytest

from pml.errors import RateLimited
from pml.limits.addresses import peer_address
from pml.limits.edge import RequestLimits
from pml.limits.refusal import JSONRPC_RATE_LIMITED, retry_after_header, too_many_requests
from pml.registry.scope import Scope
from pml.sections_limits import LimitsSettings
from pml.telemetry.metrics import process_metrics

DEPLOYMENT = Scope("acme", "webapp", "ops")


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Recorder:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def emit(
        self,
        event: str,
        *,
        scope: Scope,
        details: Mapping[str, Any],
        decided_by: str | None = None,
        actor: str | None = None,
        request_id: str | None = None,
    ) -> None:
        self.events.append(
            {"event": event, "scope": scope, "details": dict(details), "actor": actor}
        )


@pytest.mark.parametrize(
    ("client", "expected"),
    [
        (("10.0.0.7", 1234), "10.0.0.7"),
        (("2001:db8::1", 443), "2001:db8::/64"),
        (("2001:db8::ffff:1", 443), "2001:db8::/64"),  # same /64: one address
        (("::ffff:192.0.2.5", 80), "192.0.2.5"),
        (("::1", 80), "::/64"),
        (None, "unknown"),
        ((), "unknown"),
        (("", 1), "unknown"),
        ((42, 1), "unknown"),
        (("testclient", 50000), "testclient"),
        (("x" * 10_000, 1), "x" * 64),
        (("ключ\x00", 1), "ключ\x00"),
    ],
)
def test_the_peer_address_is_the_socket_peer(client: Any, expected: str) -> None:
    assert peer_address({"client": client}) == expected


def test_forwarded_headers_are_not_read() -> None:
    scope = {
        "client": ("10.0.0.7", 1),
        "headers": [(b"x-forwarded-for", b"1.2.3.4"), (b"forwarded", b"for=5.6.7.8")],
    }
    assert peer_address(scope) == "10.0.0.7"


@pytest.mark.parametrize(
    ("seconds", "header"),
    [(0.0, "1"), (0.001, "1"), (1.0, "1"), (1.001, "2"), (29.5, "30"), (-3.0, "1")],
)
def test_retry_after_is_whole_seconds_rounded_up_at_least_one(seconds: float, header: str) -> None:
    assert retry_after_header(seconds) == header


def test_retry_after_of_odd_values() -> None:
    assert retry_after_header(math.nan) == "1"
    assert retry_after_header(math.inf) == "86400"


def test_an_mcp_request_gets_a_json_rpc_error_carrying_the_pml_error() -> None:
    response = too_many_requests("/mcp", RateLimited("slow down", retry_after_s=0.25, limit="x"))
    assert response.status_code == 429
    assert response.headers["retry-after"] == "1"
    body = json.loads(bytes(response.body))
    assert body == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": JSONRPC_RATE_LIMITED,
            "message": "slow down",
            "data": {
                "code": "RATE_LIMITED",
                "message": "slow down",
                "retryAfterS": 0.25,
                "limit": "x",
            },
        },
    }


@pytest.mark.parametrize("path", ["/api/capabilities", "/metrics", "/mcpx", "/"])
def test_other_paths_get_the_pml_error_shape(path: str) -> None:
    response = too_many_requests(path, RateLimited("slow down", retry_after_s=2.5))
    assert response.headers["retry-after"] == "3"
    body = json.loads(bytes(response.body))
    assert body == {"error": {"code": "RATE_LIMITED", "message": "slow down", "retryAfterS": 2.5}}


def _refusals(limit: str) -> float:
    registry = process_metrics().registry
    found = registry.get_sample_value("pml_rate_limit_refusals_total", {"limit": limit})
    return found or 0.0


def test_a_key_over_its_rate_is_refused_and_counted_and_another_key_is_not() -> None:
    clock = FakeClock()
    limits = RequestLimits(LimitsSettings(key_rate_per_s=2.0, key_burst=3), clock=clock)
    before = _refusals("api_key")
    assert [limits.key_refusal("k1") for _ in range(3)] == [None, None, None]
    refusal = limits.key_refusal("k1")
    assert refusal is not None
    assert refusal.code == "RATE_LIMITED"
    assert refusal.retry_after_s == pytest.approx(0.5)
    assert refusal.data["limit"] == "key_rate_per_s"
    assert limits.key_refusal("k2") is None
    assert _refusals("api_key") == before + 1
    clock.now += 0.5
    assert limits.key_refusal("k1") is None


def test_key_limits_off_refuse_nothing() -> None:
    limits = RequestLimits(LimitsSettings(key_rate_per_s=0), clock=FakeClock())
    assert all(limits.key_refusal("k") is None for _ in range(5000))


def test_failed_keys_use_up_the_address_then_everything_from_it_is_refused() -> None:
    clock = FakeClock()
    audit = Recorder()
    settings = LimitsSettings(auth_failures_per_minute=6.0, auth_failure_burst=3)
    limits = RequestLimits(settings, auditor=audit, audit_scope=DEPLOYMENT, clock=clock)
    before = _refusals("auth")
    for _ in range(3):
        assert limits.address_refusal("10.0.0.7") is None
        limits.key_failed("10.0.0.7")
    refusal = limits.address_refusal("10.0.0.7")
    assert refusal is not None
    assert refusal.retry_after_s == pytest.approx(10.0)  # 6 a minute: one every 10 s
    assert refusal.data["limit"] == "auth_failures_per_minute"
    assert limits.address_refusal("10.0.0.8") is None  # another address
    assert _refusals("auth") == before + 1
    assert len(audit.events) == 4  # three failures and one refusal; the log coalesces them
    assert {json.dumps(e["details"]) for e in audit.events} == {'{"address": "10.0.0.7"}'}
    assert {e["event"] for e in audit.events} == {"AUTH_FAILED"}
    assert {e["scope"] for e in audit.events} == {DEPLOYMENT}
    assert {e["actor"] for e in audit.events} == {"anonymous"}
    clock.now += 10.0
    assert limits.address_refusal("10.0.0.7") is None


def test_without_an_auditor_failures_are_still_limited() -> None:
    limits = RequestLimits(LimitsSettings(auth_failure_burst=1), clock=FakeClock())
    limits.key_failed("a")
    assert limits.address_refusal("a") is not None


@pytest.mark.parametrize(
    "proxies",
    [["127.0.0.1"], ["10.0.0.0/8", "::1", "2001:db8::/32"], ["*"], []],
)
def test_trusted_proxies_take_addresses_and_networks(proxies: list[str]) -> None:
    assert LimitsSettings(trusted_proxies=proxies).trusted_proxies == proxies


@pytest.mark.parametrize(
    "proxies",
    [
        ["proxy.example"],
        ["127.0.0.1; rm -rf /"],
        ["10.0.0.0/33"],
        [""],
        ["ключ"],
        ["1.2.3.4"] * 300,
    ],
)
def test_trusted_proxies_refuse_anything_else(proxies: list[str]) -> None:
    with pytest.raises(ValueError, match="trusted_proxies"):
        LimitsSettings(trusted_proxies=proxies)
