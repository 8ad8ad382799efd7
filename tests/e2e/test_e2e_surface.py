"""server-everything's prompts, resources, subscriptions, completions and log messages
through PML: the SDK client over ``pml serve --stdio`` and ``--http`` in both protocol
generations, and the MCP Inspector CLI.

server-everything (npm) speaks 2025-11-25 to PML whatever the client speaks to PML, so these
tests cover both downstream generations against a session-era upstream; the in-process tests
(``gateway/test_surface_gateway.py``) cover a 2026-07-28 upstream.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client, MCPError
from mcp.client.session import IncomingMessage

from e2e.support import (
    PML,
    InspectorRun,
    NpmDeps,
    Upstream,
    create_key,
    http_client,
    pml_http,
    pml_stdio,
    run_inspector,
    sqlite_url,
    write_config,
)

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

MODES = pytest.mark.parametrize("mode", ["legacy", "auto"])
WAIT_S = 15.0  # server-everything sends its first log line or update at once, then every 5 s
ARCHITECTURE = "pml://everything/demo://resource/static/document/architecture.md"
TEXT_TEMPLATE = "pml://everything/demo://resource/dynamic/text/{resourceId}"


class Received:
    """Every notification and log message a client got."""

    def __init__(self) -> None:
        self.messages: list[IncomingMessage] = []
        self.logs: list[mcp_types.LoggingMessageNotificationParams] = []
        self.arrived = anyio.Event()

    async def message(self, message: IncomingMessage) -> None:
        self.messages.append(message)
        self.arrived.set()

    async def log(self, params: mcp_types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params)
        self.arrived.set()

    async def wait(self, found: Any) -> None:
        with anyio.fail_after(WAIT_S):
            while not found():
                self.arrived = anyio.Event()
                await self.arrived.wait()


def everything_config(tmp_path: Path, servers: dict[str, Upstream]) -> Path:
    return write_config(
        tmp_path / "pml.toml",
        [servers["everything"]],
        database_url=sqlite_url(tmp_path),
        # One-shot clients (the Inspector CLI) list once: let listings wait for the server.
        upstream={"list_wait_s": 30.0},
        extra={"permissions": {"allow": ["everything:*"]}},
    )


async def exercise(client: Client) -> None:
    """Prompts, resources, templates and completion: what every transport must pass."""
    prompts = {prompt.name: prompt for prompt in (await client.list_prompts()).prompts}
    assert {"everything__simple-prompt", "everything__args-prompt"} <= set(prompts)
    assert "everything__completable-prompt" in prompts
    args = prompts["everything__args-prompt"].arguments or []
    assert "city" in {argument.name for argument in args}

    got = await client.get_prompt("everything__args-prompt", {"city": "Lyon", "state": "RA"})
    first = got.messages[0].content
    assert isinstance(first, mcp_types.TextContent)
    assert "Lyon" in first.text

    completed = await client.complete(
        mcp_types.PromptReference(name="everything__completable-prompt"),
        {"name": "department", "value": "E"},
    )
    assert completed.completion.values == ["Engineering"]

    resources = {resource.uri: resource for resource in (await client.list_resources()).resources}
    assert ARCHITECTURE in resources
    assert resources[ARCHITECTURE].name == "everything__architecture.md"
    read = await client.read_resource(ARCHITECTURE)
    content = read.contents[0]
    assert isinstance(content, mcp_types.TextResourceContents)
    assert content.text
    raw = await client.read_resource("demo://resource/static/document/architecture.md")
    assert isinstance(raw.contents[0], mcp_types.TextResourceContents)
    assert raw.contents[0].text == content.text

    templates = [
        t.uri_template for t in (await client.list_resource_templates()).resource_templates
    ]
    assert TEXT_TEMPLATE in templates
    expanded = await client.read_resource(TEXT_TEMPLATE.replace("{resourceId}", "3"))
    assert expanded.contents[0].uri.startswith("pml://everything/demo://resource/dynamic/text/")

    with pytest.raises(MCPError) as unknown:
        await client.get_prompt("everything__no-such-prompt")
    assert "no-such-prompt" in unknown.value.message
    with pytest.raises(MCPError) as hostile:
        await client.read_resource("pml://everything/demo://nope/\u202e'; DROP --")
    assert "everything" in hostile.value.message


@MODES
async def test_prompts_resources_and_completion_through_pml_over_stdio(
    servers: dict[str, Upstream], tmp_path: Path, mode: str
) -> None:
    config = everything_config(tmp_path, servers)
    async with pml_stdio(config, tmp_path / "pml.log", mode=mode) as gateway:
        await exercise(gateway.client)


@MODES
async def test_prompts_resources_and_completion_through_pml_over_http(
    servers: dict[str, Upstream], tmp_path: Path, mode: str
) -> None:
    config = everything_config(tmp_path, servers)
    key = create_key(config, "local", "default", "e2e")["key"]
    with pml_http(config, tmp_path / "pml.log") as gateway:
        async with http_client(gateway.mcp_url, key, mode=mode) as client:
            await exercise(client)


async def test_a_session_client_sets_a_log_level_and_gets_everything_s_log_lines(
    servers: dict[str, Upstream], tmp_path: Path
) -> None:
    received = Received()
    config = everything_config(tmp_path, servers)
    async with pml_stdio(config, tmp_path / "pml.log", mode="legacy") as gateway:
        client = gateway.client
        client.session._logging_callback = received.log  # pyright: ignore[reportPrivateUsage]
        await client.set_logging_level("debug")  # pyright: ignore[reportDeprecated]
        started = await client.call_tool("everything__toggle-simulated-logging", {})
        assert not started.is_error
        await received.wait(lambda: received.logs)
        await client.call_tool("everything__toggle-simulated-logging", {})  # stop it

    assert received.logs[0].logger == "everything"
    assert "message" in str(received.logs[0].data).lower()


async def test_a_2026_request_that_opts_in_gets_the_log_lines_of_its_call(
    servers: dict[str, Upstream], tmp_path: Path
) -> None:
    received = Received()
    config = everything_config(tmp_path, servers)
    async with pml_stdio(config, tmp_path / "pml.log") as gateway:
        client = gateway.client
        assert client.protocol_version == "2026-07-28"
        client.session._logging_callback = received.log  # pyright: ignore[reportPrivateUsage]
        meta = mcp_types.RequestParamsMeta({mcp_types.LOG_LEVEL_META_KEY: "debug"})
        await client.call_tool("everything__toggle-simulated-logging", {}, meta=meta)
        await client.call_tool("everything__toggle-simulated-logging", {})  # stop it
    assert received.logs, "the log line sent during the call did not arrive"
    assert received.logs[0].logger == "everything"


async def test_a_subscribed_session_gets_everything_s_resource_updates(
    servers: dict[str, Upstream], tmp_path: Path
) -> None:
    received = Received()
    config = everything_config(tmp_path, servers)
    async with pml_stdio(
        config, tmp_path / "pml.log", mode="legacy", message_handler=received.message
    ) as gateway:
        client = gateway.client
        await client.subscribe_resource(ARCHITECTURE)  # pyright: ignore[reportDeprecated]
        await client.call_tool("everything__toggle-subscriber-updates", {})

        def updates() -> list[mcp_types.ResourceUpdatedNotification]:
            return [
                m for m in received.messages if isinstance(m, mcp_types.ResourceUpdatedNotification)
            ]

        await received.wait(updates)
        await client.call_tool("everything__toggle-subscriber-updates", {})
        await client.unsubscribe_resource(ARCHITECTURE)  # pyright: ignore[reportDeprecated]
    assert updates()[0].params.uri == ARCHITECTURE


# -- the MCP Inspector CLI -----------------------------------------------------------------


def inspect(deps: NpmDeps, tmp_path: Path, target: list[str], *args: str) -> InspectorRun:
    return run_inspector(deps, tmp_path / "home", "--format", "json", "-q", *args, "--", *target)


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_the_inspector_lists_and_gets_prompts_and_reads_resources_over_stdio(
    npm_deps: NpmDeps, tmp_path: Path, servers: dict[str, Upstream], era: str
) -> None:
    config = everything_config(tmp_path, servers)
    target = [str(PML), "--config", str(config), "serve", "--stdio"]
    era_args = ("--protocol-era", era)
    prompts = inspect(npm_deps, tmp_path, target, *era_args, "--method", "prompts/list")
    got = inspect(
        npm_deps,
        tmp_path,
        target,
        *era_args,
        "--method",
        "prompts/get",
        "--prompt-name",
        "everything__args-prompt",
        "--prompt-args",
        "city=Nantes",
        "state=PL",
    )
    resources = inspect(npm_deps, tmp_path, target, *era_args, "--method", "resources/list")
    templates = inspect(
        npm_deps, tmp_path, target, *era_args, "--method", "resources/templates/list"
    )
    read = inspect(
        npm_deps, tmp_path, target, *era_args, "--method", "resources/read", "--uri", ARCHITECTURE
    )
    unknown = inspect(
        npm_deps,
        tmp_path,
        target,
        *era_args,
        "--method",
        "prompts/get",
        "--prompt-name",
        "nowhere__nothing",
    )

    names = {prompt["name"] for prompt in prompts.result()["prompts"]}
    assert "everything__args-prompt" in names
    assert "Nantes" in str(got.result()["messages"])
    assert ARCHITECTURE in {r["uri"] for r in resources.result()["resources"]}
    assert TEXT_TEMPLATE in {t["uriTemplate"] for t in templates.result()["resourceTemplates"]}
    assert read.result()["contents"][0]["uri"] == ARCHITECTURE
    assert "nowhere__nothing" in str(unknown.error())


def test_the_inspector_sets_the_log_level_over_http(
    npm_deps: NpmDeps, tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    config = everything_config(tmp_path, servers)
    key = create_key(config, "local", "default", "e2e")["key"]
    with pml_http(config, tmp_path / "pml.log") as gateway:
        auth = ("--stored-auth-only", "--header", f"Authorization: Bearer {key}")
        target = [gateway.mcp_url]
        level = inspect(
            npm_deps,
            tmp_path,
            target,
            *auth,
            "--protocol-era",
            "legacy",
            "--method",
            "logging/setLevel",
            "--log-level",
            "debug",
        )
        prompts = inspect(npm_deps, tmp_path, target, *auth, "--method", "prompts/list")
    assert level.result() == {} or "error" not in level.result()
    assert "everything__simple-prompt" in {p["name"] for p in prompts.result()["prompts"]}
