"""Progress, cancellation and upstream requests through an in-process gateway.

The upstream is a real SDK server run in-process by the real pool (``relay_upstream``),
the client the SDK's ``mcp.Client``, in both protocol generations (``legacy`` is
2025-11-25, ``auto`` 2026-07-28).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext

from gateway.relay_upstream import Asker, relay_gateway
from gateway.upstreams import MODES
from pml.gateway.server import Gateway

pytestmark = pytest.mark.anyio

WAIT_S = 10.0


@pytest.fixture
def asker() -> Asker:
    return Asker()


@pytest.fixture
async def gateway(sqlite_url: str, asker: Asker) -> AsyncGenerator[Gateway]:
    async with relay_gateway(sqlite_url, asker) as opened:
        yield opened


def _json(result: mcp_types.CallToolResult) -> Any:
    block = result.content[0]
    assert isinstance(block, mcp_types.TextContent)
    return json.loads(block.text)


class Progress:
    def __init__(self) -> None:
        self.seen: list[tuple[float, float | None, str | None]] = []

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((progress, total, message))


async def _sampling(
    context: ClientRequestContext, params: mcp_types.CreateMessageRequestParams
) -> mcp_types.CreateMessageResult:
    block = params.messages[0].content
    text = block.text if isinstance(block, mcp_types.TextContent) else "?"
    return mcp_types.CreateMessageResult(
        role="assistant",
        content=mcp_types.TextContent(type="text", text=f"echo: {text}"),
        model="test-model",
    )


# -- progress ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_pass_through_progress_reaches_the_client_token(gateway: Gateway, mode: str) -> None:
    progress = Progress()
    async with Client(gateway.server, mode=mode) as client:
        with anyio.fail_after(WAIT_S):
            result = await client.call_tool("asker__slow", {"steps": 3}, progress_callback=progress)
    assert _json(result) == {"done": 3}
    assert progress.seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]


@pytest.mark.parametrize("mode", MODES)
async def test_pml_execute_progress_is_monotonic_over_its_tool_calls(
    gateway: Gateway, mode: str
) -> None:
    progress = Progress()
    code = "await mcp.asker.slow(steps=2)\nawait mcp.asker.slow(steps=3)\nreturn 'ok'"
    async with Client(gateway.server, mode=mode) as client:
        with anyio.fail_after(WAIT_S):
            result = await client.call_tool(
                "pml_execute",
                {"intent": "run slow twice", "code": code},
                progress_callback=progress,
            )
    assert not result.is_error, result.content
    values = [value for value, _, _ in progress.seen]
    assert values == [1, 2, 3, 4, 5]
    assert progress.seen[0][1] == 2  # the first call's own total
    assert progress.seen[-1][2] == "asker:slow step 3"  # later calls say which tool


@pytest.mark.parametrize("mode", MODES)
async def test_no_progress_token_means_no_progress(gateway: Gateway, mode: str) -> None:
    async with Client(gateway.server, mode=mode) as client:
        with anyio.fail_after(WAIT_S):
            result = await client.call_tool("asker__slow", {"steps": 2})
    assert _json(result) == {"done": 2}


# -- cancellation ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_cancelling_a_pass_through_call_cancels_the_upstream_call(
    gateway: Gateway, asker: Asker, mode: str
) -> None:
    async with Client(gateway.server, mode=mode) as client:
        with anyio.fail_after(WAIT_S):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(client.call_tool, "asker__slow", {"steps": 1, "wait": True})
                await asker.started.wait()
                tasks.cancel_scope.cancel()
            await asker.cancelled.wait()
    assert not asker.release.is_set()


# -- sampling, elicitation, roots ----------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_sampling_is_relayed_to_the_calling_client(gateway: Gateway, mode: str) -> None:
    async with Client(gateway.server, mode=mode, sampling_callback=_sampling) as client:
        with anyio.fail_after(WAIT_S):
            result = await client.call_tool("asker__sample", {"prompt": "héllo 🙂"})
    assert not result.is_error, result.content
    answer = _json(result)
    assert answer["content"]["text"] == "echo: héllo 🙂"
    assert answer["model"] == "test-model"
