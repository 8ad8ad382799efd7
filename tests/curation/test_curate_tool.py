"""``cap_curate`` as an MCP tool: the gateway's handler, then a whole gateway with a client.

The first tests drive ``GatewayTools`` with the ``cap_curate`` handler; the last ones open a
real gateway (SQLite, no upstream servers) and call it through the SDK client.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import anyio
import pytest
from mcp import Client

from gateway.upstreams import data_of, error_of, gateway_settings
from pml.curation import CurationService
from pml.gateway.handlers import service_handlers
from pml.gateway.server import Gateway, open_gateway
from pml.gateway.tools import GatewayTools
from pml.registry.models import CapabilityDraft
from pml.registry.scope import Scope
from pml.registry.service import CapabilityRegistry
from pml.registry.tools import CapTools
from pml.sections import CurationSettings
from pml.storage.database import Database
from pml.upstream.pool import ClientPool

pytestmark = pytest.mark.anyio

INTENT = "read and parse JSON config file"


@pytest.fixture
def tools(registry: CapabilityRegistry, db: Database) -> GatewayTools:
    curation = CurationService(registry, db)
    return GatewayTools(
        CapTools(registry),
        ClientPool({}),
        expose_upstream=False,
        handlers=service_handlers(curation=curation),
    )


async def test_cap_curate_answers_structured_content_under_both_spellings(
    registry: CapabilityRegistry, tools: GatewayTools, scope: Scope
) -> None:
    draft = CapabilityDraft(code="return 1", intent=INTENT, tools_used=["filesystem:read"])
    record = (await registry.capture(scope, draft, latency_ms=1.0)).record

    for name in ("cap_curate", "cap:curate"):
        answer = data_of(await tools.call_tool(scope, name, {"mode": "suggest"}))
        assert [(s["id"], s["suggestedName"]) for s in answer["suggestions"]] == [
            (record.fqdn, "fs:read_json_config")
        ]


@pytest.mark.parametrize(
    "arguments",
    [{"mode": "apply"}, {"mode": 3}, {"filter": {"min_usage": -2}}, {"renames": [{"id": "x"}]}],
)
async def test_malformed_cap_curate_calls_are_invalid_input(
    tools: GatewayTools, scope: Scope, arguments: dict[str, Any]
) -> None:
    assert error_of(await tools.call_tool(scope, "cap_curate", arguments))["code"] == (
        "INVALID_INPUT"
    )


# -- a whole gateway -------------------------------------------------------------------------


@pytest.fixture
async def gateway(sqlite_url: str) -> AsyncGenerator[Gateway]:
    settings = gateway_settings(sqlite_url, expose_upstream=False).model_copy(
        update={"curation": CurationSettings(auto_suggest_after=2)}
    )
    async with open_gateway(settings, pool=ClientPool({})) as opened:
        yield opened


async def test_auto_curation_renames_and_the_old_name_still_runs_with_a_warning(
    gateway: Gateway,
) -> None:
    async with Client(gateway.server) as client:
        run = data_of(
            await client.call_tool("pml_execute", {"intent": "add two numbers", "code": "return 2"})
        )
        answer = data_of(await client.call_tool("cap_curate", {"mode": "auto"}))
        again = data_of(await client.call_tool("pml_execute", {
            "intent": "x", "capability": run["capabilityName"]}))  # fmt: skip

    assert answer["applied"][0]["oldName"] == run["capabilityName"]
    assert answer["applied"][0]["newName"] == "code:add_two_numbers"
    assert again["result"] == 2
    assert again["deprecatedAlias"]["currentName"] == "code:add_two_numbers"


async def test_executions_trigger_an_automatic_suggest_run(gateway: Gateway) -> None:
    async with Client(gateway.server) as client:
        for index in range(2):
            await client.call_tool(
                "pml_execute", {"intent": f"task {index}", "code": f"return {index}"}
            )
    with anyio.fail_after(10):
        await gateway.curation.settled()  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]

    run = await gateway.curation.latest_run(gateway.default_scope)  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType, reportUnknownVariableType]
    assert run is not None
    assert (run.trigger, run.mode, len(run.suggestions)) == ("auto", "suggest", 2)  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
