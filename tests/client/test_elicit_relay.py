"""``pml connect`` passes the gateway's approval form on to the agent's client, and says so
(an error, never an answer) when that client cannot show forms."""

from __future__ import annotations

from typing import Any

import mcp_types
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.server import Server

from pml.client.elicit_relay import CANNOT_ASK, ElicitationRelay
from pml.gateway.notify import Context

pytestmark = pytest.mark.anyio

SCHEMA = {
    "type": "object",
    "properties": {"decision": {"type": "string", "enum": ["deny", "once", "session", "always"]}},
    "required": ["decision"],
}


async def _no_tools(
    ctx: Context, params: mcp_types.PaginatedRequestParams | None
) -> mcp_types.ListToolsResult:
    return mcp_types.ListToolsResult(tools=[])


def _gateway() -> Server[Any]:
    """A stand-in for the shared gateway's edge: asks, and reports what it got back."""

    async def on_call_tool(
        ctx: Context, params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        try:
            answer = await ctx.session.elicit_form(
                message="PML: approve filesystem:write_file path=/w/a.txt?",
                requested_schema=SCHEMA,
                related_request_id=ctx.request_id,
            )
            text = f"{answer.action}:{(answer.content or {}).get('decision')}"
        except Exception as error:  # noqa: BLE001 - what the gateway's edge sees
            text = f"failed:{error}"
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(text=text)])

    return Server("gateway", on_list_tools=_no_tools, on_call_tool=on_call_tool)


def _connect(gateway: Client, relay: ElicitationRelay) -> Server[Any]:
    """A stand-in for ``pml connect``: remembers its agent and forwards the call."""

    async def on_call_tool(
        ctx: Context, params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        relay.remember(ctx)
        return await gateway.call_tool(params.name, params.arguments)

    return Server("pml-connect", on_list_tools=_no_tools, on_call_tool=on_call_tool)


async def _through_connect(agent_answers: bool) -> tuple[str, list[str]]:
    relay = ElicitationRelay()
    shown: list[str] = []

    async def person(
        context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult:
        shown.append(params.message)
        return mcp_types.ElicitResult(action="accept", content={"decision": "session"})

    async with (
        Client(_gateway(), mode="legacy", elicitation_callback=relay) as gateway,
        Client(
            _connect(gateway, relay),
            mode="legacy",
            elicitation_callback=person if agent_answers else None,
        ) as agent,
    ):
        result = await agent.call_tool("pml_execute", {})
    block = result.content[0]
    assert isinstance(block, mcp_types.TextContent)
    return block.text, shown


async def test_the_persons_answer_in_the_agents_client_goes_back_to_the_gateway() -> None:
    text, shown = await _through_connect(agent_answers=True)
    assert text == "accept:session"
    assert shown == ["PML: approve filesystem:write_file path=/w/a.txt?"]


async def test_an_agent_client_without_forms_makes_the_gateway_wait_out_of_band() -> None:
    text, shown = await _through_connect(agent_answers=False)
    assert text.startswith("failed:")
    assert CANNOT_ASK in text
    assert shown == []


async def test_nothing_is_answered_before_an_agent_was_seen() -> None:
    relay = ElicitationRelay()
    params = mcp_types.ElicitRequestFormParams(message="approve?", requested_schema=SCHEMA)
    answer = await relay(None, params)  # type: ignore[arg-type]
    assert isinstance(answer, mcp_types.ErrorData)
    assert answer.message == CANNOT_ASK
