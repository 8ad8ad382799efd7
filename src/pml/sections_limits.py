"""``[limits]``: fair sharing of a shared PML between tenants, rate limits and quotas (SPEC §4).

[limits]
tenant_workers = 0                  # sandbox workers one tenant (org/project/user) may hold
                                    #   at once; 0: half the pool, at least 1
queue_per_tenant = 32               # runs of one tenant waiting for a worker; more → BUSY
key_rate_per_s = 20.0               # requests per second per API key (token bucket); 0: off
key_burst = 100                     # the bucket's size: a burst a key may send at once
auth_failures_per_minute = 30.0     # failed API keys per source address; then 429
auth_failure_burst = 10
capabilities_per_project = 50000    # active capabilities in one org/project; 0: no quota
pending_workflows_per_user = 100    # workflows waiting for a person or a client; 0: no quota
sessions_per_key = 64               # MCP sessions (2025-11-25) one API key may hold open in a
                                    #   process; one more initialize → 429 RATE_LIMITED
sessions_per_org = 2500             # MCP sessions all the keys of one org may hold open in a
                                    #   process; 0: no such cap; one more → 429 RATE_LIMITED
trusted_proxies = []                # proxies whose X-Forwarded-For names the client
                                    #   (addresses or networks; "*": every peer)

A tenant is the (org, project, user) triple an API key fixes (on stdio: the config's scope
and the local user). ``BUSY`` and ``RATE_LIMITED`` carry ``retryAfterS``; over HTTP a rate
limit is answered 429 with ``Retry-After``.
"""

from __future__ import annotations

import ipaddress

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_QUEUE = 10_000
MAX_RATE = 1_000_000.0
SESSIONS_PER_KEY = 64
SESSIONS_PER_ORG = 2_500  # a quarter of the SDK's cap on a process: other orgs keep places
MAX_SESSIONS_PER_KEY = 10_000  # the MCP SDK's cap on all the sessions of one process


class LimitsSettings(BaseModel):
    """Per-tenant fairness, per-key and per-address rate limits, and quotas (SPEC §4)."""

    model_config = ConfigDict(extra="forbid")

    tenant_workers: int = Field(default=0, ge=0, le=1024)
    queue_per_tenant: int = Field(default=32, ge=0, le=MAX_QUEUE)
    key_rate_per_s: float = Field(default=20.0, ge=0, le=MAX_RATE)
    key_burst: int = Field(default=100, ge=1, le=1_000_000)
    auth_failures_per_minute: float = Field(default=30.0, gt=0, le=MAX_RATE)
    auth_failure_burst: int = Field(default=10, ge=1, le=1_000_000)
    capabilities_per_project: int = Field(default=50_000, ge=0)
    pending_workflows_per_user: int = Field(default=100, ge=0)
    sessions_per_key: int = Field(default=SESSIONS_PER_KEY, ge=1, le=MAX_SESSIONS_PER_KEY)
    sessions_per_org: int = Field(default=SESSIONS_PER_ORG, ge=0, le=MAX_SESSIONS_PER_KEY)
    trusted_proxies: list[str] = Field(default_factory=list[str], max_length=256)

    @field_validator("sessions_per_key", "sessions_per_org", mode="before")
    @classmethod
    def _a_count(cls, value: object) -> object:
        if isinstance(value, bool):  # pydantic would read true as 1
            raise ValueError(f"a number of sessions (up to {MAX_SESSIONS_PER_KEY}), not {value}")
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _proxy_addresses(cls, value: list[str]) -> list[str]:
        for item in value:
            if item == "*":
                continue
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ValueError(
                    f"not an IP address or network: {item[:80]!r} (or '*': every peer)"
                ) from None
        return value

    def workers_per_tenant(self, pool_size: int) -> int:
        """The most workers one tenant holds at once in a pool of ``pool_size``."""
        if self.tenant_workers > 0:
            return min(self.tenant_workers, pool_size)
        return max(1, pool_size // 2)
