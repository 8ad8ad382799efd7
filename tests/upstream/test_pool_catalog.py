"""Catalogs: addresses across servers, list_changed refreshes on both generations, pinning."""

from __future__ import annotations

import anyio
import pytest

from pml.errors import UnknownTool
from pml.storage.catalog_repo import CatalogStore
from pml.storage.database import Database
from pml.upstream.pool import ClientPool
from upstream.helpers import TOY_TOOL_COUNT, ChangingServer, text_of, toy

pytestmark = pytest.mark.anyio


class Changes:
    """A tools-changed listener that remembers the servers it was told about."""

    def __init__(self) -> None:
        self.servers: list[str] = []
        self.event = anyio.Event()

    async def __call__(self, server: str) -> None:
        self.servers.append(server)
        self.event.set()

    async def next(self) -> str:
        with anyio.fail_after(5):
            await self.event.wait()
        self.event = anyio.Event()
        return self.servers[-1]


async def test_the_same_tool_name_on_two_servers_is_addressed_by_server() -> None:
    servers = {"alpha": ChangingServer("alpha").server, "beta": ChangingServer("beta").server}
    async with ClientPool(servers) as pool:
        echoes = [tool for tool in await pool.list_tools() if tool.name == "echo"]

        assert [tool.address for tool in echoes] == ["alpha:echo", "beta:echo"]
        assert [tool.pass_through_name for tool in echoes] == ["alpha__echo", "beta__echo"]
        assert text_of(await pool.call_tool("alpha", "echo")) == "alpha"
        assert text_of(await pool.call_tool("beta", "echo")) == "beta"


async def test_an_in_process_2026_server_refreshes_its_list_and_tells_listeners() -> None:
    changing = ChangingServer()
    changes = Changes()
    async with ClientPool({"mem": changing.server}) as pool:
        pool.on_tools_changed(changes)
        assert pool.status()[0].extra["protocol_version"] == "2026-07-28"

        await pool.call_tool("mem", "grow")

        assert await changes.next() == "mem"
        assert "mem:extra" in [tool.address for tool in await pool.list_tools()]
        assert pool.status()[0].tool_count == 4
        assert text_of(await pool.call_tool("mem", "extra")) == "extra"


@pytest.mark.parametrize("generation", ["2026-07-28", "2025-11-25"])
async def test_a_stdio_server_refreshes_its_list_on_either_generation(generation: str) -> None:
    flags = ("--legacy",) if generation == "2025-11-25" else ()
    changes = Changes()
    async with ClientPool({"toy": toy(*flags)}) as pool:
        pool.on_tools_changed(changes)
        assert pool.status()[0].extra["protocol_version"] == generation
        with pytest.raises(UnknownTool):
            await pool.call_tool("toy", "extra_1")

        assert text_of(await pool.call_tool("toy", "grow")) == "extra_1"

        assert await changes.next() == "toy"
        assert text_of(await pool.call_tool("toy", "extra_1")) == "extra_1"
        assert len(await pool.list_tools()) == TOY_TOOL_COUNT + 1


async def test_a_failing_listener_does_not_stop_the_others_or_the_session() -> None:
    changes = Changes()

    async def broken(server: str) -> None:
        raise ValueError("listener bug")

    async with ClientPool({"mem": ChangingServer().server}) as pool:
        pool.on_tools_changed(broken)
        pool.on_tools_changed(changes)
        await pool.call_tool("mem", "grow")
        assert await changes.next() == "mem"
        assert text_of(await pool.call_tool("mem", "echo")) == "mem"


async def test_a_tool_whose_definition_changes_is_flagged(db: Database) -> None:
    store = CatalogStore(db)
    changes = Changes()
    async with ClientPool({"mem": ChangingServer().server}, catalog=store) as pool:
        pool.on_tools_changed(changes)
        assert pool.status()[0].flagged_tools == ()

        await pool.call_tool("mem", "mutate")
        await changes.next()

        assert pool.status()[0].flagged_tools == ("echo",)
        assert await store.flagged() == {"mem": ["echo"]}
        echo = next(tool for tool in await pool.list_tools() if tool.name == "echo")
        assert echo.definition.description == "Now it deletes."  # kept, and still callable
        assert text_of(await pool.call_tool("mem", "echo")) == "mem"

    # A later gateway run still shows the flag.
    async with ClientPool({"mem": ChangingServer().server}, catalog=store) as pool:
        assert pool.status()[0].flagged_tools == ("echo",)


async def test_a_definition_accepted_elsewhere_leaves_the_pools_next_report(db: Database) -> None:
    store = CatalogStore(db)
    changes = Changes()
    async with ClientPool({"mem": ChangingServer().server}, catalog=store) as pool:
        pool.on_tools_changed(changes)
        await pool.call_tool("mem", "mutate")
        await changes.next()
        assert pool.status()[0].flagged_tools == ("echo",)
        assert await store.accept("mem", "echo")  # a person, on the dashboard
        await pool._flush({"mem"})  # pyright: ignore[reportPrivateUsage]
        assert pool.status()[0].flagged_tools == ()
        [report] = await store.load_status()
        assert report.flagged_tools == ()
