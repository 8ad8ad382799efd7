"""Progress, cancellation, sampling, elicitation and roots through ``pml serve``, end to end.

The upstream is the real npm ``@modelcontextprotocol/server-everything`` (stdio), the client
the SDK's ``mcp.Client`` over ``pml serve --stdio`` and ``--http``, in both protocol
generations (``legacy``: 2025-11-25; ``auto``: 2026-07-28 with PML), and the MCP Inspector
CLI for progress. Cancellation is in ``test_e2e_relay_cancel.py``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from e2e.support import (
    NpmDeps,
    Upstream,
    create_key,
    pml_http,
    pml_stdio_params,
    run_inspector,
    sqlite_url,
    write_config,
)

pytestmark = pytest.mark.anyio

MODES = ["legacy", "auto"]
WAIT_S = 60.0
ALLOW = {"permissions": {"allow": ["*:*"]}}
ROOT = mcp_types.Root.model_validate({"uri": "file:///work/project", "name": "project"})


class Progress:
    def __init__(self) -> None:
        self.seen: list[tuple[float, float | None]] = []
        self.first = anyio.Event()

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((progress, total))
        self.first.set()


class Person:
    """The client's side: answers sampling, elicitation and roots, and remembers them."""

    def __init__(self, reply: str = "four") -> None:
        self.reply = reply
        self.sampled: list[str] = []
        self.forms: list[str] = []
        self.roots_asked = 0
        self.roots = [ROOT]

    async def sampling(
        self, context: ClientRequestContext, params: mcp_types.CreateMessageRequestParams
    ) -> mcp_types.CreateMessageResult:
        block = params.messages[0].content
        self.sampled.append(block.text if isinstance(block, mcp_types.TextContent) else "?")
        return mcp_types.CreateMessageResult(
            role="assistant",
            content=mcp_types.TextContent(type="text", text=self.reply),
            model="e2e-model",
        )

    async def elicitation(
        self, context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult:
        self.forms.append(params.message)
        return mcp_types.ElicitResult(action="accept", content={"name": "Ada Lovelace"})

    async def list_roots(self, context: ClientRequestContext) -> mcp_types.ListRootsResult:
        self.roots_asked += 1
        return mcp_types.ListRootsResult(roots=list(self.roots))

    def callbacks(self) -> dict[str, Any]:
        return {
            "sampling_callback": self.sampling,
            "elicitation_callback": self.elicitation,
            "list_roots_callback": self.list_roots,
        }


def _text(result: mcp_types.CallToolResult) -> str:
    return "\n".join(
        block.text for block in result.content if isinstance(block, mcp_types.TextContent)
    )


@pytest.fixture
def config(tmp_path: Path, servers: dict[str, Upstream]) -> Path:
    return write_config(
        tmp_path / "pml.toml",
        [servers["everything"]],
        database_url=sqlite_url(tmp_path),
        extra=ALLOW,
    )


@asynccontextmanager
async def stdio_gateway(
    config: Path, mode: str, person: Person | None = None
) -> AsyncGenerator[Client]:
    """The SDK client on ``pml serve --stdio`` (its stderr in ``pml.log`` beside the config)."""
    callbacks = person.callbacks() if person is not None else {}
    with (config.parent / "pml.log").open("w") as errlog:
        transport = stdio_client(pml_stdio_params(config), errlog=errlog)
        async with Client(transport, mode=mode, **callbacks) as client:
            yield client


@asynccontextmanager
async def http_gateway(
    config: Path, key: str, mode: str, person: Person | None = None
) -> AsyncGenerator[Client]:
    callbacks = person.callbacks() if person is not None else {}
    with pml_http(config, config.parent / "pml-http.log") as gateway:
        headers = {"Authorization": f"Bearer {key}"}
        timeout = httpx2.Timeout(30.0, read=120.0)
        async with (
            httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
            Client(
                streamable_http_client(gateway.mcp_url, http_client=http), mode=mode, **callbacks
            ) as client,
        ):
            yield client


async def _wait_for_tool(client: Client, name: str) -> None:
    """server-everything registers its capability-dependent tools after initialisation."""
    with anyio.fail_after(WAIT_S):
        while name not in {tool.name for tool in (await client.list_tools()).tools}:  # noqa: ASYNC110 - tools/list_changed may come before we listen
            await anyio.sleep(0.2)


# -- progress ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_progress_of_server_everything_reaches_a_stdio_client(
    config: Path, mode: str
) -> None:
    progress = Progress()
    async with stdio_gateway(config, mode) as client:
        await _wait_for_tool(client, "everything__trigger-long-running-operation")
        with anyio.fail_after(WAIT_S):
            result = await client.call_tool(
                "everything__trigger-long-running-operation",
                {"duration": 0.3, "steps": 3},
                progress_callback=progress,
            )
    assert "Long running operation completed" in _text(result)
    assert progress.seen == [(1, 3), (2, 3), (3, 3)]


@pytest.mark.parametrize("mode", MODES)
async def test_progress_of_a_pml_execute_run_reaches_the_client_over_http(
    config: Path, mode: str
) -> None:
    key = create_key(config, "acme", "web", "alice")["key"]
    progress = Progress()
    code = 'await mcp.everything["trigger-long-running-operation"](duration=0.3, steps=2)'
    async with http_gateway(config, key, mode) as client:
        await _wait_for_tool(client, "everything__trigger-long-running-operation")
        with anyio.fail_after(WAIT_S):
            result = await client.call_tool(
                "pml_execute",
                {"intent": "a long operation", "code": code + "\nreturn 1"},
                progress_callback=progress,
            )
    assert not result.is_error, _text(result)
    assert [value for value, _ in progress.seen] == [1, 2]


def test_inspector_cli_completes_a_progress_call_and_cannot_answer_sampling(
    npm_deps: NpmDeps, tmp_path: Path, config: Path
) -> None:
    # The Inspector CLI prints the result only (not the notifications) and cannot answer
    # sampling or elicitation: what it shows is that the call PML relays completes.
    target = [
        "--",
        str(Path(sys.executable).parent / "pml"),
        "--config",
        str(config),
        "serve",
        "--stdio",
    ]
    run = run_inspector(
        npm_deps,
        tmp_path / "home",
        "--format",
        "json",
        "-q",
        "--method",
        "tools/call",
        "--tool-name",
        "everything__trigger-long-running-operation",
        "--tool-arg",
        "duration=0.2",
        "--tool-arg",
        "steps=2",
        *target,
    )
    texts = [block.get("text", "") for block in run.result()["content"]]
    assert any("Long running operation completed" in text for text in texts)
    sampling = run_inspector(
        npm_deps,
        tmp_path / "home",
        "--format",
        "json",
        "-q",
        "--method",
        "tools/call",
        "--tool-name",
        "everything__trigger-sampling-request",
        "--tool-arg",
        "prompt=hi",
        *target,
    )
    assert sampling.returncode != 0  # the tool's result is an error: nobody could answer
    shown = json.loads(sampling.stdout)["result"]["content"][0]["text"]
    assert "declared the sampling/createMessage capability" in shown


# -- sampling, elicitation, roots ----------------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_sampling_of_server_everything_is_answered_by_the_stdio_client(
    config: Path, mode: str
) -> None:
    person = Person("the answer is four")
    async with stdio_gateway(config, mode, person) as client:
        await _wait_for_tool(client, "everything__trigger-sampling-request")
        with anyio.fail_after(WAIT_S):
            result = await client.call_tool(
                "everything__trigger-sampling-request", {"prompt": "2+2? ✓", "maxTokens": 20}
            )
    assert not result.is_error, _text(result)
    assert "the answer is four" in _text(result)
    assert person.sampled == ["Resource trigger-sampling-request context: 2+2? ✓"]


@pytest.mark.parametrize("mode", MODES)
async def test_elicitation_and_roots_are_relayed_over_http(config: Path, mode: str) -> None:
    key = create_key(config, "acme", "web", "alice")["key"]
    person = Person()
    async with http_gateway(config, key, mode, person) as client:
        await _wait_for_tool(client, "everything__trigger-elicitation-request")
        with anyio.fail_after(WAIT_S):
            elicited = await client.call_tool("everything__trigger-elicitation-request", {})
            roots = await client.call_tool("everything__get-roots-list", {})
            sampled = await client.call_tool(
                "everything__trigger-sampling-request", {"prompt": "hi"}
            )
    assert "Name: Ada Lovelace" in _text(elicited)
    # The person sees which server asks: never mistaken for PML's own approval form.
    assert person.forms == [
        "Upstream server 'everything' asks (relayed by PML): "
        "Please provide inputs for the following fields:"
    ]
    assert "file:///work/project" in _text(roots)
    assert "four" in _text(sampled)


@pytest.mark.parametrize("mode", MODES)
async def test_a_pml_execute_snippet_calling_the_sampling_trigger_reaches_the_client(
    config: Path, mode: str
) -> None:
    person = Person("sampled inside a run")
    code = (
        'answer = await mcp.everything["trigger-sampling-request"](prompt="from a run")\n'
        "return answer"
    )
    async with stdio_gateway(config, mode, person) as client:
        await _wait_for_tool(client, "everything__trigger-sampling-request")
        with anyio.fail_after(WAIT_S):
            result = await client.call_tool("pml_execute", {"intent": "ask", "code": code})
    assert not result.is_error, _text(result)
    assert "sampled inside a run" in _text(result)
    assert person.sampled == ["Resource trigger-sampling-request context: from a run"]


@pytest.mark.parametrize("mode", MODES)
async def test_a_client_without_sampling_gets_a_clear_refusal(config: Path, mode: str) -> None:
    async with stdio_gateway(config, mode) as client:  # declares no capability
        await _wait_for_tool(client, "everything__trigger-sampling-request")
        with anyio.fail_after(WAIT_S):
            result = await client.call_tool(
                "everything__trigger-sampling-request", {"prompt": "hi"}
            )
    assert result.is_error
    assert "sampling/createMessage" in _text(result)
    assert "capability" in _text(result)


async def test_a_denied_server_cannot_reach_the_client(
    tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    config = write_config(
        tmp_path / "pml.toml",
        [servers["everything"]],
        database_url=sqlite_url(tmp_path),
        extra={"permissions": {"allow": ["*:*"], "deny": ["everything:sampling/createMessage"]}},
    )
    person = Person()
    async with stdio_gateway(config, "legacy", person) as client:
        await _wait_for_tool(client, "everything__trigger-sampling-request")
        with anyio.fail_after(WAIT_S):
            result = await client.call_tool(
                "everything__trigger-sampling-request", {"prompt": "hi"}
            )
    assert result.is_error
    assert "denied by the gateway's policy" in _text(result)
    assert person.sampled == []


async def test_a_roots_change_of_the_client_reaches_server_everything(config: Path) -> None:
    person = Person()
    async with stdio_gateway(config, "legacy", person) as client:
        await _wait_for_tool(client, "everything__get-roots-list")
        with anyio.fail_after(WAIT_S):
            first = await client.call_tool("everything__get-roots-list", {})
            asked = person.roots_asked
            person.roots = [mcp_types.Root.model_validate({"uri": "file:///elsewhere/ü"})]
            await client.send_roots_list_changed()  # pyright: ignore[reportDeprecated]
            # server-everything asks roots/list again, outside any call: relayed to us
            while person.roots_asked == asked:  # noqa: ASYNC110 - the callback has no event
                await anyio.sleep(0.05)
            second = await client.call_tool("everything__get-roots-list", {})
    assert "file:///work/project" in _text(first)
    assert "file:///elsewhere/" in _text(second)
