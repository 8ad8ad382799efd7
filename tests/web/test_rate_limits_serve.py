"""The rate limits of a real ``pml serve --http`` (a child process, its ``[limits]`` from
``pml.toml``, keys from ``pml keys create``), asked by the SDK client and by httpx."""

from __future__ import annotations

import secrets
from pathlib import Path

import httpx
import pytest
from mcp import MCPError

from e2e.support import create_key, http_client, pml_cli, pml_http, sqlite_url, write_config

pytestmark = pytest.mark.anyio

LIMITS = {
    "key_rate_per_s": 0.01,  # next to nothing refills while the test runs
    "key_burst": 6,
    "auth_failures_per_minute": 0.5,
    "auth_failure_burst": 3,
}


async def test_pml_serve_http_limits_a_key_and_an_address_and_audits_the_failures(
    tmp_path: Path,
) -> None:
    config = write_config(
        tmp_path / "pml.toml",
        [],
        database_url=sqlite_url(tmp_path),
        extra={"limits": LIMITS, "audit": {"coalesce_window_s": 0.5}},
    )
    busy = create_key(config, "local", "default", "busy")["key"]
    other = create_key(config, "local", "default", "other")["key"]
    with pml_http(config, tmp_path / "pml.log") as gateway:
        answered = 0
        async with http_client(gateway.mcp_url, busy) as client:
            with pytest.raises(MCPError) as refused:  # noqa: PT012 - calls until refused
                for _ in range(10):
                    await client.call_tool("cap_list", {})
                    answered += 1
        async with http_client(gateway.mcp_url, other) as client:
            listed = await client.call_tool("cap_list", {})
        async with httpx.AsyncClient(timeout=10.0) as http:
            api = f"{gateway.base_url}/api/capabilities"
            over = await http.get(api, headers={"Authorization": f"Bearer {busy}"})
            bad = [
                await http.get(
                    api, headers={"Authorization": f"Bearer pml_{secrets.token_hex(20)}"}
                )
                for _ in range(5)
            ]
            blocked = await http.get(api, headers={"Authorization": f"Bearer {other}"})
            health = await http.get(f"{gateway.base_url}/health")
    assert 0 < answered < LIMITS["key_burst"]
    assert refused.value.error.data["code"] == "RATE_LIMITED"
    assert refused.value.error.data["retryAfterS"] > 0
    assert not listed.is_error  # another key is unaffected
    assert over.status_code == 429
    assert int(over.headers["retry-after"]) >= 1
    assert over.json()["error"]["code"] == "RATE_LIMITED"
    assert [response.status_code for response in bad] == [401, 401, 401, 429, 429]
    assert blocked.status_code == 429  # the address waits, whatever key it sends now
    assert health.status_code == 200

    printed = pml_cli(config, "audit", "tail", "--json", "--event", "AUTH_FAILED")
    assert '"address": "127.0.0.1"' in printed
    assert '"repeated"' in printed  # coalesced: not one line per attempt
    assert len(printed.strip().splitlines()) < 5
