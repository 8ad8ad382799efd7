"""Live reload end to end: a real ``pml serve`` (stdio and HTTP), the real time server, a real
SDK client that stays connected while the config is edited on disk and SIGHUP or
``pml reload`` is sent; the client is told (``tools/list_changed``) and sees the new
server's tools without reconnecting. A config that cannot be used leaves the old one.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from functools import partial
from pathlib import Path

import anyio
import mcp_types
import pytest
from mcp import Client
from platformdirs import user_data_dir

from e2e.support import (
    Upstream,
    create_key,
    http_client,
    pml_cli,
    pml_http,
    pml_stdio,
    python_server,
    sqlite_url,
    write_config,
)
from gateway.upstreams import ListChanged
from pml.gateway.running import run_directory, running_gateways

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

NOTICE_WAIT_S = 30.0
NEW_TOOL = "clock2__get_current_time"
# The time servers run under names the built-in capability map does not know (unknown:
# asks for approval by default): an operator's allow rule, as in a real config.
ALLOW = {"permissions": {"allow": ["*:*"]}}


@pytest.fixture(autouse=True)
def same_data_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    # A stdio gateway gets the SDK's minimal environment (HOME, not XDG_DATA_HOME): the
    # shell's pml reload must look where it does.
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)


def clocks() -> tuple[Upstream, Upstream]:
    time = str(python_server("mcp-server-time"))
    return (
        Upstream("clock", time, ("--local-timezone", "UTC")),
        Upstream("clock2", time, ("--local-timezone", "Pacific/Tarawa")),
    )


async def names(client: Client) -> set[str]:
    return {tool.name for tool in (await client.list_tools(cache_mode="bypass")).tools}


async def listed_after_notice(
    client: Client, heard: ListChanged, shows: Callable[[set[str]], bool]
) -> set[str]:
    """The client's tool names once a ``list_changed`` led to a list that ``shows`` the
    change (a notice of an earlier change may still be on its way)."""
    with anyio.fail_after(NOTICE_WAIT_S):
        while True:
            await heard.wait(timeout_s=NOTICE_WAIT_S)
            listed = await names(client)
            if shows(listed):
                return listed


async def log_shows(log: Path, text: str) -> None:
    """Wait (bounded) until the gateway's stderr log holds ``text``."""
    with anyio.fail_after(NOTICE_WAIT_S):
        while text not in await anyio.Path(log).read_text(errors="replace"):  # noqa: ASYNC110
            await anyio.sleep(0.05)  # a log file has no event


def first_text(result: mcp_types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, mcp_types.TextContent)
    return block.text


async def reload_cli(config: Path) -> str:
    return await anyio.to_thread.run_sync(partial(pml_cli, config, "reload"))


async def test_sighup_adds_a_server_that_a_connected_stdio_client_sees(tmp_path: Path) -> None:
    clock, clock2 = clocks()
    database = sqlite_url(tmp_path)
    config = write_config(tmp_path / "pml.toml", [clock], database_url=database, extra=ALLOW)
    log = tmp_path / "stdio.log"
    heard = ListChanged()
    async with pml_stdio(config, log, mode="legacy", message_handler=heard) as gateway:
        client = gateway.client
        listed = await names(client)
        assert "clock__get_current_time" in listed
        assert NEW_TOOL not in listed

        write_config(config, [clock, clock2], database_url=database, extra=ALLOW)
        os.kill(gateway.pid, signal.SIGHUP)

        listed = await listed_after_notice(client, heard, lambda seen: NEW_TOOL in seen)
        assert "clock__get_current_time" in listed
        result = await client.call_tool(NEW_TOOL, {"timezone": "Pacific/Tarawa"})
        assert not result.is_error
        assert "Pacific/Tarawa" in first_text(result)
        await log_shows(log, "reloaded: servers added: clock2; applied: [servers]")

        # Removing it again: the client is told, the tool is gone, the process stops.
        write_config(config, [clock], database_url=database, extra=ALLOW)
        os.kill(gateway.pid, signal.SIGHUP)
        listed = await listed_after_notice(client, heard, lambda seen: NEW_TOOL not in seen)
        assert "clock__get_current_time" in listed


async def test_pml_reload_reaches_a_2026_client_and_a_bad_config_is_refused(
    tmp_path: Path,
) -> None:
    clock, clock2 = clocks()
    database = sqlite_url(tmp_path)
    config = write_config(tmp_path / "pml.toml", [clock], database_url=database, extra=ALLOW)
    log = tmp_path / "stdio.log"
    async with pml_stdio(config, log) as gateway:
        client = gateway.client
        assert client.protocol_version == "2026-07-28"
        async with client.listen(tools_list_changed=True) as changes:
            write_config(config, [clock, clock2], database_url=database, extra=ALLOW)
            told = await reload_cli(config)
            assert told.startswith("told 1 gateway to reload")
            assert str(gateway.pid) in told
            with anyio.fail_after(NOTICE_WAIT_S):
                while NEW_TOOL not in await names(client):
                    await anext(aiter(changes))

        # A config that cannot be used: refused, logged, and the running one stays.
        config.write_bytes(b"\x00\xffnot toml at all")
        await reload_cli(config)
        await log_shows(log, "reload refused, the running config stays in force: ")
        assert "not UTF-8" in log.read_text(errors="replace")
        result = await client.call_tool(NEW_TOOL, {"timezone": "UTC"})
        assert not result.is_error
        assert NEW_TOOL in await names(client)


async def test_a_sighup_during_start_up_is_served_once_started(tmp_path: Path) -> None:
    clock, clock2 = clocks()
    database = sqlite_url(tmp_path)
    config = write_config(tmp_path / "pml.toml", [clock], database_url=database, extra=ALLOW)
    log = tmp_path / "stdio.log"
    runs = run_directory(Path(user_data_dir("pml")))
    signalled: list[int] = []

    async def hup_when_announced() -> None:
        # The file appears before the gateway opens (database, servers): signal it then.
        with anyio.fail_after(NOTICE_WAIT_S):
            while not (found := running_gateways(runs, config)):  # noqa: ASYNC110 - no event
                await anyio.sleep(0.01)
        write_config(config, [clock, clock2], database_url=database, extra=ALLOW)
        for gateway in found:
            os.kill(gateway.pid, signal.SIGHUP)
            signalled.append(gateway.pid)

    async with anyio.create_task_group() as group:
        group.start_soon(hup_when_announced)
        async with pml_stdio(config, log) as gateway:
            await log_shows(log, "reloaded: servers added: clock2")
            assert signalled == [gateway.pid]
            assert NEW_TOOL in await names(gateway.client)


async def test_pml_reload_reaches_an_http_gateway_and_its_connected_client(
    tmp_path: Path,
) -> None:
    clock, clock2 = clocks()
    database = sqlite_url(tmp_path)
    config = write_config(tmp_path / "pml.toml", [clock], database_url=database, extra=ALLOW)
    key = create_key(config, "local", "default", user="e2e")["key"]
    log = tmp_path / "http.log"
    heard = ListChanged()
    with pml_http(config, log) as gateway:
        async with http_client(
            gateway.mcp_url, key, mode="legacy", message_handler=heard
        ) as client:
            assert NEW_TOOL not in await names(client)

            write_config(
                config,
                [clock, clock2],
                database_url=database,
                extra={"permissions": {"allow": ["*:*"], "deny": ["clock:*"]}},
            )
            told = await reload_cli(config)
            assert told.startswith("told 1 gateway")

            listed = await listed_after_notice(client, heard, lambda seen: NEW_TOOL in seen)
            assert NEW_TOOL in listed
            assert not (await client.call_tool(NEW_TOOL, {"timezone": "UTC"})).is_error
            denied = await client.call_tool("clock__get_current_time", {"timezone": "UTC"})
            assert denied.is_error  # [permissions] applied at the next call
            assert "PERMISSION_DENIED" in first_text(denied)
            # The reload's own line ends it (clients may hear of the new server before).
            await log_shows(
                gateway.log, "reloaded: servers added: clock2; applied: [permissions], [servers]"
            )
