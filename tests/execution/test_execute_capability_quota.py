"""``pml_execute`` at the project's capability quota: the result stands, nothing is saved."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import pytest
from mcp import Client

from execution.conftest import Execute
from gateway.upstreams import Upstream, gateway_settings
from pml.config import LimitsSettings
from pml.gateway.server import open_gateway
from pml.upstream.pool import ClientPool

pytestmark = pytest.mark.anyio

QUOTA = 2


@pytest.fixture
async def execute(sqlite_url: str, upstreams: dict[str, Upstream]) -> AsyncGenerator[Execute]:
    pool = ClientPool({name: upstream.server for name, upstream in upstreams.items()})
    settings = gateway_settings(sqlite_url, expose_upstream=False)
    settings = settings.model_copy(
        update={"limits": LimitsSettings(capabilities_per_project=QUOTA)}
    )
    async with open_gateway(settings, pool=pool) as gateway, Client(gateway.server) as client:
        yield Execute(client, gateway)


async def fill(execute: Execute) -> list[str]:
    fqdns: list[str] = []
    for n in range(QUOTA):
        answer = await execute(code=f"return {n}")
        assert answer["created"] is True
        fqdns.append(answer["capabilityFqdn"])
    return fqdns


async def test_a_run_past_the_quota_answers_its_result_and_says_it_was_not_saved(
    execute: Execute, upstreams: dict[str, Upstream]
) -> None:
    await fill(execute)
    answer = await execute(code='return (await mcp.a.echo(text="over"))["args"]["text"]')
    assert answer["status"] == "success"
    assert answer["result"] == "over"
    assert upstreams["a"].calls == [("echo", {"text": "over"})]
    assert (answer["capabilityId"], answer["capabilityName"], answer["capabilityFqdn"]) == (
        None,
        None,
        None,
    )
    assert answer["created"] is False
    assert answer["routing"] == "local"
    not_saved = answer["notSaved"]
    assert not_saved["code"] == "LIMIT_EXCEEDED"
    assert (not_saved["limit"], not_saved["max"]) == ("capabilities_per_project", QUOTA)
    assert "capabilities_per_project" in not_saved["message"]
    # nothing stored but the run's trace (for no capability)
    assert await execute.stored() == {"records": QUOTA, "versions": QUOTA, "traces": QUOTA + 1}


async def test_known_code_still_runs_and_counts_at_the_quota(execute: Execute) -> None:
    fqdns = await fill(execute)
    answer = await execute(code="return 0")
    assert (answer["capabilityFqdn"], answer["created"]) == (fqdns[0], False)
    assert "notSaved" not in answer
    assert (await execute.record(fqdns[0])).usage_count == 2


async def test_a_named_save_past_the_quota_is_refused_before_running(
    execute: Execute, upstreams: dict[str, Upstream]
) -> None:
    await fill(execute)
    error = await execute.error(code='return await mcp.a.echo(text="x")', name="fs:new")
    assert error["code"] == "LIMIT_EXCEEDED"
    assert error["limit"] == "capabilities_per_project"
    assert upstreams["a"].calls == []
    assert (await execute.stored())["records"] == QUOTA


async def test_naming_known_code_at_the_quota_is_allowed(execute: Execute) -> None:
    fqdns = await fill(execute)
    answer = await execute(code="return 1", name="fs:one")
    assert (answer["capabilityFqdn"], answer["capabilityName"]) == (fqdns[1], "fs:one")


async def test_a_reload_can_raise_the_quota(execute: Execute) -> None:
    await fill(execute)
    assert "notSaved" in await execute(code="return 'x'")
    execute.gateway.registry.capabilities_per_project = QUOTA + 1
    answer = await execute(code="return 'x'")
    assert answer["created"] is True
    assert "notSaved" not in answer
