"""Live reload of an open gateway: what changes at the next call, what a client is told, and
what needs a restart. Configs are real files re-read through the same loader ``pml serve``
uses; hostile configs are in ``test_reload_refused.py``."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
from pathlib import Path

import anyio
import pytest
from mcp import Client

from gateway.reloading import (
    CLOCK,
    RELOAD_LOGGER,
    Running,
    base_config,
    config_fixture,  # noqa: F401 - a fixture
    execute_error,
    names_of,
    running_fixture,  # noqa: F401 - a fixture
    write,
)
from gateway.upstreams import ListChanged, Upstream, data_of, error_of
from pml.config import Settings
from pml.gateway.reload import (
    Reloader,
    ReloadRequests,
    config_loader,
    in_force,
    settings_diff,
    sighup_requests,
)
from pml.gateway.server import open_gateway
from pml.upstream.pool import ClientPool

pytestmark = pytest.mark.anyio

# -- the settings diff -------------------------------------------------------------------


def test_the_diff_names_what_changed_and_what_only_a_restart_applies() -> None:
    old = Settings(database_url="sqlite:///a.db")
    new = Settings.model_validate(
        {
            "database_url": "sqlite:///b.db",
            "servers": {"clock": CLOCK},
            "routing": {"cloud": ["search*"], "trace_claim_lease_s": 99},
            "policy": {"debug_routing": True},
        }
    )
    diff = settings_diff(old, new)
    assert diff.changed == {"database_url", "servers", "routing", "policy"}
    assert diff.live == ("policy", "routing", "servers")
    assert diff.restart == ("database_url", "policy.debug_routing", "routing.trace_claim_lease_s")


def test_equal_settings_differ_in_nothing() -> None:
    settings = Settings.model_validate({"database_url": "sqlite:///a.db", "servers": {"c": CLOCK}})
    again = Settings.model_validate({"database_url": "sqlite:///a.db", "servers": {"c": CLOCK}})
    diff = settings_diff(settings, again)
    assert not diff.changed
    assert diff.restart == ()


def test_what_runs_after_a_reload_keeps_the_restart_only_settings() -> None:
    old = Settings.model_validate({"database_url": "sqlite:///a.db", "scope": {"org": "old"}})
    new = Settings.model_validate(
        {
            "database_url": "sqlite:///b.db",
            "scope": {"org": "new"},
            "sandbox": {"max_tool_calls": 3},
            "routing": {"local": ["fs"], "trace_claim_lease_s": 99},
        }
    )
    now = in_force(old, new, settings_diff(old, new).restart)
    assert now.database_url == "sqlite:///a.db"
    assert now.scope.org == "old"
    assert now.sandbox.max_tool_calls == 3
    assert now.routing.local == ["fs"]
    assert now.routing.trace_claim_lease_s == old.routing.trace_claim_lease_s
    # The next reload names the same pending restart again.
    assert settings_diff(now, new).restart == (
        "database_url",
        "routing.trace_claim_lease_s",
        "scope",
    )


# -- what applies at the next call -------------------------------------------------------


async def test_a_new_deny_rule_refuses_the_next_call(
    running: Running, sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    tools = running.gateway.tools
    scope = running.gateway.default_scope
    assert not (await tools.call_tool(scope, "a__echo", {"text": "hi"})).is_error

    caplog.set_level(logging.WARNING, logger=RELOAD_LOGGER)
    line = await running.reload_with(
        base_config(sqlite_url, permissions={"allow": ["*:*"], "deny": ["a:echo"]})
    )

    assert line == "reloaded: applied: [permissions]"
    assert [r.getMessage() for r in caplog.records if r.name == RELOAD_LOGGER] == [line]
    refused = await tools.call_tool(scope, "a__echo", {"text": "hi"})
    assert error_of(refused)["code"] == "PERMISSION_DENIED"
    assert "a:echo" in error_of(refused)["message"]
    assert not (await tools.call_tool(scope, "a__mixed", {})).is_error  # others still go


async def test_a_new_policy_row_and_mode_apply_at_the_next_call(
    running: Running, sqlite_url: str
) -> None:
    tools, scope = running.gateway.tools, running.gateway.default_scope
    nothing = {"intents": {"general": {"forbidden": ["*"]}}}
    await running.reload_with(base_config(sqlite_url, policy=nothing))
    assert error_of(await tools.call_tool(scope, "a__echo", {}))["code"] == "POLICY_DENIED"

    await running.reload_with(base_config(sqlite_url, policy={**nothing, "mode": "audit"}))
    assert not (await tools.call_tool(scope, "a__echo", {})).is_error  # logged, not refused


async def test_grants_follow_the_policy_version_of_the_reloaded_rules(
    running: Running, sqlite_url: str
) -> None:
    policy = running.gateway.policy
    before = policy.grants.policy_version
    await running.reload_with(
        base_config(sqlite_url, policy={"capabilities": {"a:*": "file_write"}})
    )
    assert policy.grants.policy_version != before
    assert policy.grants.policy_version == policy.enforcer.policy_version
    assert policy.enforcer.capability_of("a", "echo") == "file_write"


async def test_new_sandbox_limits_apply_to_the_next_run(running: Running, sqlite_url: str) -> None:
    tools, scope = running.gateway.tools, running.gateway.default_scope
    code = "result = 1 + 1\nresult"
    first = await tools.call_tool(scope, "pml_execute", {"intent": "add", "code": code})
    assert data_of(first)["status"] == "success"

    await running.reload_with(base_config(sqlite_url, sandbox={"max_code_bytes": 5}))
    again = await tools.call_tool(scope, "pml_execute", {"intent": "add", "code": code})
    assert again.is_error
    assert execute_error(again)["code"] == "CODE_TOO_LARGE"


async def test_new_approval_settings_reach_the_desk(running: Running, sqlite_url: str) -> None:
    await running.reload_with(
        base_config(sqlite_url, permissions={"allow": ["*:*"], "approval_wait_s": 7})
    )
    assert running.gateway.policy.approvals.desk.settings.approval_wait_s == 7


async def test_stored_routing_follows_a_reloaded_routing_section(
    running: Running, sqlite_url: str
) -> None:
    tools, scope = running.gateway.tools, running.gateway.default_scope
    code = 'mcp.a.echo(text="hi")'
    created = data_of(
        await tools.call_tool(
            scope, "pml_execute", {"intent": "echo", "code": code, "name": "say:hi"}
        )
    )
    assert created["routing"] == "local"

    await running.reload_with(base_config(sqlite_url, routing={"cloud": ["a"]}))

    assert running.gateway.registry.routing.cloud == ("a", "pml")
    looked_up = data_of(await tools.call_tool(scope, "cap_lookup", {"name": "say:hi"}))
    assert looked_up["routing"] == "cloud"


async def test_restart_only_settings_are_named_and_the_rest_applies(
    running: Running, sqlite_url: str, tmp_path: Path
) -> None:
    data = base_config(
        f"sqlite:///{tmp_path / 'other.db'}",
        scope={"org": "other", "project": "webapp", "user": "erwan"},
        tools_page_size=5,
        permissions={"allow": ["*:*"], "deny": ["a:*"]},
    )
    line = await running.reload_with(data)
    assert line == (
        "reloaded: applied: [permissions]; needs a restart (not applied): "
        "database_url, scope, tools_page_size"
    )
    assert running.gateway.settings.database_url == sqlite_url
    assert running.gateway.settings.permissions.deny == ["a:*"]
    assert running.gateway.default_scope.org == "acme"


async def test_a_config_read_again_unchanged_changes_nothing(running: Running) -> None:
    before = running.gateway.settings
    report = await running.reloader.reload()
    assert report.line() == "reloaded: no change"
    assert running.gateway.settings is before


async def test_a_new_log_level_applies_at_once(running: Running, sqlite_url: str) -> None:
    from pml.telemetry import logs

    try:
        await running.reload_with(
            base_config(sqlite_url, log={"levels": {"pml.upstream": "ERROR"}})
        )
        assert logging.getLogger("pml.upstream").level == logging.ERROR
    finally:
        logs.reset()


# -- servers, and what clients are told --------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_an_added_server_is_listed_after_list_changed_without_a_reconnect(
    running: Running, sqlite_url: str, mode: str
) -> None:
    heard = ListChanged()
    async with Client(running.gateway.server, mode=mode, message_handler=heard) as client:
        assert "clock__get_current_time" not in await names_of(client)
        if mode == "auto":  # 2026-07-28: the client listens for the change
            async with client.listen(tools_list_changed=True) as changes:
                await running.reload_with(base_config(sqlite_url, servers={"clock": CLOCK}))
                with anyio.fail_after(10):
                    await anext(aiter(changes))
        else:
            await running.reload_with(base_config(sqlite_url, servers={"clock": CLOCK}))
            await heard.wait(timeout_s=10)
        assert "clock__get_current_time" in await names_of(client)
        result = await client.call_tool("clock__get_current_time", {"timezone": "UTC"})
        assert not result.is_error


async def test_a_removed_server_leaves_the_list_and_its_calls_fail(
    running: Running, sqlite_url: str
) -> None:
    await running.reload_with(base_config(sqlite_url, servers={"clock": CLOCK}))
    tools, scope = running.gateway.tools, running.gateway.default_scope
    assert "clock__get_current_time" in {tool.name for tool in await tools.list_tools(scope)}

    line = await running.reload_with(base_config(sqlite_url))

    assert line == "reloaded: servers removed: clock; applied: [servers]"
    assert "clock__get_current_time" not in {tool.name for tool in await tools.list_tools(scope)}
    assert "a__echo" in {tool.name for tool in await tools.list_tools(scope)}  # given, kept
    result = await tools.call_tool(scope, "clock__get_current_time", {"timezone": "UTC"})
    assert result.is_error


async def test_a_server_with_new_args_restarts_and_answers(
    running: Running, sqlite_url: str
) -> None:
    await running.reload_with(base_config(sqlite_url, servers={"clock": CLOCK}))
    moved = {**CLOCK, "args": ["--local-timezone", "Pacific/Noumea"]}
    line = await running.reload_with(base_config(sqlite_url, servers={"clock": moved}))
    assert line == "reloaded: servers restarted: clock; applied: [servers]"
    tools, scope = running.gateway.tools, running.gateway.default_scope
    described = {tool.name: tool for tool in await tools.list_tools(scope)}
    schema = json.dumps(described["clock__get_current_time"].input_schema)
    assert "Pacific/Noumea" in schema  # the new process names its zone


# -- requests: SIGHUP, coalescing, start-up ----------------------------------------------


async def test_sighup_becomes_a_reload_request_instead_of_ending_the_process() -> None:
    with sighup_requests() as requests:
        os.kill(os.getpid(), signal.SIGHUP)
        with anyio.fail_after(5):
            await requests.next()
    assert not requests.pending


async def test_requests_made_during_a_reload_make_exactly_one_more(
    running: Running, sqlite_url: str
) -> None:
    started, release = anyio.Event(), anyio.Event()
    loads = 0
    load = config_loader(running.config, environ={}, cwd=running.config.parent)

    def slow_load() -> Settings:  # runs in a worker thread, as every load does
        nonlocal loads
        loads += 1
        anyio.from_thread.run_sync(started.set)
        anyio.from_thread.run(release.wait)
        return load()

    reloader = Reloader(running.gateway, slow_load)
    requests = ReloadRequests()
    async with reloader.serving(requests):
        requests.request()
        with anyio.fail_after(10):
            await started.wait()
        for _ in range(5):
            requests.request()  # while the first one runs: coalesced
        release.set()
        with anyio.fail_after(10):
            while reloader.reloads < 2:  # noqa: ASYNC110 - the count has no event
                await anyio.sleep(0.01)
    assert loads == 2
    assert reloader.reloads == 2
    assert not requests.pending


async def test_a_request_made_during_start_up_is_served_once_serving(
    running: Running, sqlite_url: str
) -> None:
    requests = ReloadRequests()
    requests.request()  # SIGHUP arrived while the gateway was still opening
    write(running.config, base_config(sqlite_url, permissions={"allow": ["*:*"], "deny": ["a:*"]}))
    async with running.reloader.serving(requests):
        with anyio.fail_after(10):
            while running.reloader.reloads < 1:  # noqa: ASYNC110 - the count has no event
                await anyio.sleep(0.01)
    assert running.gateway.settings.permissions.deny == ["a:*"]


async def test_a_burst_of_sighups_never_runs_two_reloads_at_once(running: Running) -> None:
    load = config_loader(running.config, environ={}, cwd=running.config.parent)
    inside, most = 0, 0
    guard = threading.Lock()

    def counted_load() -> Settings:
        nonlocal inside, most
        with guard:
            inside += 1
            most = max(most, inside)
        try:
            return load()
        finally:
            with guard:
                inside -= 1

    reloader = Reloader(running.gateway, counted_load)
    with sighup_requests() as requests:
        async with reloader.serving(requests):
            for _ in range(50):
                os.kill(os.getpid(), signal.SIGHUP)
            with anyio.fail_after(10):
                while reloader.reloads < 1 or requests.pending:  # noqa: ASYNC110 - no event
                    await anyio.sleep(0.01)
    assert most == 1
    assert 1 <= reloader.reloads <= 2  # one running, at most one more for those that came during it


class FixedPool:
    """A pool that cannot follow a new server list (the real pool behind, without
    ``reconfigure``), as a gateway embedding PML may pass one."""

    def __init__(self, pool: ClientPool) -> None:
        self.start, self.stop, self.status = pool.start, pool.stop, pool.status
        self.list_tools, self.call_tool = pool.list_tools, pool.call_tool
        self.call_tool_raw, self.on_tools_changed = pool.call_tool_raw, pool.on_tools_changed
        self.set_events, self.settled, self.session = pool.set_events, pool.settled, pool.session


async def test_servers_of_a_pool_that_cannot_follow_need_a_restart(
    config: Path, sqlite_url: str
) -> None:
    load = config_loader(config, environ={}, cwd=config.parent)
    pool = FixedPool(ClientPool({"a": Upstream("a").server}))
    async with open_gateway(load(), pool=pool) as gateway:
        reloader = Reloader(gateway, load)
        data = base_config(sqlite_url, servers={"clock": CLOCK}, sandbox={"max_tool_calls": 9})
        write(config, data)
        line = (await reloader.reload()).line()
        assert line == "reloaded: applied: [sandbox]; needs a restart (not applied): servers"
        assert gateway.settings.servers == {}  # what runs, named again at the next reload
        assert gateway.settings.sandbox.max_tool_calls == 9
        assert (await reloader.reload()).restart == ("servers",)
