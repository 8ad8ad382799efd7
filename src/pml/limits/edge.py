"""The rate limits of the HTTP edge, applied by the API-key middleware (``pml.web.auth``).

    limits = RequestLimits(settings.limits, auditor=audit_log, audit_scope=deployment_scope)
    limits.address_refusal(address)     # a RateLimited while the address failed too often
    limits.key_failed(address)          # a failed key: a token of the address, AUTH_FAILED
    limits.key_refusal(key_id)          # a RateLimited when the key is over its rate

Two limits, each a token bucket per key (``KeyedLimiter``), per process:

- every request with a valid API key takes a token of that key (``key_rate_per_s`` a
  second, ``key_burst`` at once; 0 turns it off); over it: ``RATE_LIMITED``;
- every failed key (missing, malformed, unknown, revoked) takes a token of its source
  address (``auth_failures_per_minute``, ``auth_failure_burst``); while that address has
  none left, all its requests are refused before any key is checked (a brute force learns
  nothing more), while other addresses are served as before.

Each failed key and each request refused for its address is an ``AUTH_FAILED`` audit event
of the deployment's scope (``[scope]`` org and project: an unknown key belongs to no one
else), ``{"address": ...}`` with actor ``anonymous``; the audit log coalesces an
address's events within ``[audit] coalesce_window_s`` into one, then one more with
``repeated``. The key itself is never recorded. Refusals are counted in
``pml_rate_limit_refusals_total{limit="api_key"|"auth"}``.
"""

from __future__ import annotations

import time
from typing import Final

from pml.errors import RateLimited
from pml.limits.keyed import DEFAULT_MAX_KEYS, Clock, KeyedLimiter
from pml.policy.model import Auditor
from pml.registry.scope import Scope
from pml.sections_limits import LimitsSettings
from pml.telemetry.metrics import count_rate_limited

AUTH_FAILED: Final = "AUTH_FAILED"
AUDIT_ACTOR: Final = "anonymous"
DECIDED_BY: Final = "auth:api_key"
KEY_LIMIT: Final = "api_key"
ADDRESS_LIMIT: Final = "auth"


class RequestLimits:
    """Per-key and per-address token buckets, with their audit and metrics (see the module)."""

    def __init__(
        self,
        settings: LimitsSettings,
        *,
        auditor: Auditor | None = None,
        audit_scope: Scope | None = None,
        clock: Clock = time.monotonic,
        max_keys: int = DEFAULT_MAX_KEYS,
    ) -> None:
        self.settings = settings
        self.keys = KeyedLimiter(
            rate_per_s=settings.key_rate_per_s,
            burst=settings.key_burst,
            max_keys=max_keys,
            clock=clock,
        )
        self.addresses = KeyedLimiter(
            rate_per_s=settings.auth_failures_per_minute / 60.0,
            burst=settings.auth_failure_burst,
            max_keys=max_keys,
            clock=clock,
        )
        self._auditor = auditor
        self._audit_scope = audit_scope

    def address_refusal(self, address: str) -> RateLimited | None:
        """The refusal of a request from ``address`` while it has failed too often."""
        wait = self.addresses.wait(address)
        if wait == 0.0:
            return None
        count_rate_limited(ADDRESS_LIMIT)
        self._audit(address)
        per_minute = f"{self.settings.auth_failures_per_minute:g}"
        return RateLimited(
            f"Too many failed API keys from this address (more than {per_minute} a minute "
            f"after a burst of {self.settings.auth_failure_burst}): retry in "
            f"{wait:.1f} s with a valid key",
            retry_after_s=wait,
            limit="auth_failures_per_minute",
        )

    def key_failed(self, address: str) -> None:
        """A failed key from ``address``: one of its tokens taken, one ``AUTH_FAILED``."""
        self.addresses.take(address)
        self._audit(address)

    def key_refusal(self, key: str) -> RateLimited | None:
        """The refusal of a request with the valid key ``key`` (its id) over its rate."""
        wait = self.keys.take(key)
        if wait == 0.0:
            return None
        count_rate_limited(KEY_LIMIT)
        rate = f"{self.settings.key_rate_per_s:g}"
        return RateLimited(
            f"This API key is over its rate limit ({rate} requests a second after a burst "
            f"of {self.settings.key_burst}): retry in {wait:.2f} s",
            retry_after_s=wait,
            limit="key_rate_per_s",
        )

    def _audit(self, address: str) -> None:
        if self._auditor is None or self._audit_scope is None:
            return
        self._auditor.emit(
            AUTH_FAILED,
            scope=self._audit_scope,
            details={"address": address},
            decided_by=DECIDED_BY,
            actor=AUDIT_ACTOR,
        )
