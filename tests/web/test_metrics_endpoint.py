"""``GET /metrics`` of a real gateway (policy pipeline, in-process upstreams, real sandbox):
who may scrape it, what it counts, and that what agents send cannot break or bloat it.

Counters are the process's own (many gateways open in one test run), so each test
compares two scrapes around what it does.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from e2e.support import (
    Upstream,
    create_key,
    http_client,
    pml_http,
    python_server,
    sqlite_url,
    write_config,
)
from pml import __version__
from pml.gateway.http import create_app
from pml.gateway.keys import ApiKeys
from pml.registry.scope import Scope
from policy.conftest import SCOPE, OpenPolicyGateway, PolicyGateway

pytestmark = pytest.mark.anyio

BASE = "http://testserver"
TOKEN = "scrape-token-0123456789abcdef"
SAVE = """
note = await mcp.filesystem.read_text_file(path="/w/note.txt")
await mcp.filesystem.write_file(path="/w/copy.txt", content=note)
return "saved"
"""

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parsed(text: str) -> Samples:
    """Every sample of an exposition (the parser fails on an invalid one)."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def label_values(samples: Samples, name: str, label: str) -> set[str]:
    return {dict(found)[label] for (sample, found) in samples if sample == name}


@dataclass
class Scraper:
    pg: PolicyGateway
    http: httpx.AsyncClient
    admin_key: str
    agent_key: str

    async def scrape(self, key: str | None = None) -> Samples:
        response = await self.get(key or self.admin_key)
        assert response.status_code == 200, response.text
        return parsed(response.text)

    async def get(self, bearer: str | None, **headers: str) -> httpx.Response:
        if bearer is not None:
            headers["Authorization"] = f"Bearer {bearer}"
        return await self.http.get("/metrics", headers=headers)


@pytest.fixture
async def scraper(open_policy_gateway: OpenPolicyGateway) -> AsyncGenerator[Scraper]:
    async with open_policy_gateway(telemetry={"metrics_token": TOKEN}) as pg:
        keys = ApiKeys(pg.gateway.db)
        admin_key, _ = await keys.create(SCOPE.org, SCOPE.project, "ana", role="admin")
        agent_key, _ = await keys.create(SCOPE.org, SCOPE.project, SCOPE.user)
        transport = httpx.ASGITransport(app=create_app(pg.gateway))
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as http:
            yield Scraper(pg, http, admin_key, agent_key)


async def test_an_admin_key_scrapes_the_prometheus_text_format(scraper: Scraper) -> None:
    response = await scraper.get(scraper.admin_key)

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = parsed(response.text)
    assert value(samples, "pml_upstream_server_state", server="time", state="running") == 1
    assert value(samples, "pml_upstream_server_state", server="time", state="failed") == 0
    assert value(samples, "pml_upstream_tools", server="filesystem") == 3
    assert value(samples, "pml_upstream_sessions_opened_total", server="time") == 1
    assert value(samples, "pml_upstream_restarts_total", server="time") == 0
    assert value(samples, "pml_approvals_pending") == 0
    assert value(samples, "pml_db_pool_size", backend="sqlite") >= 1
    assert ("pml_db_pool_connections", frozenset({("backend", "sqlite"), ("state", "idle")})) in (
        samples
    )
    assert any(name == "pml_info" for name, _ in samples)
    assert any(name == "process_resident_memory_bytes" for name, _ in samples)


async def test_an_openmetrics_scraper_gets_openmetrics(scraper: Scraper) -> None:
    accept = "application/openmetrics-text; version=1.0.0; charset=utf-8"
    response = await scraper.get(scraper.admin_key, accept=accept)

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/openmetrics-text")
    assert response.text.endswith("# EOF\n")


@pytest.mark.parametrize(
    "accept",
    ["text/plain; version=x.y; escaping=nope", "*/*;;;,,,", "ü" * 5000, "\x00\x01"],
)
async def test_an_odd_accept_header_gets_the_plain_text_format(
    scraper: Scraper, accept: str
) -> None:
    headers = {"Authorization": f"Bearer {scraper.admin_key}", "Accept": accept.encode()}
    response = await scraper.http.get("/metrics", headers=headers)

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert parsed(response.text)


async def test_an_openmetrics_accept_header_with_an_odd_version_gets_openmetrics_1(
    scraper: Scraper,
) -> None:
    accept = "application/openmetrics-text; version=banana, text/plain;q=0.5"
    response = await scraper.get(scraper.admin_key, accept=accept)

    assert response.status_code == 200
    assert "version=1.0.0" in response.headers["content-type"]
    assert response.text.endswith("# EOF\n")


async def test_the_scrape_token_is_accepted_as_a_bearer(scraper: Scraper) -> None:
    response = await scraper.get(TOKEN)

    assert response.status_code == 200
    assert value(parsed(response.text), "pml_upstream_tools", server="time") == 1


async def test_the_scrape_token_opens_nothing_but_metrics(scraper: Scraper) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    for path in ("/api/capabilities", "/api/audit", "/api/approvals"):
        response = await scraper.http.get(path, headers=headers)
        assert response.status_code == 401, path


async def test_an_agent_key_gets_403_and_counts_as_an_auth_failure(scraper: Scraper) -> None:
    before = await scraper.scrape()

    response = await scraper.get(scraper.agent_key)

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "FORBIDDEN"
    assert "pml_tool_calls" not in response.text
    after = await scraper.scrape()
    name = "pml_auth_failures_total"
    assert value(after, name, reason="forbidden") == value(before, name, reason="forbidden") + 1


BAD_BEARERS: list[tuple[dict[str, str], str]] = [
    ({}, "missing"),
    ({"Authorization": ""}, "malformed"),
    ({"Authorization": "Bearer"}, "malformed"),
    ({"Authorization": f"Basic {TOKEN}"}, "malformed"),
    ({"Authorization": f"Bearer {TOKEN[:-1]}"}, "invalid"),
    ({"Authorization": f"Bearer {TOKEN}x"}, "invalid"),
    ({"Authorization": f"Bearer {TOKEN.upper()}"}, "invalid"),
    ({"Authorization": "Bearer " + "A" * 100_000}, "malformed"),
    ({"Authorization": "Bearer " + "A" * 512}, "invalid"),
    ({"Authorization": "Bearer pml_not-a-real-key-000000000000000000"}, "invalid"),
    ({"Authorization": f"Bearer {TOKEN} {TOKEN}"}, "malformed"),
]


@pytest.mark.parametrize(("headers", "reason"), BAD_BEARERS)
async def test_a_missing_wrong_or_huge_token_gets_401_and_no_metrics(
    scraper: Scraper, headers: dict[str, str], reason: str
) -> None:
    before = await scraper.scrape()

    response = await scraper.http.get("/metrics", headers=headers)

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "UNAUTHORIZED"
    assert "pml_tool_calls" not in response.text
    after = await scraper.scrape()
    name = "pml_auth_failures_total"
    assert value(after, name, reason=reason) == value(before, name, reason=reason) + 1


async def test_a_token_in_a_second_authorization_header_is_refused(scraper: Scraper) -> None:
    headers = [
        ("Authorization", "Bearer nope-0000000000000000"),
        ("Authorization", f"Bearer {TOKEN}"),
    ]
    response = await scraper.http.get("/metrics", headers=headers)

    assert response.status_code == 401


async def test_without_a_configured_token_only_admin_keys_scrape(
    open_policy_gateway: OpenPolicyGateway,
) -> None:
    async with open_policy_gateway() as pg:
        admin_key, _ = await ApiKeys(pg.gateway.db).create("acme", "webapp", "ana", role="admin")
        transport = httpx.ASGITransport(app=create_app(pg.gateway))
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as http:
            refused = await http.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
            admitted = await http.get("/metrics", headers={"Authorization": f"Bearer {admin_key}"})

    assert refused.status_code == 401
    assert admitted.status_code == 200


async def test_tool_calls_are_counted_by_tool_lane_and_outcome_with_their_latency(
    scraper: Scraper,
) -> None:
    before = await scraper.scrape()

    result = await scraper.pg.call("time__get_current_time", {})
    assert not result.is_error

    after = await scraper.scrape()
    labels = {"tool": "time__get_current_time", "lane": "mcp"}
    name = "pml_tool_calls_total"
    assert (
        value(after, name, **labels, outcome="ok")
        == value(before, name, **labels, outcome="ok") + 1
    )
    count = "pml_tool_call_duration_seconds_count"
    assert value(after, count, **labels) == value(before, count, **labels) + 1
    upstream = {"server": "time", "tool": "get_current_time"}
    name = "pml_upstream_calls_total"
    assert value(after, name, **upstream, outcome="ok") == (
        value(before, name, **upstream, outcome="ok") + 1
    )
    count = "pml_upstream_call_duration_seconds_count"
    assert value(after, count, **upstream) == value(before, count, **upstream) + 1


async def test_a_run_counts_its_mode_outcome_policy_decision_sandbox_and_new_capability(
    scraper: Scraper,
) -> None:
    before = await scraper.scrape()

    failed, answer = await scraper.pg.execute(
        intent="what time is it", code="return await mcp.time.get_current_time()"
    )
    assert not failed, answer
    await scraper.pg.gateway.executor.flush()

    after = await scraper.scrape()

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("pml_execute_runs_total", mode="code", outcome="success") == 1
    assert grew("pml_execute_duration_seconds_count", mode="code") == 1
    assert grew("pml_sandbox_runs_total", outcome="ok") == 1
    assert grew("pml_sandbox_wait_seconds_count") == 1
    assert value(after, "pml_sandbox_queue_length") == 0
    decisions = [
        grew("pml_policy_decisions_total", source="pml_execute", intent=intent, outcome="ok")
        for intent in label_values(after, "pml_policy_decisions_total", "intent")
    ]
    assert sum(decisions) == 1
    assert grew("pml_capability_changes_total", kind="captured_unnamed") == 1
    assert grew("pml_tool_calls_total", tool="pml_execute", lane="mcp", outcome="ok") == 1


async def test_a_run_waiting_for_a_person_shows_as_an_approval_pending(
    scraper: Scraper,
) -> None:
    failed, paused = await scraper.pg.execute(intent="copy the note to a new file", code=SAVE)
    assert not failed
    assert paused["status"] == "approval_required"

    samples = await scraper.scrape()

    assert value(samples, "pml_approvals_pending") == 1
    assert value(samples, "pml_execute_runs_total", mode="code", outcome="approval_required") >= 1


async def test_ingested_traces_are_counted_by_status(scraper: Scraper) -> None:
    before = await scraper.scrape()

    results = await scraper.pg.gateway.traces.ingest(
        Scope("acme", "webapp", "erwan"), [{"workflowId": 3}, "not a trace"]
    )
    assert [result["status"] for result in results] == ["rejected", "rejected"]

    after = await scraper.scrape()
    name = "pml_traces_ingested_total"
    assert value(after, name, status="rejected") == value(before, name, status="rejected") + 2


HOSTILE_NAMES = [
    'evil"} 1\n# HELP pml_tool_calls_total forged',
    "line\nbreak",
    "back\\slash",
    "工具_ünïcödé_🚀",
    "time__get_current_time\n",
    "mcp__fake__capability",
    "x" * 10_000,
    "",
]


async def test_tool_names_agents_make_up_are_counted_as_other_and_the_text_stays_valid(
    scraper: Scraper,
) -> None:
    before = await scraper.scrape()

    for name in HOSTILE_NAMES:
        result = await scraper.pg.call(name, {"secret": "hunter2"})
        assert result.is_error

    response = await scraper.get(scraper.admin_key)
    after = parsed(response.text)  # the parser refuses an exposition a name has broken
    tools = label_values(after, "pml_tool_calls_total", "tool")
    assert not tools & set(HOSTILE_NAMES)
    labels = {"tool": "other", "lane": "mcp", "outcome": "tool_error"}
    name = "pml_tool_calls_total"
    assert value(after, name, **labels) == value(before, name, **labels) + len(HOSTILE_NAMES)
    assert "hunter2" not in response.text
    assert "forged" not in response.text


async def test_many_made_up_tool_names_add_no_series(scraper: Scraper) -> None:
    first = await scraper.get(scraper.admin_key)

    for index in range(200):
        await scraper.pg.call(f"made_up_tool_{index}", {})

    second = await scraper.get(scraper.admin_key)
    tools = label_values(parsed(second.text), "pml_tool_calls_total", "tool")
    assert not any(tool.startswith("made_up_tool_") for tool in tools)
    # at most the "other" series appear (counter and histogram), never one per name
    grown = len(second.text.splitlines()) - len(first.text.splitlines())
    assert grown <= 40


@pytest.mark.e2e
async def test_a_real_pml_serve_http_answers_a_scraper_with_the_token(tmp_path: Path) -> None:
    time_server = Upstream(
        "time", str(python_server("mcp-server-time")), ("--local-timezone", "UTC")
    )
    config = write_config(
        tmp_path / "pml.toml",
        [time_server],
        database_url=sqlite_url(tmp_path),
        extra={"telemetry": {"metrics_token": TOKEN}},
    )
    key = create_key(config, "local", "default")["key"]
    with pml_http(config, tmp_path / "pml.log") as gateway:
        async with httpx.AsyncClient(timeout=10.0) as http:
            bearer = {"Authorization": f"Bearer {TOKEN}"}
            before = parsed((await http.get(f"{gateway.base_url}/metrics", headers=bearer)).text)
            async with http_client(gateway.mcp_url, key) as client:
                result = await client.call_tool("time__get_current_time", {"timezone": "UTC"})
            response = await http.get(f"{gateway.base_url}/metrics", headers=bearer)
            agent = await http.get(
                f"{gateway.base_url}/metrics", headers={"Authorization": f"Bearer {key}"}
            )
            health = await http.get(f"{gateway.base_url}/health")

    assert not result.is_error
    assert response.status_code == 200
    assert agent.status_code == 403
    after = parsed(response.text)
    labels = {"tool": "time__get_current_time", "lane": "mcp", "outcome": "ok"}
    assert value(after, "pml_tool_calls_total", **labels) == (
        value(before, "pml_tool_calls_total", **labels) + 1
    )
    assert value(after, "pml_upstream_server_state", server="time", state="running") == 1
    assert health.json() == {"status": "ok", "version": __version__}
