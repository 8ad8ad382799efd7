"""A real ``pml serve --stdio`` with one server that never answers (issue: instant gateway).

The client connects and lists tools while the stuck server is still starting; the stuck
server is then named in PML's log, once, with why; the reference servers serve meanwhile.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from e2e.support import Upstream, pml_stdio, sqlite_url, write_config

pytestmark = pytest.mark.anyio

WAIT_S = 60.0
STUCK = Upstream("mute", sys.executable, ("-c", "import sys; sys.stdin.read()"))


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_stuck_server_is_named_and_never_holds_the_agent(
    tmp_path: Path, servers: dict[str, Upstream], mode: Any
) -> None:
    config = write_config(
        tmp_path / "pml.toml",
        [servers["time"], servers["everything"], STUCK],
        database_url=sqlite_url(tmp_path),
        upstream={"list_wait_s": 0.5, "start_timeout_s": 4},
    )
    log = tmp_path / "pml.log"
    failed = "upstream server 'mute' failed: no answer within 4 s while starting"
    with anyio.fail_after(WAIT_S):
        async with pml_stdio(config, log, mode=mode) as gateway:
            names = {tool.name for tool in (await gateway.client.list_tools()).tools}
            assert "pml_execute" in names
            assert not any(name.startswith("mute__") for name in names)
            assert failed not in gateway.stderr()  # listed before the stuck server gave up
            result = await gateway.client.call_tool(
                "time__get_current_time", {"timezone": "Asia/Tokyo"}
            )
            assert not result.is_error
            while failed not in gateway.stderr():  # noqa: ASYNC110 - a log file has no event
                await anyio.sleep(0.05)
            after = await gateway.client.call_tool("everything__echo", {"message": "still here"})
            assert not after.is_error
    assert gateway.stderr().count("upstream server 'mute' failed") == 1
