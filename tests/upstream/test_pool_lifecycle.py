"""Starting, lazy servers, idling, HTTP upstreams and what the pool reports."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.server import Server

from pml.config import ServerSettings, UpstreamSettings
from pml.errors import UpstreamUnavailable
from pml.storage.catalog_repo import CatalogStore
from pml.storage.database import Database
from pml.upstream.base import UpstreamPool
from pml.upstream.pool import ClientPool
from upstream.helpers import (
    TOY_TOOL_COUNT,
    ChangingServer,
    processes_with,
    state_of,
    text_of,
    toy,
    wait_for_port,
    wait_until,
)

pytestmark = pytest.mark.anyio


async def test_servers_start_in_parallel() -> None:
    # Each server's start waits until all three are starting: only a parallel start finishes.
    arrived: list[str] = []
    everyone = anyio.Event()

    def meeting(name: str) -> Server[Any]:
        @asynccontextmanager
        async def lifespan(server: Server[Any]) -> AsyncIterator[dict[str, Any]]:
            arrived.append(name)
            if len(arrived) == 3:
                everyone.set()
            await everyone.wait()
            yield {}

        return Server(name, lifespan=lifespan, on_list_tools=ChangingServer().server_list_tools)

    servers = {name: meeting(name) for name in ("a", "b", "c")}
    async with ClientPool(servers, settings=UpstreamSettings(start_timeout_s=3)) as pool:
        assert {status.state for status in pool.status()} == {"running"}
        assert sorted(arrived) == ["a", "b", "c"]


async def test_one_session_per_server_is_reused_for_every_call() -> None:
    tag = uuid.uuid4().hex
    async with ClientPool({"toy": toy(tag=tag)}) as pool:
        pids = {text_of(await pool.call_tool("toy", "pid")) for _ in range(20)}
        assert len(pids) == 1
        assert pool.status()[0].extra["sessions_opened"] == 1
        assert len(processes_with(tag)) == 1


async def test_the_pool_satisfies_the_upstream_pool_protocol() -> None:
    pool: UpstreamPool = ClientPool({"mem": ChangingServer().server})
    await pool.start()
    await pool.start()  # a second start is a no-op
    try:
        assert [tool.address for tool in await pool.list_tools()] == [
            "mem:echo",
            "mem:grow",
            "mem:mutate",
        ]
    finally:
        await pool.stop()
    with pytest.raises(RuntimeError, match="cannot be started again"):
        await pool.start()


async def test_a_lazy_server_starts_on_first_use_and_stops_when_idle() -> None:
    tag = uuid.uuid4().hex
    settings = UpstreamSettings(idle_timeout_s=0.4)
    async with ClientPool({"lazy": toy(tag=tag, lazy=True)}, settings=settings) as pool:
        assert state_of(pool, "lazy") == "idle"
        assert processes_with(tag) == []
        assert await pool.list_tools() == []  # nothing stored yet, and not started

        first = text_of(await pool.call_tool("lazy", "pid"))
        assert state_of(pool, "lazy") == "running"
        assert len(await pool.list_tools()) == TOY_TOOL_COUNT

        await wait_until(lambda: state_of(pool, "lazy") == "idle")
        await wait_until(lambda: processes_with(tag) == [])
        assert len(await pool.list_tools()) == TOY_TOOL_COUNT  # the catalog is still known

        second = text_of(await pool.call_tool("lazy", "pid"))
        assert second != first
        assert pool.status()[0].extra["sessions_opened"] == 2
    assert processes_with(tag) == []


async def test_a_lazy_server_is_not_stopped_while_a_call_is_running() -> None:
    settings = UpstreamSettings(idle_timeout_s=0.2)
    async with ClientPool({"lazy": toy(lazy=True)}, settings=settings) as pool:
        await pool.call_tool("lazy", "echo", {"text": "warm up"})
        with pytest.raises(Exception, match="did not answer"):
            await pool.call_tool("lazy", "hang", timeout_s=0.5)  # longer than the idle timeout
        assert state_of(pool, "lazy") == "running"


async def test_lazy_servers_list_their_stored_catalog_before_they_start(db: Database) -> None:
    store = CatalogStore(db)
    stored = [types.Tool(name="echo", description="Stored.", input_schema={"type": "object"})]
    await store.record_catalog("lazy", stored)
    servers = {"lazy": toy(lazy=True), "off": toy(disabled=True)}
    async with ClientPool(servers, catalog=store) as pool:
        tools = await pool.list_tools()
        assert [(tool.address, tool.definition.description) for tool in tools] == [
            ("lazy:echo", "Stored.")
        ]
        assert state_of(pool, "lazy") == "idle"
        assert state_of(pool, "off") == "disabled"
        with pytest.raises(UpstreamUnavailable, match="'off' is disabled"):
            await pool.call_tool("off", "echo")


async def test_every_state_change_is_recorded_in_the_status_table(db: Database) -> None:
    store = CatalogStore(db)
    servers = {
        "mem": ChangingServer().server,
        "broken": ServerSettings(command="pml-no-such"),
        "lazy": toy(lazy=True),
    }
    pool = ClientPool(servers, catalog=store, reporter_id="test-host:1")
    await pool.start()
    try:
        await pool.call_tool("mem", "echo")
        recorded = {status.name: status for status in await store.load_status()}
        assert recorded["mem"].state == "running"
        assert recorded["mem"].tool_count == 3
        assert recorded["broken"].state == "failed"
        assert recorded["broken"].last_error == "command not found: pml-no-such"
        assert recorded["mem"].extra["reported_by"] == "test-host:1"
        assert recorded["lazy"].state == "idle"

        await pool.call_tool("lazy", "echo", {"text": "wake up"})  # a change after start()
        with anyio.fail_after(5):
            while (await store.load_status())[1].state != "running":  # noqa: ASYNC110
                await anyio.sleep(0.02)
    finally:
        await pool.stop()
    after = {status.name: status for status in await store.load_status()}
    assert {status.state for status in after.values()} == {"stopped"}
    assert after["mem"].last_latency_ms is not None  # the last call's latency is kept
    assert [tool.name for tool in await store.load_catalog("mem")] == ["echo", "grow", "mutate"]


async def test_an_http_server_is_reached_with_its_headers(
    http_toy: tuple[str, subprocess.Popen[bytes]],
) -> None:
    url, process = http_toy
    await wait_for_port(url)
    servers = {
        "web": ServerSettings(url=url, headers={"X-Token": "s3cret"}),
        "nokey": ServerSettings(url=url),
    }
    async with ClientPool(servers) as pool:
        web, nokey = pool.status()[1], pool.status()[0]
        assert (web.state, web.transport, web.tool_count) == ("running", "http", TOY_TOOL_COUNT)
        assert nokey.state == "failed"
        result = await pool.call_tool("web", "add", {"a": 2, "b": 3})
        assert result.structured_content == {"sum": 5}

        process.kill()
        process.wait()
        with pytest.raises(UpstreamUnavailable, match="'web'"):
            await pool.call_tool("web", "echo", {"text": "gone"})
        assert state_of(pool, "web") == "failed"


async def test_stop_before_start_marks_everything_stopped() -> None:
    pool = ClientPool({"a": toy(), "b": toy(disabled=True)})
    await pool.stop()
    assert [status.state for status in pool.status()] == ["stopped", "disabled"]
    with pytest.raises(UpstreamUnavailable, match="not running"):
        await pool.call_tool("a", "echo")


async def test_status_reports_latency_and_protocol_generation() -> None:
    async with ClientPool({"legacy": toy("--legacy"), "modern": toy()}) as pool:
        for name in ("legacy", "modern"):
            await pool.call_tool(name, "echo", {"text": "x"})
        legacy, modern = pool.status()
        assert legacy.extra["protocol_version"] == "2025-11-25"
        assert modern.extra["protocol_version"] == "2026-07-28"
        assert legacy.last_latency_ms is not None
        assert 0 < legacy.last_latency_ms < 1000
        assert legacy.updated_at is not None


async def test_concurrent_first_calls_to_a_lazy_server_share_one_start() -> None:
    tag = uuid.uuid4().hex
    async with ClientPool({"lazy": toy(tag=tag, lazy=True)}) as pool:
        pids: list[str] = []

        async def call() -> None:
            pids.append(text_of(await pool.call_tool("lazy", "pid")))

        async with anyio.create_task_group() as tg:
            for _ in range(10):
                tg.start_soon(call)

        assert len(pids) == 10
        assert len(set(pids)) == 1
        assert pool.status()[0].extra["sessions_opened"] == 1
        assert len(processes_with(tag)) == 1


async def test_a_stdio_server_gets_its_env_and_cwd_over_a_minimal_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PML_TEST_GATEWAY_SECRET", "not for children")
    monkeypatch.setenv("LANG", "C.UTF-8")
    server = toy(env={"PML_TEST_VAR": "given", "LANG": "fr_FR.UTF-8"}, cwd=str(tmp_path))
    async with ClientPool({"toy": server}) as pool:
        seen = json.loads(text_of(await pool.call_tool("toy", "env")))
    assert seen["cwd"] == str(tmp_path)
    assert seen["env"]["PML_TEST_VAR"] == "given"
    assert seen["env"]["LANG"] == "fr_FR.UTF-8"  # the server's env wins
    assert seen["env"]["PATH"] == os.environ["PATH"]
    assert "PML_TEST_GATEWAY_SECRET" not in seen["env"]
