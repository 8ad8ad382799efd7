"""``pml serve --stdio`` in front of real MCP servers, driven by the SDK client.

The upstream servers are the real third-party ones (``mcp-server-time``, ``mcp-server-git``,
``@modelcontextprotocol/server-filesystem``, ``-memory``, ``-everything``); every result PML
passes through is compared with the same call made directly to the same server.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import mcp.client.stdio as sdk_stdio
import mcp_types
import pytest
from mcp import Client

from e2e.support import (
    META_TOOLS,
    Upstream,
    alive,
    child_running,
    comparable,
    error_of,
    pml_stdio,
    process_tree,
    result_json,
    sqlite_url,
    wait_gone,
    write_config,
)

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

RESTART_TIMEOUT_S = 30.0

# (server, tool, arguments): deterministic calls, so direct and proxied results can match.
PASS_CALLS: list[tuple[str, str, dict[str, Any]]] = [
    (
        "time",
        "convert_time",
        {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"},
    ),
    ("git", "git_status", {"repo_path": "{repo}"}),
    ("filesystem", "read_text_file", {"path": "{files}/note.txt"}),
    ("filesystem", "list_directory", {"path": "{files}"}),
    ("memory", "read_graph", {}),
    ("everything", "echo", {"message": "héllo through PML"}),
    ("everything", "get-structured-content", {"location": "Chicago"}),
    ("everything", "get-sum", {"a": 2, "b": 40}),
]


def config_for(tmp_path: Path, servers: dict[str, Upstream], *names: str) -> Path:
    chosen = [servers[name] for name in names] if names else list(servers.values())
    return write_config(tmp_path / "pml.toml", chosen, database_url=sqlite_url(tmp_path))


def with_paths(arguments: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    folders = {"repo": tmp_path / "repo", "files": tmp_path / "files"}
    return {
        key: value.format(**folders) if isinstance(value, str) else value
        for key, value in arguments.items()
    }


NOT_ANSWERED = mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message="not answered here")


async def _no_sample(context: Any, params: mcp_types.CreateMessageRequestParams) -> Any:
    return NOT_ANSWERED


async def _no_elicit(context: Any, params: mcp_types.ElicitRequestParams) -> Any:
    return NOT_ANSWERED


async def _no_roots(context: Any) -> Any:
    return NOT_ANSWERED


async def direct_tool_names(servers: dict[str, Upstream]) -> dict[str, list[str]]:
    """Each server's own tool names, asked directly (in parallel) by a client that declares
    what PML's upstream sessions declare (sampling, elicitation, roots: PML relays them),
    since a server may offer more tools to such a client (server-everything does)."""
    names: dict[str, list[str]] = {}

    async def one(upstream: Upstream) -> None:
        async with Client(
            upstream.params(),
            sampling_callback=_no_sample,
            elicitation_callback=_no_elicit,
            list_roots_callback=_no_roots,
        ) as client:
            names[upstream.name] = [tool.name for tool in (await client.list_tools()).tools]

    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            for upstream in servers.values():
                group.start_soon(one, upstream)
    return names


async def call_until_ok(client: Client, tool: str, arguments: dict[str, Any]) -> Any:
    """Call ``tool`` until it succeeds (a restarted upstream), for at most the restart timeout."""
    with anyio.fail_after(RESTART_TIMEOUT_S):
        while True:
            result = await client.call_tool(tool, arguments)
            if not result.is_error:
                return result
            await anyio.sleep(0.25)


GENERATIONS = pytest.mark.parametrize(
    ("mode", "protocol"),
    [("auto", "2026-07-28"), ("legacy", "2025-11-25")],
    ids=["modern", "legacy"],
)


@GENERATIONS
async def test_tools_list_is_the_meta_tools_plus_every_upstream_tool_as_server__tool(
    tmp_path: Path, servers: dict[str, Upstream], mode: str, protocol: str
) -> None:
    upstream = await direct_tool_names(servers)
    async with pml_stdio(config_for(tmp_path, servers), tmp_path / "pml.log", mode=mode) as gw:
        assert gw.client.protocol_version == protocol
        listed = {tool.name: tool for tool in (await gw.client.list_tools()).tools}

    passed_through = {f"{server}__{tool}" for server, tools in upstream.items() for tool in tools}
    assert "time__get_current_time" in passed_through
    assert set(listed) == META_TOOLS | passed_through
    assert all(0 < len(name) <= 64 for name in listed)


async def test_pass_through_tools_keep_the_upstream_input_schema(
    tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    everything = servers["everything"]
    async with Client(everything.params()) as direct:
        own = {tool.name: tool for tool in (await direct.list_tools()).tools}
    async with pml_stdio(config_for(tmp_path, servers, "everything"), tmp_path / "pml.log") as gw:
        listed = {tool.name: tool for tool in (await gw.client.list_tools()).tools}

    for name in ("echo", "get-sum", "get-structured-content"):
        assert listed[f"everything__{name}"].input_schema == own[name].input_schema


async def test_pass_through_calls_return_the_upstream_result_unchanged(
    tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    calls = [(server, tool, with_paths(args, tmp_path)) for server, tool, args in PASS_CALLS]
    answers: dict[int, dict[str, Any]] = {}
    for name in dict.fromkeys(server for server, _, _ in calls):  # one session per server
        async with Client(servers[name].params()) as client:
            for index, (server, tool, arguments) in enumerate(calls):
                if server == name:
                    answers[index] = comparable(await client.call_tool(tool, arguments))
    direct = [answers[index] for index in range(len(calls))]

    async with pml_stdio(config_for(tmp_path, servers), tmp_path / "pml.log") as gw:
        proxied = [
            comparable(await gw.client.call_tool(f"{server}__{tool}", arguments))
            for server, tool, arguments in calls
        ]

    for (server, tool, _), mine, theirs in zip(calls, proxied, direct, strict=True):
        assert not theirs["isError"], f"{server}:{tool} failed directly: {theirs}"
        assert mine == theirs, f"{server}__{tool} changed the upstream result"


async def test_cap_list_on_a_fresh_database_is_empty_under_both_spellings(
    tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    async with pml_stdio(config_for(tmp_path, servers, "time"), tmp_path / "pml.log") as gw:
        listed = await gw.client.call_tool("cap_list", {})
        alias = await gw.client.call_tool("cap:list", {})

    assert not listed.is_error
    assert result_json(listed) == {"items": [], "total": 0}
    assert listed.structured_content == {"items": [], "total": 0}
    assert result_json(alias) == {"items": [], "total": 0}


MARKERS = {
    "time": "mcp-server-time",
    "git": "mcp-server-git",
    "filesystem": "server-filesystem",
    "memory": "server-memory",
    "everything": "server-everything",
}


async def test_each_upstream_runs_once_reused_across_calls_and_stops_with_the_gateway(
    tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    async with pml_stdio(config_for(tmp_path, servers), tmp_path / "pml.log") as gw:
        await gw.client.list_tools()  # the servers start in the background: listed once started
        first = {name: child_running(gw.pid, marker) for name, marker in MARKERS.items()}
        for _ in range(3):
            result = await gw.client.call_tool("time__get_current_time", {"timezone": "UTC"})
            assert not result.is_error
        again = {name: child_running(gw.pid, marker) for name, marker in MARKERS.items()}
        tree = process_tree(gw.pid)

    assert again == first
    assert len(set(first.values())) == len(servers)
    assert wait_gone(tree, timeout_s=1.0) == [], "the gateway left processes running"


async def test_a_killed_upstream_is_unavailable_others_keep_serving_and_it_comes_back(
    tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    config = config_for(tmp_path, servers, "time", "everything")
    async with pml_stdio(config, tmp_path / "pml.log") as gw:
        before = await gw.client.call_tool("time__get_current_time", {"timezone": "UTC"})
        assert not before.is_error
        killed = child_running(gw.pid, "mcp-server-time")
        os.kill(killed, signal.SIGKILL)
        assert wait_gone([killed]) == []

        failed = await gw.client.call_tool("time__get_current_time", {"timezone": "UTC"})
        error = error_of(failed)
        echoed = await gw.client.call_tool("everything__echo", {"message": "still here"})
        recovered = await call_until_ok(gw.client, "time__get_current_time", {"timezone": "UTC"})
        restarted = child_running(gw.pid, "mcp-server-time")

    assert error["code"] == "UPSTREAM_UNAVAILABLE"
    assert "time" in error["message"]
    assert not echoed.is_error
    assert comparable(echoed)["content"][0]["text"] == "Echo: still here"
    assert result_json(recovered)["timezone"] == "UTC"
    assert restarted != killed


async def test_an_upstream_killed_mid_call_fails_that_call_promptly(
    tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    config = config_for(tmp_path, servers, "time", "everything")
    async with pml_stdio(config, tmp_path / "pml.log") as gw:
        await gw.client.list_tools()  # the servers start in the background: listed once started
        victim = child_running(gw.pid, "server-everything")
        outcome: dict[str, Any] = {}

        async def long_call() -> None:
            started = time.monotonic()
            outcome["result"] = await gw.client.call_tool(
                "everything__trigger-long-running-operation", {"duration": 20, "steps": 20}
            )
            outcome["seconds"] = time.monotonic() - started

        with anyio.fail_after(15):
            async with anyio.create_task_group() as group:
                group.start_soon(long_call)
                await anyio.sleep(1.0)  # let the call reach the upstream
                os.kill(victim, signal.SIGKILL)
        other = await gw.client.call_tool("time__get_current_time", {"timezone": "UTC"})

    assert error_of(outcome["result"])["code"] == "UPSTREAM_UNAVAILABLE"
    assert "everything" in error_of(outcome["result"])["message"]
    assert outcome["seconds"] < 10
    assert not other.is_error


async def test_a_server_whose_command_does_not_exist_leaves_the_other_two_working(
    tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    broken = Upstream("broken", str(tmp_path / "no-such-mcp-server"), ("--flag",))
    config = write_config(
        tmp_path / "pml.toml",
        [servers["time"], broken, servers["everything"]],
        database_url=sqlite_url(tmp_path),
    )
    async with pml_stdio(config, tmp_path / "pml.log") as gw:
        names = {tool.name for tool in (await gw.client.list_tools()).tools}
        now = await gw.client.call_tool("time__get_current_time", {"timezone": "UTC"})
        echoed = await gw.client.call_tool("everything__echo", {"message": "two of three"})

    assert {"time__get_current_time", "everything__echo"} <= names
    assert names >= META_TOOLS
    assert not any(name.startswith("broken__") for name in names)
    assert result_json(now)["timezone"] == "UTC"
    assert not echoed.is_error


async def test_a_server_that_never_answers_does_not_hold_up_the_others(
    tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    silent = Upstream("silent", sys.executable, ("-c", "import sys; sys.stdin.read()"))
    config = write_config(
        tmp_path / "pml.toml",
        [servers["time"], silent, servers["everything"]],
        database_url=sqlite_url(tmp_path),
        upstream={"start_timeout_s": 3.0},
    )
    with anyio.fail_after(30):
        async with pml_stdio(config, tmp_path / "pml.log") as gw:
            names = {tool.name for tool in (await gw.client.list_tools()).tools}
            echoed = await gw.client.call_tool("everything__echo", {"message": "not blocked"})

    assert "everything__echo" in names
    assert not any(name.startswith("silent__") for name in names)
    assert not echoed.is_error


async def test_a_call_that_outlasts_the_call_timeout_fails_with_timeout_naming_the_server(
    tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    config = write_config(
        tmp_path / "pml.toml",
        [servers["time"], servers["everything"]],
        database_url=sqlite_url(tmp_path),
        upstream={"call_timeout_s": 1.0},
    )
    operation_s = 3
    async with pml_stdio(config, tmp_path / "pml.log") as gw:
        # The gateway answers before its upstream servers are up: wait for "everything"
        # first, so the time measured is the call's own and not the server's start-up too.
        up = await gw.client.call_tool("everything__echo", {"message": "up"})
        assert not up.is_error
        started = time.monotonic()
        with anyio.fail_after(15):
            slow = await gw.client.call_tool(
                "everything__trigger-long-running-operation",
                {"duration": operation_s, "steps": operation_s},
            )
        waited = time.monotonic() - started
        other = await gw.client.call_tool("time__get_current_time", {"timezone": "UTC"})
        # Let the upstream finish its operation: stopping PML while an upstream is busy is
        # the next test's subject, not this one's.
        await anyio.sleep(max(0.0, operation_s + 0.5 - (time.monotonic() - started)))

    error = error_of(slow)
    assert error["code"] == "TIMEOUT"
    assert "everything" in error["message"]
    assert 0.9 < waited < operation_s
    assert not other.is_error


# How long the client waits after closing PML's stdin before it signals PML's process group:
# the SDK's default, and an impatient client whose SIGTERM reaches PML halfway through its
# orderly stop (then a late signal must still stop the children, not end PML at once).
@pytest.mark.parametrize("client_grace_s", [2.0, 0.2], ids=["patient-client", "impatient-client"])
async def test_stopping_the_gateway_while_an_upstream_is_busy_stops_that_upstream_too(
    tmp_path: Path,
    servers: dict[str, Upstream],
    monkeypatch: pytest.MonkeyPatch,
    client_grace_s: float,
) -> None:
    monkeypatch.setattr(sdk_stdio, "PROCESS_TERMINATION_TIMEOUT", client_grace_s)
    config = write_config(
        tmp_path / "pml.toml",
        [servers["everything"]],
        database_url=sqlite_url(tmp_path),
        upstream={"call_timeout_s": 1.0},
    )
    async with pml_stdio(config, tmp_path / "pml.log") as gw:
        busy = await gw.client.call_tool(
            "everything__trigger-long-running-operation", {"duration": 60, "steps": 60}
        )
        tree = process_tree(gw.pid)
        upstream = child_running(gw.pid, "server-everything")

    assert error_of(busy)["code"] == "TIMEOUT"  # the upstream is still working on it
    assert upstream in tree
    assert alive(tree) == [], "processes outlived the gateway"
