"""Upstream servers that are missing, crash, get killed or hang: the pool keeps serving."""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import git
import mcp_types as types
import pytest
from mcp.server import Server
from mcp.shared.exceptions import MCPError

from pml.config import ServerSettings, UpstreamSettings
from pml.errors import ExecutionTimeout, ToolCallError, UpstreamUnavailable
from pml.upstream.pool import ClientPool
from pml.upstream.session import backoff_delay
from upstream.helpers import (
    VENV_BIN,
    children_running,
    processes_with,
    state_of,
    text_of,
    toy,
    wait_until,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    repo = git.Repo.init(tmp_path / "repo")
    (tmp_path / "repo" / "README.md").write_text("hello\n")
    repo.index.add(["README.md"])
    repo.index.commit("first commit")
    return tmp_path / "repo"


async def test_two_real_servers_work_when_a_third_has_no_command(git_repo: Path) -> None:
    servers = {
        "time": ServerSettings(command=str(VENV_BIN / "mcp-server-time")),
        "git": ServerSettings(command=str(VENV_BIN / "mcp-server-git"), args=["-r", str(git_repo)]),
        "broken": ServerSettings(command="pml-test-no-such-command"),
    }
    async with ClientPool(servers) as pool:
        states = {status.name: status for status in pool.status()}
        assert states["broken"].state == "failed"
        assert states["broken"].last_error == "command not found: pml-test-no-such-command"
        assert (states["time"].state, states["git"].state) == ("running", "running")
        assert states["time"].tool_count == 2
        assert states["git"].tool_count >= 10

        now = await pool.call_tool("time", "get_current_time", {"timezone": "UTC"})
        log = await pool.call_tool("git", "git_log", {"repo_path": str(git_repo)})

        assert not now.is_error
        assert '"timezone": "UTC"' in text_of(now)
        assert not log.is_error
        assert "first commit" in text_of(log)
        with pytest.raises(UpstreamUnavailable, match=r"'broken'.*command not found"):
            await pool.call_tool("broken", "anything", {})
        assert {status.name for status in pool.status() if status.last_latency_ms} == {
            "time",
            "git",
        }
        assert children_running("mcp-server-time")
        assert children_running("mcp-server-git")
    assert children_running("mcp-server-time") == []
    assert children_running("mcp-server-git") == []
    assert {status.state for status in pool.status()} == {"stopped"}


async def test_a_server_that_dies_mid_call_fails_the_call_and_restarts_on_a_later_one() -> None:
    tag = uuid.uuid4().hex
    async with ClientPool({"toy": toy(tag=tag)}) as pool:
        first_pid = text_of(await pool.call_tool("toy", "pid"))

        with pytest.raises(UpstreamUnavailable, match="'toy' went away during toy:crash") as died:
            await pool.call_tool("toy", "crash")
        assert died.value.code == "UPSTREAM_UNAVAILABLE"
        assert state_of(pool, "toy") == "failed"
        status = pool.status()[0]
        assert status.last_error is not None
        assert "crashing on purpose" in status.last_error

        # Inside the backoff window a call fails at once, naming the server and the wait.
        started = time.perf_counter()
        with pytest.raises(
            UpstreamUnavailable, match=r"'toy'.*next restart attempt in \d"
        ) as early:
            await pool.call_tool("toy", "echo", {"text": "too soon"})
        assert time.perf_counter() - started < 0.1
        await wait_until(lambda: processes_with(tag) == [])

        await anyio.sleep(early.value.data["retry_in_s"])
        second_pid = text_of(await pool.call_tool("toy", "pid"))

        assert second_pid != first_pid
        assert state_of(pool, "toy") == "running"
        assert pool.status()[0].extra["sessions_opened"] == 2
    assert processes_with(tag) == []


async def test_killing_the_server_during_a_call_reports_it_unavailable_then_it_comes_back() -> None:
    tag = uuid.uuid4().hex
    async with ClientPool({"toy": toy(tag=tag), "other": toy()}) as pool:
        pid = int(text_of(await pool.call_tool("toy", "pid")))
        outcome: list[BaseException] = []

        async def hanging_call() -> None:
            try:
                await pool.call_tool("toy", "hang", timeout_s=10)
            except UpstreamUnavailable as error:
                outcome.append(error)

        async with anyio.create_task_group() as tg:
            tg.start_soon(hanging_call)
            await anyio.sleep(0.1)  # let the call reach the server
            os.kill(pid, signal.SIGKILL)

        assert len(outcome) == 1
        assert "'toy'" in str(outcome[0])
        assert (
            text_of(await pool.call_tool("other", "echo", {"text": "still here"})) == "still here"
        )
        await wait_until(lambda: processes_with(tag) == [])
        with pytest.raises(UpstreamUnavailable) as early:
            await pool.call_tool("toy", "echo", {"text": "x"})
        await anyio.sleep(early.value.data["retry_in_s"])
        assert text_of(await pool.call_tool("toy", "echo", {"text": "back"})) == "back"
    assert processes_with(tag) == []


async def test_a_server_that_never_answers_times_out_and_the_others_keep_working() -> None:
    settings = UpstreamSettings(call_timeout_s=0.3)
    async with ClientPool({"slow": toy(), "fast": toy()}, settings=settings) as pool:
        started = time.perf_counter()
        with pytest.raises(
            ExecutionTimeout, match=r"slow:hang did not answer within 0\.3 s"
        ) as hung:
            await pool.call_tool("slow", "hang")
        assert 0.3 <= time.perf_counter() - started < 1.5
        assert hung.value.code == "TIMEOUT"
        assert hung.value.data == {"server": "slow", "tool": "hang", "timeout_s": 0.3}

        with pytest.raises(ExecutionTimeout, match=r"within 0\.1 s"):
            await pool.call_tool("slow", "hang", timeout_s=0.1)
        assert text_of(await pool.call_tool("fast", "echo", {"text": "ok"})) == "ok"
        assert text_of(await pool.call_tool("slow", "echo", {"text": "alive"})) == "alive"
        assert state_of(pool, "slow") == "running"


async def test_a_server_that_exits_at_start_is_failed_with_its_stderr() -> None:
    async with ClientPool({"bad": toy("--fail-start"), "good": toy()}) as pool:
        bad, good = pool.status()
        assert bad.state == "failed"
        assert good.state == "running"
        assert bad.last_error is not None
        assert "cannot start, bad configuration" in bad.last_error


async def test_a_server_slower_to_start_than_the_start_timeout_is_failed() -> None:
    # This child reads its stdin and never answers: the start times out, the process stops.
    tag = uuid.uuid4().hex
    silent = ServerSettings(
        command=sys.executable, args=["-c", "import sys; sys.stdin.read()", tag]
    )
    settings = UpstreamSettings(start_timeout_s=0.3)
    async with ClientPool({"mute": silent}, settings=settings) as pool:
        status = pool.status()[0]
        assert status.state == "failed"
        assert status.last_error == "no answer within 0.3 s while starting"
        await wait_until(lambda: processes_with(tag) == [])


async def test_stop_leaves_no_child_process_even_with_a_call_in_flight() -> None:
    tag = uuid.uuid4().hex
    pool = ClientPool({"toy": toy(tag=tag), "lazy": toy(tag=tag, lazy=True)})
    await pool.start()
    await pool.call_tool("lazy", "pid")
    assert len(processes_with(tag)) == 2
    errors: list[Exception] = []

    async def hanging_call() -> None:
        try:
            await pool.call_tool("toy", "hang")
        except UpstreamUnavailable as error:
            errors.append(error)

    async with anyio.create_task_group() as tg:
        tg.start_soon(hanging_call)
        await anyio.sleep(0.1)
        await pool.stop()
    await pool.stop()  # idempotent

    assert processes_with(tag) == []
    assert len(errors) == 1
    assert {status.state for status in pool.status()} == {"stopped"}
    with pytest.raises(UpstreamUnavailable, match="'toy' is not running"):
        await pool.call_tool("toy", "echo")


def test_restart_backoff_doubles_from_half_a_second_with_jitter_up_to_thirty() -> None:
    for failures, low, high in [(1, 0.375, 0.625), (2, 0.75, 1.25), (3, 1.5, 2.5), (6, 12, 20)]:
        delays = [backoff_delay(failures) for _ in range(200)]
        assert all(low <= delay <= high for delay in delays)
        assert len(set(delays)) > 100  # jittered, so restarts of many servers spread out
    assert max(backoff_delay(100) for _ in range(200)) == 30


FAILED = types.CallToolResult(
    content=[types.TextContent(type="text", text="disk full")],
    structured_content={"error": "disk full"},
    is_error=True,
)


def _strict_server() -> Server[Any]:
    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[types.Tool(name=n, input_schema={"type": "object"}) for n in ("refuse", "fail")]
        )

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name == "refuse":
            raise MCPError(types.INVALID_PARAMS, "argument 'a' is required")
        return FAILED

    return Server("strict", on_list_tools=list_tools, on_call_tool=call_tool)


async def test_an_error_result_passes_unchanged_and_a_refusal_is_a_tool_error() -> None:
    async with ClientPool({"strict": _strict_server()}) as pool:
        result = await pool.call_tool("strict", "fail", {"x": 1})
        assert result.is_error
        assert result.content == FAILED.content
        assert result.structured_content == FAILED.structured_content

        with pytest.raises(ToolCallError, match="strict:refuse: argument 'a' is required") as error:
            await pool.call_tool("strict", "refuse")
        assert error.value.code == "TOOL_ERROR"
        assert error.value.data["upstream_code"] == types.INVALID_PARAMS
        assert state_of(pool, "strict") == "running"
