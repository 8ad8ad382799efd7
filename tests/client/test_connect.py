"""``ConnectTools`` in front of a real shared gateway on loopback (SPEC §9), in-process.

The gateway (``[routing] local = ["files"]``, its own server ``a``) is served by
``running_http`` with alice's API key; this machine runs ``files`` in its own pool, the real
sandbox and its own enforcement point; the real ``RemoteGateway`` speaks streamable HTTP to
the gateway and a real ``TraceSyncer`` (its queue in a temporary file) sends the traces when
a test says so (``sync``), so every trace can be read from the queue before it leaves.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncGenerator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from client.connecting import (
    ECHO_GATEWAY,
    ECHO_LOCAL,
    LOCAL,
    Machine,
    Shared,
    open_machine,
    open_shared,
)
from client.serving import serving_on
from e2e.support import restartable_port
from gateway.upstreams import ListChanged, data_of, error_of
from pml import __version__
from pml.client.connect import ConnectTools
from pml.client.remote import RemoteGateway, client_headers, mcp_url
from pml.client.serve import build_connect_server, default_queue_path
from pml.client.syncer import TraceSyncer
from pml.client.trace_queue import TraceQueue
from pml.errors import InvalidInput, UpstreamUnavailable
from pml.gateway.http import base_url, listen_socket, running_http
from pml.gateway.notify import ToolListNotifier
from pml.gateway.results import CAPABILITY_META
from pml.gateway.schemas import STATIC_TOOLS

pytestmark = pytest.mark.anyio

LIMIT_S = 20.0  # the bound on every wait: generous, a slow machine must not fail a test
INTENT = "echo a text"


class Told:
    """A tools-changed listener that counts how often it was told."""

    def __init__(self) -> None:
        self.count = 0
        self._event = anyio.Event()

    async def __call__(self) -> None:
        self.count += 1
        self._event.set()

    async def wait(self) -> None:
        with anyio.fail_after(LIMIT_S):
            await self._event.wait()
        self._event = anyio.Event()


@dataclass
class Connect:
    """``pml connect`` as ``pml.client.serve`` wires it, minus stdio; the gateway is served
    only inside ``serving()`` (always on the same port)."""

    shared: Shared
    machine: Machine
    port: int
    remote: RemoteGateway
    tools: ConnectTools
    syncer: TraceSyncer
    queue: TraceQueue

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def serving(self) -> AbstractAsyncContextManager[str]:
        return running_http(self.shared.gateway, port=self.port)

    async def call(self, name: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
        with anyio.fail_after(LIMIT_S):
            return await self.tools.call_tool(name, arguments)

    async def execute(self, code: str, **arguments: Any) -> tuple[bool, dict[str, Any]]:
        """``pml_execute`` through pml connect: (isError, its JSON, checked equal in text)."""
        result = await self.call("pml_execute", {"intent": INTENT, "code": code, **arguments})
        data = result.structured_content
        assert data is not None
        block = result.content[0]
        assert isinstance(block, mcp_types.TextContent)
        assert json.loads(block.text) == data
        return bool(result.is_error), data

    async def list_tools(self) -> list[mcp_types.Tool]:
        with anyio.fail_after(LIMIT_S):
            return await self.tools.list_tools()

    async def refresh(self) -> bool:
        with anyio.fail_after(LIMIT_S):
            return await self.tools.refresh()

    def queued(self) -> list[dict[str, Any]]:
        """The traces waiting in the queue, oldest first, as they will be sent."""
        return [item.trace for item in self.queue.peek(100)]

    async def sync(self) -> dict[str, int]:
        """Send the queue to the gateway: how many traces got each status."""
        with anyio.fail_after(LIMIT_S):
            report = await self.syncer.sync_once()
        assert report.error is None, report
        assert self.queue.count() == 0
        return report.statuses

    async def capabilities(self) -> list[dict[str, Any]]:
        """The gateway's capabilities for alice (asked of the gateway itself)."""
        gateway = self.shared.gateway
        with anyio.fail_after(LIMIT_S):
            result = await gateway.tools.call_tool(gateway.default_scope, "cap_list", {})
        return data_of(result)["items"]

    async def made_on_the_gateway(self, code: str, name: str) -> None:
        """A named capability made by alice straight on the gateway (code it runs itself)."""
        gateway = self.shared.gateway
        arguments = {"intent": "made on the gateway", "code": code, "name": name}
        with anyio.fail_after(LIMIT_S):
            result = await gateway.tools.call_tool(gateway.default_scope, "pml_execute", arguments)
        assert data_of(result)["status"] == "success"

    async def uses(self, ref: str) -> int:
        gateway = self.shared.gateway
        with anyio.fail_after(LIMIT_S):
            await gateway.executor.flush()
            resolved = await gateway.registry.resolve(gateway.default_scope, ref)
        return resolved.record.usage_count


@asynccontextmanager
async def open_connect(
    tmp_path: Path, *, push_changes: bool = True, **client: Any
) -> AsyncGenerator[Connect]:
    """Both sides and the client's parts, the gateway not served yet (``client``: this
    machine's settings). ``push_changes``: the gateway's ``tools/list_changed`` reaches
    ``ConnectTools`` (as ``serve_connect`` wires it)."""
    async with (
        open_shared(tmp_path / "server") as shared,
        open_machine(tmp_path / "client", **client) as machine,
    ):
        port = restartable_port()  # the gateway is served and stopped on it
        url = f"http://127.0.0.1:{port}"
        remote = RemoteGateway(url, shared.key, servers=[LOCAL])
        with TraceQueue(tmp_path / "traces.sqlite3") as queue:
            async with httpx.AsyncClient(headers=client_headers(shared.key, [LOCAL])) as http:
                syncer = TraceSyncer(queue, base_url=url, api_key=shared.key, http=http)
                tools = ConnectTools(remote, machine.runner, syncer)
                if push_changes:
                    remote.on_tools_changed(tools.gateway_changed)
                yield Connect(shared, machine, port, remote, tools, syncer, queue)


@asynccontextmanager
async def online(connect: Connect) -> AsyncGenerator[Connect]:
    """The gateway served and the session open (closed before the gateway stops)."""
    async with connect.serving(), connect.remote.running():
        assert await connect.remote.wait_connected(LIMIT_S)
        yield connect


@pytest.fixture
async def connected(tmp_path: Path) -> AsyncGenerator[Connect]:
    async with open_connect(tmp_path) as connect, online(connect):
        yield connect


@asynccontextmanager
async def direct(connect: Connect) -> AsyncGenerator[Client]:
    """An SDK client straight to the gateway, with the same key and headers."""
    headers = client_headers(connect.shared.key, [LOCAL])
    async with create_mcp_http_client(headers=headers) as http:
        transport = streamable_http_client(f"{connect.url}/mcp", http_client=http)
        async with Client(transport) as client:
            yield client


def error_of_execute(result: mcp_types.CallToolResult) -> dict[str, Any]:
    """The error of a failed ``pml_execute`` (its ``{"status": "error"}`` answer)."""
    assert result.is_error
    assert result.structured_content is not None
    assert result.structured_content["status"] == "error"
    return result.structured_content["error"]


def dumped(tools: list[mcp_types.Tool]) -> list[dict[str, Any]]:
    return [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in tools]


async def learn_named(connect: Connect, name: str = "fs:echo") -> str:
    """A named capability whose code uses this machine's server, learned from its trace."""
    is_error, answer = await connect.execute(ECHO_LOCAL, name=name)
    assert not is_error, answer
    assert await connect.sync() == {"captured": 1}
    [item] = [item for item in await connect.capabilities() if item["display_name"] == name]
    return item["fqdn"]


# -- the tool list ------------------------------------------------------------------------


async def test_before_the_gateway_was_ever_reached_the_fixed_tools_are_listed(
    tmp_path: Path,
) -> None:
    async with open_connect(tmp_path) as connect, connect.remote.running():
        started = anyio.current_time()
        listed = await connect.list_tools()
        assert anyio.current_time() - started < 3.0  # the failed attempt is not waited out
    names = [tool.name for tool in listed]
    assert names == list(STATIC_TOOLS)
    assert {"pml_discover", "pml_execute"} < set(names)
    assert {name for name in names if name.startswith("cap_")} == set(names) - {
        "pml_discover",
        "pml_execute",
    }
    assert dumped(listed) == dumped(list(STATIC_TOOLS.values()))


async def test_the_tools_listed_are_the_gateways_for_that_key(connected: Connect) -> None:
    await connected.made_on_the_gateway("return 6 * 7", "m:answer")
    listed = await connected.list_tools()
    with anyio.fail_after(LIMIT_S):
        async with direct(connected) as client:
            on_gateway = (await client.list_tools()).tools
    assert dumped(listed) == dumped(on_gateway)
    assert "mcp__m__answer" in {tool.name for tool in listed}


async def test_refresh_notices_a_new_capability_tool_and_tells_listeners_once(
    tmp_path: Path,
) -> None:
    async with open_connect(tmp_path, push_changes=False) as connect, online(connect):
        before = await connect.list_tools()
        told = Told()
        connect.tools.on_tools_changed(told)
        assert await connect.refresh() is False
        await learn_named(connect)  # a hand-off: the list changes only when the trace lands
        assert told.count == 0
        assert await connect.refresh() is True
        assert told.count == 1
        after = await connect.list_tools()
        assert {tool.name for tool in after} - {tool.name for tool in before} == {"mcp__fs__echo"}
        assert await connect.refresh() is False
        assert told.count == 1


async def test_a_named_capability_made_on_the_gateway_is_announced_once(tmp_path: Path) -> None:
    async with open_connect(tmp_path, push_changes=False) as connect, online(connect):
        await connect.list_tools()
        told = Told()
        connect.tools.on_tools_changed(told)
        code = "return 6 * 7"  # no server of this machine: it runs on the gateway
        is_error, answer = await connect.execute(code, name="m:answer")
        assert not is_error, answer
        assert (answer["status"], answer["result"]) == ("success", 42)
        assert "executedOn" not in answer
        assert told.count == 1
        assert "mcp__m__answer" in {tool.name for tool in await connect.list_tools()}
        is_error, _ = await connect.execute(code)  # the same code again: nothing new
        assert not is_error
        assert told.count == 1


async def test_the_gateways_list_changed_reaches_the_listeners_by_itself(
    connected: Connect,
) -> None:
    assert dumped(await connected.list_tools()) == dumped(list(STATIC_TOOLS.values()))
    told = Told()
    connected.tools.on_tools_changed(told)
    await learn_named(connected)
    await told.wait()
    assert "mcp__fs__echo" in {tool.name for tool in await connected.list_tools()}
    assert await connected.refresh() is False
    assert told.count == 1


async def test_the_agent_is_told_when_the_gateways_list_changes(connected: Connect) -> None:
    server = build_connect_server(connected.tools, ToolListNotifier())
    changed = ListChanged()
    with anyio.fail_after(LIMIT_S):
        async with Client(server, mode="legacy", message_handler=changed) as agent:
            listed = (await agent.list_tools(cache_mode="bypass")).tools
            assert dumped(listed) == dumped(await connected.list_tools())
            await learn_named(connected)
            await changed.wait(LIMIT_S)
            names = {tool.name for tool in (await agent.list_tools(cache_mode="bypass")).tools}
            assert "mcp__fs__echo" in names
            answer = await agent.call_tool("mcp__fs__echo", {"text": "from the agent"})
    assert answer.structured_content == {
        "server": LOCAL,
        "tool": "echo",
        "args": {"text": "from the agent"},
    }
    assert changed.count == 1


def test_each_gateway_and_key_has_its_own_trace_queue() -> None:
    one = default_queue_path("http://127.0.0.1:8765", "pml_a")
    assert default_queue_path("http://127.0.0.1:8765/mcp/", "pml_a") == one
    assert default_queue_path("http://127.0.0.1:8765", "pml_b") != one
    assert default_queue_path("http://127.0.0.1:8766", "pml_a") != one
    assert "pml_a" not in str(one)


# -- forwarded calls -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("pml_discover", {"intent": "echo a text"}),
        ("cap_list", {}),
        ("cap_list", {"pattern": "fs:*"}),
        ("cap_lookup", {"name": "fs:echo"}),
        ("cap_whois", {"fqdn": "acme.webapp.no.such.ab12"}),
        ("cap_list", {"limit": "many"}),
    ],
    ids=["discover", "list", "list-pattern", "lookup", "whois-unknown", "list-bad-args"],
)
async def test_forwarded_calls_answer_exactly_what_the_gateway_answers(
    connected: Connect, name: str, arguments: dict[str, Any]
) -> None:
    await learn_named(connected)
    await connected.made_on_the_gateway("return 6 * 7", "m:answer")
    forwarded = await connected.call(name, arguments)
    with anyio.fail_after(LIMIT_S):
        async with direct(connected) as client:
            answered = await client.call_tool(name, arguments)
    assert forwarded.model_dump(by_alias=True) == answered.model_dump(by_alias=True)
    assert forwarded.structured_content  # something was answered
    assert connected.machine.upstream.calls == [("echo", {"text": "hi"})]  # learn_named's


# -- pml_execute handed back ---------------------------------------------------------------


async def test_code_using_this_machines_server_runs_here_and_the_gateway_learns_it(
    connected: Connect,
) -> None:
    secret = "sk-live-0123456789abcdef"
    is_error, answer = await connected.execute(ECHO_LOCAL, args={"text": secret})
    assert not is_error, answer
    assert answer["status"] == "success"
    assert answer["result"] == {"server": LOCAL, "tool": "echo", "args": {"text": secret}}
    assert answer["executedOn"] == "client"
    assert answer["toolsUsed"] == [f"{LOCAL}:echo"]
    assert re.fullmatch(r"wf_[0-9a-f]{32}", answer["workflowId"])
    assert connected.machine.upstream.calls == [("echo", {"text": secret})]
    assert connected.shared.upstream.calls == []

    [trace] = connected.queued()
    assert trace["workflowId"] == answer["workflowId"]
    assert trace["success"] is True
    assert 0 < trace["durationMs"] < LIMIT_S * 1000
    assert "error" not in trace
    assert "offline" not in trace
    [task] = trace["taskResults"]
    assert set(task) == {"tool", "argsDigest", "durationMs", "success"}
    assert (task["tool"], task["success"]) == (f"{LOCAL}:echo", True)
    assert secret not in json.dumps(trace)

    assert await connected.capabilities() == []  # learned only from the trace
    assert await connected.sync() == {"captured": 1}
    [learned] = data_of(await connected.call("cap_list", {}))["items"]
    assert learned["display_name"].startswith("unnamed_")
    assert learned["tools_used"] == [f"{LOCAL}:echo"]
    assert connected.shared.upstream.calls == []


async def test_code_using_only_the_gateways_servers_runs_there(connected: Connect) -> None:
    is_error, answer = await connected.execute(ECHO_GATEWAY)
    assert not is_error, answer
    assert answer["status"] == "success"
    assert "executedOn" not in answer
    assert connected.shared.upstream.calls == [("echo", {"text": "on the gateway"})]
    assert connected.machine.upstream.calls == []
    assert connected.queued() == []


FAILURES = [
    (f'await mcp.{LOCAL}.echo(text="x")\nraise ValueError("boom")', {}, "EXECUTION_FAILED"),
    (f"return await mcp.{LOCAL}.fail()", {}, "TOOL_ERROR"),
    (
        f'await mcp.{LOCAL}.echo(text="x")\nwhile True:\n    pass',
        {"options": {"timeout_ms": 300}},
        "TIMEOUT",
    ),
    (f"return await mcp.{LOCAL}.nope()", {}, "UNKNOWN_TOOL"),
]


@pytest.mark.parametrize(
    ("code", "extra", "error_code"),
    FAILURES,
    ids=["raise", "tool-error", "timeout", "unknown-tool-here"],
)
async def test_a_failing_snippet_is_an_error_here_and_the_gateway_creates_nothing(
    connected: Connect, code: str, extra: dict[str, Any], error_code: str
) -> None:
    is_error, answer = await connected.execute(code, name="fs:broken", **extra)
    assert is_error
    assert answer["status"] == "error"
    assert answer["error"]["code"] == error_code, answer
    assert answer["executedOn"] == "client"
    [trace] = connected.queued()
    assert trace["workflowId"] == answer["workflowId"]
    assert trace["success"] is False
    assert trace["error"].startswith(f"{error_code}: ")
    assert await connected.sync() == {"failed": 1}
    assert await connected.capabilities() == []
    assert "mcp__fs__broken" not in {tool.name for tool in await connected.list_tools()}


async def test_a_capability_tool_using_this_machines_server_runs_here_and_is_counted(
    connected: Connect,
) -> None:
    fqdn = await learn_named(connected)
    assert await connected.uses(fqdn) == 1
    await connected.refresh()
    assert "mcp__fs__echo" in {tool.name for tool in await connected.list_tools()}

    result = await connected.call("mcp__fs__echo", {"text": "via the tool"})
    assert not result.is_error, result
    value = {"server": LOCAL, "tool": "echo", "args": {"text": "via the tool"}}
    assert result.structured_content == value
    block = result.content[0]
    assert isinstance(block, mcp_types.TextContent)
    assert json.loads(block.text) == value
    assert result.meta is not None
    details = result.meta[CAPABILITY_META]
    assert (details["capabilityFqdn"], details["capabilityName"]) == (fqdn, "fs:echo")
    assert connected.machine.upstream.calls[-1] == ("echo", {"text": "via the tool"})
    assert connected.shared.upstream.calls == []

    [trace] = connected.queued()
    assert trace["success"] is True
    assert await connected.sync() == {"captured": 1}
    assert await connected.uses(fqdn) == 2
    assert len(await connected.capabilities()) == 1  # a use, not a new capability


async def test_a_failing_capability_tool_is_an_error_result_and_counted_as_failed(
    connected: Connect,
) -> None:
    code = (
        f'echoed = await mcp.{LOCAL}.echo(text=args["text"])\n'
        'if args.get("boom"):\n    raise ValueError("boom")\nreturn echoed'
    )
    is_error, _ = await connected.execute(code, name="fs:fragile", args={"text": "a"})
    assert not is_error
    assert await connected.sync() == {"captured": 1}
    result = await connected.call("mcp__fs__fragile", {"text": "b", "boom": True})
    error = error_of(result)
    assert error["code"] == "EXECUTION_FAILED"
    assert "boom" in error["message"]
    assert connected.machine.upstream.calls[-1] == ("echo", {"text": "b"})
    [trace] = connected.queued()
    assert trace["success"] is False
    assert await connected.sync() == {"failed": 1}
    [item] = await connected.capabilities()
    assert item["display_name"] == "fs:fragile"


# -- this machine's enforcement point ------------------------------------------------------


@pytest.mark.parametrize(
    ("permissions", "says"),
    [
        ({"allow": ["*:*"], "deny": [f"{LOCAL}:echo"]}, f"{LOCAL}:echo"),
        ({"ask": [f"{LOCAL}:echo"]}, "pml perms grant"),
    ],
    ids=["deny", "ask"],
)
async def test_this_machines_permissions_refuse_the_call_here(
    tmp_path: Path, permissions: dict[str, Any], says: str
) -> None:
    async with open_connect(tmp_path, permissions=permissions) as connect, online(connect):
        is_error, answer = await connect.execute(ECHO_LOCAL)
        assert is_error
        assert answer["status"] == "error"
        assert answer["error"]["code"] == "PERMISSION_DENIED"
        assert says in answer["error"]["message"]
        assert answer["executedOn"] == "client"
        assert connect.machine.upstream.calls == []
        assert await connect.sync() == {"failed": 1}
        assert await connect.capabilities() == []


# -- offline -------------------------------------------------------------------------------


async def test_while_the_gateway_is_down_local_code_still_runs_and_is_learned_later(
    tmp_path: Path,
) -> None:
    async with open_connect(tmp_path) as connect, connect.remote.running():
        async with connect.serving():
            assert await connect.remote.wait_connected(LIMIT_S)
            await learn_named(connect, "fs:first")
            known = dumped(await connect.list_tools())
        # The gateway is gone (its block left); this machine's session has not noticed yet.
        offline_code = f'return await mcp.{LOCAL}.echo(text="offline")'
        is_error, answer = await connect.execute(offline_code, name="fs:offline")
        assert not is_error, answer
        assert answer["status"] == "success"
        assert answer["offline"] is True
        assert answer["executedOn"] == "client"
        assert answer["result"]["args"] == {"text": "offline"}
        assert answer["workflowId"].startswith("wf_c_")
        [trace] = connect.queued()
        assert trace["workflowId"] == answer["workflowId"]
        assert trace["offline"] == {"code": offline_code, "intent": INTENT, "name": "fs:offline"}

        is_error, refused = await connect.execute(ECHO_GATEWAY)
        assert is_error
        assert refused["error"]["code"] == "UPSTREAM_UNAVAILABLE"
        assert connect.url in refused["error"]["message"]
        assert "does not run" in refused["error"]["message"]
        is_error, refused = await connect.execute(ECHO_LOCAL, name="fs:first", update=True)
        assert is_error
        assert refused["error"]["code"] == "UPSTREAM_UNAVAILABLE"
        resume = {"workflow_id": "wf_" + "0" * 32, "approved": True}
        error = error_of_execute(
            await connect.call("pml_execute", {"intent": INTENT, "continue_workflow": resume})
        )
        assert error["code"] == "UPSTREAM_UNAVAILABLE"
        malformed = await connect.call("pml_execute", {"intent": INTENT, "code": 5})
        assert error_of_execute(malformed)["code"] == "INVALID_INPUT"
        # Code that calls none of this machine's tools runs, but there is nothing to learn:
        # the gateway would have run it itself, so no trace is queued for it.
        is_error, plain = await connect.execute("return 6 * 7")
        assert not is_error, plain
        assert (plain["result"], plain["offline"], plain["capture"]) == (42, True, "none")
        assert len(connect.machine.upstream.calls) == 2  # learn_named's and the offline run
        assert len(connect.queued()) == 1

        started = anyio.current_time()
        for _ in range(3):
            error = error_of(await connect.call("cap_list", {}))
            assert error["code"] == "UPSTREAM_UNAVAILABLE"
            assert connect.url in error["message"]
        assert anyio.current_time() - started < 3.0
        assert dumped(await connect.list_tools()) == known  # the last list it gave

        async with connect.serving():
            assert await connect.remote.wait_connected(LIMIT_S)
            assert await connect.sync() == {"captured": 1}
            listed = data_of(await connect.call("cap_list", {}))
            assert {item["display_name"] for item in listed["items"]} == {
                "fs:first",
                "fs:offline",
            }
            await connect.refresh()
            names = {tool.name for tool in await connect.list_tools()}
            assert {"mcp__fs__first", "mcp__fs__offline"} <= names


# -- the session to the gateway ------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "endpoint"),
    [
        ("http://127.0.0.1:8765", "http://127.0.0.1:8765/mcp"),
        ("http://127.0.0.1:8765/", "http://127.0.0.1:8765/mcp"),
        ("http://127.0.0.1:8765/mcp", "http://127.0.0.1:8765/mcp"),
        ("https://pml.example.com/mcp/", "https://pml.example.com/mcp"),
        ("https://pml.example.com/team/a", "https://pml.example.com/team/a/mcp"),
        ("http://[::1]:8765", "http://[::1]:8765/mcp"),
    ],
)
def test_the_mcp_endpoint_is_the_url_with_or_without_mcp(given: str, endpoint: str) -> None:
    assert mcp_url(given) == endpoint
    assert RemoteGateway(given, "key").url == endpoint


@pytest.mark.parametrize(
    "given",
    [
        "ftp://pml.example.com",
        "pml.example.com:8765",
        "file:///etc/passwd",
        "ws://127.0.0.1:8765",
        "http://",
        "https:///mcp",
        "http://127.0.0.1:port",
        " http://127.0.0.1:8765",
        "",
    ],
)
def test_a_url_that_is_not_http_is_refused(given: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        mcp_url(given)
    assert "http(s)://" in caught.value.message
    with pytest.raises(InvalidInput):
        RemoteGateway(given, "key")


async def test_a_wrong_api_key_fails_every_call_at_once_as_unreachable(
    connected: Connect,
) -> None:
    wrong = RemoteGateway(connected.url, "pml_" + "x" * 40, servers=[LOCAL])
    tools = ConnectTools(wrong, connected.machine.runner, connected.syncer)
    with anyio.fail_after(LIMIT_S):
        async with wrong.running():
            started = anyio.current_time()
            with pytest.raises(UpstreamUnavailable) as caught:
                await wrong.call_tool("cap_list", {})
            assert connected.url in caught.value.message
            assert "refused the API key (HTTP 401)" in caught.value.message
            with pytest.raises(UpstreamUnavailable):
                await wrong.list_tools()
            error = error_of(await tools.call_tool("pml_discover", {"intent": "x"}))
            assert error["code"] == "UPSTREAM_UNAVAILABLE"
            assert dumped(await tools.list_tools()) == dumped(list(STATIC_TOOLS.values()))
            assert anyio.current_time() - started < 3.0
            assert not wrong.connected
    assert connected.shared.upstream.calls == []


@asynccontextmanager
async def serving_app(app: Starlette) -> AsyncGenerator[str]:
    """``app`` under uvicorn on a free loopback port; yields its base URL."""
    with contextlib.closing(listen_socket("127.0.0.1", 0)) as sock:
        async with serving_on(app, sock):
            yield base_url(sock)


async def test_every_request_says_who_is_calling_and_which_servers_it_runs() -> None:
    seen: list[dict[str, str]] = []
    arrived = anyio.Event()

    async def refuse(request: Request) -> Response:
        seen.append(dict(request.headers))
        arrived.set()
        body = {"error": {"code": "UNAUTHORIZED", "message": "Invalid or revoked API key"}}
        return JSONResponse(body, status_code=401)

    app = Starlette(routes=[Route("/mcp", refuse, methods=["GET", "POST", "DELETE"])])
    async with serving_app(app) as url:
        remote = RemoteGateway(url, "pml_key-1", servers=[LOCAL, "git"])
        async with remote.running():
            with anyio.fail_after(LIMIT_S):
                await arrived.wait()
            with pytest.raises(UpstreamUnavailable):
                await remote.call_tool("cap_list", {})
    assert seen
    for headers in seen:
        assert headers["authorization"] == "Bearer pml_key-1"
        ours = {key: value for key, value in headers.items() if key.startswith("x-pml-")}
        assert ours == {
            "x-pml-client": f"pml-connect/{__version__}",
            "x-pml-client-servers": f"{LOCAL},git",
        }
    sent_to_traces = {key.lower(): value for key, value in client_headers("k", []).items()}
    assert sent_to_traces == {
        "authorization": "Bearer k",
        "x-pml-client": f"pml-connect/{__version__}",
        "x-pml-client-servers": "",
    }
