"""A running pool follows a new server list (a reload): real ``mcp-server-time`` processes."""

from __future__ import annotations

import anyio
import pytest

from pml.config import ServerSettings, UpstreamSettings
from pml.errors import ExecutionTimeout, UnknownTool, UpstreamUnavailable
from pml.storage.catalog_repo import CatalogStore
from pml.storage.database import Database
from pml.upstream.pool import ClientPool, PoolChanges
from upstream.helpers import VENV_BIN, children_running, state_of, text_of, toy, wait_until

pytestmark = pytest.mark.anyio

TIME = str(VENV_BIN / "mcp-server-time")
# Time zones nothing else runs with: this process's children are found by them.
USHUAIA = "America/Argentina/Ushuaia"
TARAWA = "Pacific/Tarawa"
NOUMEA = "Pacific/Noumea"


def time_server(
    zone: str, *, disabled: bool = False, env: dict[str, str] | None = None
) -> ServerSettings:
    args = ["--local-timezone", zone]
    return ServerSettings(command=TIME, args=args, disabled=disabled, env=env or {})


async def now_in(pool: ClientPool, server: str) -> str:
    result = await pool.call_tool(server, "get_current_time", {"timezone": "UTC"})
    assert not result.is_error
    return text_of(result)


async def test_an_added_server_starts_and_the_others_keep_their_sessions() -> None:
    first = time_server(USHUAIA)
    async with ClientPool({"clock": first}) as pool:
        [before] = children_running(USHUAIA)
        changes = await pool.reconfigure({"clock": first, "clock2": time_server(TARAWA)})

        assert changes == PoolChanges(added=("clock2",))
        assert state_of(pool, "clock2") == "running"
        assert "UTC" in await now_in(pool, "clock2")
        assert children_running(USHUAIA) == [before]  # untouched
        assert next(s for s in pool.status() if s.name == "clock").extra["sessions_opened"] == 1
        assert {tool.address for tool in await pool.list_tools()} >= {
            "clock:get_current_time",
            "clock2:get_current_time",
        }
    assert children_running(USHUAIA) == children_running(TARAWA) == []


async def test_a_removed_server_stops_and_its_name_is_unknown() -> None:
    async with ClientPool({"clock": time_server(USHUAIA), "gone": time_server(TARAWA)}) as pool:
        assert len(children_running(TARAWA)) == 1

        changes = await pool.reconfigure({"clock": time_server(USHUAIA)})

        assert changes.removed == ("gone",)
        assert children_running(TARAWA) == []  # stopped before reconfigure returned
        assert [status.name for status in pool.status()] == ["clock"]
        assert all(tool.server == "clock" for tool in await pool.list_tools())
        with pytest.raises(UnknownTool, match="gone"):
            await pool.call_tool("gone", "get_current_time", {"timezone": "UTC"})
        assert "UTC" in await now_in(pool, "clock")


async def test_a_server_with_changed_args_restarts_with_the_new_ones() -> None:
    async with ClientPool({"clock": time_server(USHUAIA)}) as pool:
        [old] = children_running(USHUAIA)

        changes = await pool.reconfigure({"clock": time_server(NOUMEA)})

        assert changes == PoolChanges(restarted=("clock",))
        assert old not in children_running(USHUAIA)
        assert len(children_running(NOUMEA)) == 1
        assert state_of(pool, "clock") == "running"
        assert "UTC" in await now_in(pool, "clock")


async def test_an_unchanged_list_changes_nothing_and_restarts_nothing() -> None:
    async with ClientPool({"clock": time_server(USHUAIA)}) as pool:
        [pid] = children_running(USHUAIA)
        changes = await pool.reconfigure({"clock": time_server(USHUAIA)})
        assert not changes
        assert children_running(USHUAIA) == [pid]


async def test_a_call_made_during_a_restart_waits_for_the_new_session() -> None:
    async with ClientPool({"clock": time_server(USHUAIA)}) as pool:
        answers: list[str] = []
        async with anyio.create_task_group() as group:
            group.start_soon(pool.reconfigure, {"clock": time_server(NOUMEA)})
            await wait_until(lambda: state_of(pool, "clock") != "running")
            answers.append(await now_in(pool, "clock"))
        assert "UTC" in answers[0]
        assert len(children_running(NOUMEA)) == 1


async def test_listeners_hear_once_of_each_server_whose_tools_changed() -> None:
    heard: list[str] = []

    async def listener(server: str) -> None:
        heard.append(server)

    async with ClientPool({"clock": time_server(USHUAIA), "old": time_server(TARAWA)}) as pool:
        pool.on_tools_changed(listener)
        await pool.reconfigure(
            # clock restarts (another environment) with the same tools: nothing to tell
            {"clock": time_server(USHUAIA, env={"LANG": "C"}), "new": time_server(TARAWA)}
        )
        assert sorted(heard) == ["new", "old"]
        await pool.reconfigure({"clock": time_server(NOUMEA), "new": time_server(TARAWA)})
        assert sorted(heard) == ["clock", "new", "old"]  # its description names its zone


async def test_a_server_that_fails_to_start_is_failed_and_the_others_are_served() -> None:
    async with ClientPool({"clock": time_server(USHUAIA)}) as pool:
        broken = ServerSettings(command="pml-test-no-such-command")
        changes = await pool.reconfigure({"clock": time_server(USHUAIA), "broken": broken})
        assert changes.added == ("broken",)
        assert changes.failed == ("broken",)
        assert state_of(pool, "broken") == "failed"
        assert "UTC" in await now_in(pool, "clock")


async def test_new_timeouts_apply_to_the_next_call() -> None:
    server = toy()
    async with ClientPool({"toy": server}, settings=UpstreamSettings(call_timeout_s=30)) as pool:
        changes = await pool.reconfigure(
            {"toy": server}, settings=UpstreamSettings(call_timeout_s=0.3)
        )
        assert not changes  # the same server keeps its session
        with anyio.fail_after(10), pytest.raises(ExecutionTimeout, match=r"0\.3 s"):
            await pool.call_tool("toy", "hang")


async def test_new_timeouts_reach_servers_that_keep_their_session() -> None:
    server = toy(lazy=True)
    async with ClientPool({"toy": server}, settings=UpstreamSettings(idle_timeout_s=300)) as pool:
        await pool.call_tool("toy", "echo", {"text": "hi"})
        assert state_of(pool, "toy") == "running"
        await pool.reconfigure({"toy": server}, settings=UpstreamSettings(idle_timeout_s=0.2))
        await wait_until(lambda: state_of(pool, "toy") == "idle")


async def test_a_disabled_server_stops_and_says_so() -> None:
    async with ClientPool({"clock": time_server(USHUAIA)}) as pool:
        await pool.reconfigure({"clock": time_server(USHUAIA, disabled=True)})
        assert children_running(USHUAIA) == []
        assert state_of(pool, "clock") == "disabled"
        with pytest.raises(UpstreamUnavailable, match="disabled"):
            await now_in(pool, "clock")


async def test_a_removed_server_is_reported_stopped_in_the_status_table(db: Database) -> None:
    store = CatalogStore(db)
    servers = {"clock": time_server(USHUAIA), "gone": time_server(TARAWA)}
    async with ClientPool(servers, catalog=store) as pool:
        await pool.reconfigure({"clock": servers["clock"]})
        states = {status.name: status.state for status in await store.load_status()}
        assert states == {"clock": "running", "gone": "stopped"}


async def test_a_pool_not_started_yet_takes_the_new_list_at_start() -> None:
    pool = ClientPool({"gone": time_server(TARAWA)})
    await pool.reconfigure({"clock": time_server(USHUAIA)})
    assert children_running(TARAWA) == children_running(USHUAIA) == []
    async with pool:
        assert [status.name for status in pool.status()] == ["clock"]
        assert len(children_running(USHUAIA)) == 1


async def test_a_stopped_pool_refuses_a_new_list() -> None:
    async with ClientPool({"clock": time_server(USHUAIA)}) as pool:
        pass
    with pytest.raises(UpstreamUnavailable, match="stopped"):
        await pool.reconfigure({})


async def test_reconfigures_run_one_at_a_time_and_the_last_one_wins() -> None:
    async with ClientPool({"clock": time_server(USHUAIA)}) as pool:
        async with anyio.create_task_group() as group:
            group.start_soon(pool.reconfigure, {"clock": time_server(NOUMEA)})
            group.start_soon(pool.reconfigure, {"clock": time_server(TARAWA)})
        running = children_running(NOUMEA) + children_running(TARAWA)
        assert len(running) == 1
        assert children_running(USHUAIA) == []
        assert [status.state for status in pool.status()] == ["running"]


async def test_a_reconfigure_cancelled_halfway_leaves_no_process_after_stop() -> None:
    pool = ClientPool({"clock": time_server(USHUAIA)})
    async with pool:
        with anyio.move_on_after(0.05):
            await pool.reconfigure({"clock": time_server(NOUMEA), "more": time_server(TARAWA)})
        assert "UTC" in await now_in(pool, "clock")  # the new session, once started
    for zone in (USHUAIA, NOUMEA, TARAWA):
        assert children_running(zone) == []
