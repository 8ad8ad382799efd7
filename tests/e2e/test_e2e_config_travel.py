"""A config that travels: copied into another folder and started from a third, with a
``${TOKEN}`` that reaches the upstream server and is written nowhere.

The config names its server by paths relative to its own folder (a wrapper script and the
entry point of ``@modelcontextprotocol/server-everything`` through a symlink beside it), the
gateway is the real ``pml serve --stdio`` driven by the SDK client, and the token is read
back from the server's own environment with its ``get-env`` tool.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
from collections.abc import AsyncGenerator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio
import pytest
import tomli_w
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp_types import TextContent

from e2e.support import (
    PML,
    NpmDeps,
    find_pids,
    host_node,
    kill_all,
    process_tree,
    result_json,
    wait_gone,
)

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

TOKEN = "tok-e2e-7f3c9a1d5b2e4f60-only-in-the-environment"
TOOL = "everything__get-env"
WAIT_S = 60.0
SNIPPET = """\
env = await mcp.everything["get-env"]()
return {"bytes": len(str(env)), "found": "TRAVEL_TOKEN" in str(env)}
"""


def write_travelling_config(folder: Path, deps: NpmDeps, database: Path) -> Path:
    """``folder/pml.toml`` whose server is ``./bin/everything ./server/dist/index.js``."""
    package = deps.server_js("everything").parent.parent
    (folder / "server").symlink_to(package, target_is_directory=True)
    wrapper = folder / "bin" / "everything"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec "{host_node()}" "$@"\n')
    wrapper.chmod(0o755)
    config = {
        "database_url": f"sqlite:///{database}",
        "expose_upstream": True,
        "log": {"level": "DEBUG"},  # the most PML ever writes: the token must not be in it
        # get-env counts as system_execute, which the general policy forbids; reading the
        # environment of a test server is harmless here.
        "policy": {"capabilities": {"everything:get-env": "compute"}},
        "servers": {
            "everything": {
                "command": "./bin/everything",
                "args": ["./server/dist/index.js", "stdio"],
                "env": {"TRAVEL_TOKEN": "${TOKEN}", "TRAVEL_MODE": "${TRAVEL_MODE:-copied}"},
            }
        },
    }
    path = folder / "pml.toml"
    path.write_text(tomli_w.dumps(config))
    return path


@asynccontextmanager
async def pml_from(
    config: Path, cwd: Path, log: Path, env: dict[str, str]
) -> AsyncGenerator[Client]:
    """``pml --config CONFIG serve --stdio`` started in ``cwd``; no process outlives it."""
    params = StdioServerParameters(
        command=str(PML), args=["--config", str(config), "serve", "--stdio"], cwd=cwd, env=env
    )
    tree: dict[int, list[str]] = {}
    with log.open("w") as errlog:
        try:
            async with AsyncExitStack() as stack:
                client = await stack.enter_async_context(
                    Client(stdio_client(params, errlog=errlog))
                )
                pids = find_pids(str(config))
                assert len(pids) == 1, f"expected one pml process for {config}, got {pids}"
                try:
                    yield client
                finally:
                    tree = process_tree(pids[0])
        finally:
            leaked = wait_gone(tree)
            kill_all(leaked)
            assert not leaked, f"processes left running: {leaked}"


async def tool_listed(client: Client, name: str) -> None:
    """Wait (bounded) until ``name`` is in tools/list: servers join in the background."""
    with anyio.fail_after(WAIT_S):
        for _ in range(int(WAIT_S / 0.2)):
            if name in {tool.name for tool in (await client.list_tools()).tools}:
                return
            await anyio.sleep(0.2)
    raise AssertionError(f"{name} never listed")


def every_byte_under(folder: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file())


async def test_a_copied_config_started_from_a_third_folder_runs_its_relative_server(
    npm_deps: NpmDeps, tmp_path: Path
) -> None:
    original, copy, elsewhere, data = (tmp_path / name for name in ("a", "b", "c", "data"))
    for folder in (original, elsewhere, data):
        folder.mkdir()
    write_travelling_config(original, npm_deps, data / "pml.db")
    shutil.copytree(original, copy, symlinks=True)
    shutil.rmtree(original)  # nothing may still point into the folder it was written in
    config = copy / "pml.toml"
    log = tmp_path / "pml.log"
    env = {"TOKEN": TOKEN, "XDG_DATA_HOME": str(tmp_path / "xdg"), "PML_CONFIG": ""}

    async with pml_from(config, elsewhere, log, env) as client:
        await tool_listed(client, TOOL)
        result = await client.call_tool(TOOL, {})
        # The same call inside a run: traces record the call, never what it returned.
        run = await client.call_tool("pml_execute", {"intent": "check the env", "code": SNIPPET})

    assert not result.is_error, result
    texts = [block.text for block in result.content if isinstance(block, TextContent)]
    seen = json.loads(texts[0])
    assert seen["TRAVEL_TOKEN"] == TOKEN  # ${TOKEN} reached the upstream server
    assert seen["TRAVEL_MODE"] == "copied"  # the default of an unset variable
    assert "TOKEN" not in seen  # only what the entry gives, not PML's whole environment
    ran = result_json(run)
    assert ran["status"] == "success", ran
    assert ran["result"]["found"] is True

    # Written nowhere: not in the config, the database (and its journals), the log.
    assert TOKEN.encode() not in config.read_bytes()
    assert "${TOKEN}" in config.read_text()
    assert TOKEN.encode() not in every_byte_under(data)
    assert TOKEN not in log.read_text(errors="replace")
    assert "pml.db" in os.listdir(data)
    assert stat.S_IMODE((data / "pml.db").stat().st_mode) == 0o600

    # The server is recorded as written (paths resolved, ${TOKEN} kept) in a project of its own.
    database = sqlite3.connect(data / "pml.db")
    try:
        rows = database.execute(
            "SELECT org, project, code_url FROM capability_records WHERE display_name = ?",
            ("mcp:everything",),
        ).fetchall()
    finally:
        database.close()
    assert len(rows) == 1
    org, project, code_url = rows[0]
    assert (org, project.startswith("b-")) == ("local", True)
    assert (
        code_url == f"{copy / 'bin' / 'everything'} {copy / 'server' / 'dist' / 'index.js'} stdio"
    )


async def test_an_unset_token_stops_pml_naming_the_variable_and_the_server(
    npm_deps: NpmDeps, tmp_path: Path
) -> None:
    folder, data = tmp_path / "proj", tmp_path / "data"
    folder.mkdir()
    data.mkdir()
    config = write_travelling_config(folder, npm_deps, data / "pml.db")
    env = {"XDG_DATA_HOME": str(tmp_path / "xdg"), "PML_CONFIG": ""}
    with anyio.fail_after(WAIT_S):
        done = await anyio.run_process(
            [str(PML), "--config", str(config), "serve", "--stdio"],
            cwd=tmp_path,
            env={"PATH": os.environ.get("PATH", ""), **env},
            check=False,
            stdin=None,
        )
    assert done.returncode == 1
    error = done.stderr.decode()
    assert error.startswith(f'error: CONFIG_ERROR: {config}: server "everything": env ')
    assert "variable TOKEN is not set" in error
