"""The gateway never makes the agent wait for its upstream servers (SPEC §2, §3).

``initialize`` is answered while servers are still starting, ``tools/list`` waits for them
at most ``[upstream] list_wait_s``, a server that joins later arrives with
``tools/list_changed``, and ``pml_execute`` naming a server still starting waits for it.
The servers are real child processes: one that never answers, and one held at a gate (a
file the test creates) before it becomes the toy server.
"""

from __future__ import annotations

import json
import logging
import sys
import uuid
from collections.abc import AsyncGenerator, Awaitable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
from mcp import Client
from mcp.client.subscriptions import ToolsListChanged

from gateway.upstreams import ListChanged, Upstream, gateway_settings
from pml.config import ServerSettings, Settings, UpstreamSettings
from pml.gateway.server import Gateway, open_gateway
from pml.upstream.pool import ClientPool
from upstream.helpers import TOY_SERVER, state_of

pytestmark = pytest.mark.anyio
T = TypeVar("T")

WAIT_S = 20.0
GATED = """
import os, runpy, sys, time
gate = sys.argv[1]
for _ in range(3000):  # 60 s at most
    if os.path.exists(gate):
        break
    time.sleep(0.02)
sys.argv = [sys.argv[2], *sys.argv[3:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def stuck_server() -> ServerSettings:
    """A child that reads its stdin and never answers."""
    return ServerSettings(
        command=sys.executable, args=["-c", "import sys; sys.stdin.read()", uuid.uuid4().hex]
    )


def gated_server(gate: Path) -> ServerSettings:
    """The toy server, once ``gate`` exists."""
    args = ["-c", GATED, str(gate), str(TOY_SERVER), "--tag", uuid.uuid4().hex]
    return ServerSettings(command=sys.executable, args=args)


def settings_for(sqlite_url: str, *, list_wait_s: float, start_timeout_s: float = 30) -> Settings:
    upstream = UpstreamSettings(list_wait_s=list_wait_s, start_timeout_s=start_timeout_s)
    base = gateway_settings(sqlite_url, expose_upstream=True)
    return base.model_copy(update={"upstream": upstream})


@pytest.fixture
async def stuck_gateway(sqlite_url: str) -> AsyncGenerator[tuple[Gateway, ClientPool]]:
    pool = ClientPool({"a": Upstream("a").server, "mute": stuck_server()})
    async with open_gateway(settings_for(sqlite_url, list_wait_s=0.3), pool=pool) as gateway:
        yield gateway, pool


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_stuck_server_delays_neither_initialize_nor_the_tool_list(
    stuck_gateway: tuple[Gateway, ClientPool], mode: Any
) -> None:
    gateway, pool = stuck_gateway
    assert state_of(pool, "mute") == "starting"
    with anyio.fail_after(WAIT_S):
        async with Client(gateway.server, mode=mode) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
    assert {"pml_execute", "a__echo"} <= names
    assert not any(name.startswith("mute__") for name in names)
    assert state_of(pool, "mute") == "starting"  # answered without it: it never settled


async def test_discovery_answers_while_a_server_is_stuck(
    stuck_gateway: tuple[Gateway, ClientPool],
) -> None:
    gateway, pool = stuck_gateway
    with anyio.fail_after(WAIT_S):
        async with Client(gateway.server) as client:
            result = await client.call_tool("pml_discover", {"intent": "echo the arguments"})
    assert not result.is_error
    assert "a:echo" in json.dumps(result.structured_content)
    assert state_of(pool, "mute") == "starting"


async def test_a_server_that_joins_later_is_announced_in_both_generations(
    sqlite_url: str, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    pool = ClientPool({"a": Upstream("a").server, "late": gated_server(gate)})
    async with open_gateway(settings_for(sqlite_url, list_wait_s=0.2), pool=pool) as gateway:
        changed = ListChanged()
        async with (
            Client(gateway.server, mode="legacy", message_handler=changed) as legacy,
            Client(gateway.server) as modern,
            modern.listen(tools_list_changed=True) as stream,
        ):
            before = {tool.name for tool in (await legacy.list_tools()).tools}
            assert "a__echo" in before
            assert not any(name.startswith("late__") for name in before)
            await anyio.Path(gate).touch()
            with anyio.fail_after(WAIT_S):
                await changed.event.wait()
                assert isinstance(await anext(aiter(stream)), ToolsListChanged)
            after = {t.name for t in (await modern.list_tools(cache_mode="bypass")).tools}
    assert "late__echo" in after


async def test_the_tool_list_waits_for_a_server_starting_within_the_window(
    sqlite_url: str, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    pool = ClientPool({"late": gated_server(gate)})
    listed: list[str] = []
    async with (
        open_gateway(settings_for(sqlite_url, list_wait_s=WAIT_S), pool=pool) as gateway,
        Client(gateway.server, mode="legacy") as client,
        anyio.create_task_group() as group,
    ):

        async def list_tools() -> None:
            listed.extend(tool.name for tool in (await client.list_tools()).tools)

        group.start_soon(list_tools)
        await anyio.sleep(0.3)
        assert listed == []  # waiting for "late", still held at its gate
        await anyio.Path(gate).touch()
    assert "late__echo" in listed


async def test_pml_execute_waits_for_a_server_still_starting(
    sqlite_url: str, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    pool = ClientPool({"late": gated_server(gate)})
    async with open_gateway(settings_for(sqlite_url, list_wait_s=0), pool=pool) as gateway:
        assert state_of(pool, "late") == "starting"
        async with Client(gateway.server) as client:
            with anyio.fail_after(WAIT_S):
                result = await _open_gate_while(
                    gate,
                    client.call_tool(
                        "pml_execute",
                        {
                            "intent": "echo through a server that is still starting",
                            "code": 'return await mcp.late.echo(text="hello")',
                        },
                    ),
                )
    assert not result.is_error, result.structured_content
    assert "hello" in json.dumps(result.structured_content)


async def test_pml_execute_names_a_server_that_never_starts_within_the_run_limit(
    sqlite_url: str,
) -> None:
    pool = ClientPool({"mute": stuck_server()})
    settings = settings_for(sqlite_url, list_wait_s=0)
    settings = settings.model_copy(
        update={"sandbox": settings.sandbox.model_copy(update={"wall_time_s": 0.5})}
    )
    async with open_gateway(settings, pool=pool) as gateway, Client(gateway.server) as client:
        result = await client.call_tool(
            "pml_execute",
            {"intent": "read the mute server", "code": "return await mcp.mute.anything()"},
        )
    assert result.is_error
    error = (result.structured_content or {})["error"]
    assert error["code"] == "UPSTREAM_UNAVAILABLE"
    assert error["message"] == "Upstream server 'mute' is still starting after 0.5 s"


async def test_a_server_that_times_out_at_start_is_logged_once_by_name(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    pool = ClientPool({"mute": stuck_server()}, settings=UpstreamSettings(start_timeout_s=0.3))
    caplog.set_level(logging.WARNING, logger="pml.upstream")
    settings = settings_for(sqlite_url, list_wait_s=0, start_timeout_s=0.3)
    async with open_gateway(settings, pool=pool):
        with anyio.fail_after(WAIT_S):
            while state_of(pool, "mute") == "starting":  # noqa: ASYNC110 - no event to wait on
                await anyio.sleep(0.02)
    lines = [r.getMessage() for r in caplog.records if "'mute'" in r.getMessage()]
    assert lines == ["upstream server 'mute' failed: no answer within 0.3 s while starting"]


async def _open_gate_while(gate: Path, call: Awaitable[T]) -> T:
    """Await ``call``, opening ``gate`` 0.3 s after it began."""

    async def open_gate() -> None:
        await anyio.sleep(0.3)
        await anyio.Path(gate).touch()

    results: list[T] = []
    async with anyio.create_task_group() as group:
        group.start_soon(open_gate)
        results.append(await call)
    return results[0]
