"""Snapshot the ``tools/list`` of the reference MCP servers into ``data/reference_tools.json``.

    python benchmarks/snapshot_reference_tools.py [--out benchmarks/data/reference_tools.json]

Starts the real servers the end-to-end tests use (npm ``server-filesystem``, ``-memory``,
``-everything`` through ``scripts/e2e-deps.sh``; PyPI ``mcp-server-time``, ``-git`` and
``-fetch`` from the venv), each on private folders under a temporary directory, lists their
tools with the SDK client and writes ``{"servers": {name: [{name, description,
inputSchema}, ...]}}``, servers and tools sorted by name so a re-run diffs cleanly. Listing
tools reaches no network. The discovery benchmark and tests read the file, not the servers.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import stdio_client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from e2e.support import Upstream, install_npm_deps, python_server, reference_servers

OUT = Path(__file__).resolve().parent / "data" / "reference_tools.json"
LIST_TIMEOUT_S = 60.0


def servers(workdir: Path) -> dict[str, Upstream]:
    """The reference servers of the end-to-end tests, plus ``fetch``."""
    found = reference_servers(install_npm_deps(), workdir)
    found["fetch"] = Upstream("fetch", str(python_server("mcp-server-fetch")))
    return found


async def list_tools(server: Upstream, errlog: Any) -> list[dict[str, Any]]:
    """Every tool of ``server`` (all pages), as name, description and inputSchema."""
    tools: list[dict[str, Any]] = []
    with anyio.fail_after(LIST_TIMEOUT_S):
        async with Client(stdio_client(server.params(), errlog=errlog), cache=None) as client:
            cursor: str | None = None
            while True:
                page = await client.list_tools(cursor=cursor)
                tools.extend(
                    {
                        "name": tool.name,
                        "description": tool.description or "",
                        "inputSchema": tool.input_schema,
                    }
                    for tool in page.tools
                )
                cursor = page.next_cursor
                if not cursor:
                    break
    return sorted(tools, key=lambda tool: tool["name"])


async def snapshot() -> dict[str, Any]:
    """``{"servers": {name: tools}}`` of every reference server."""
    with tempfile.TemporaryDirectory(prefix="pml-snapshot-") as tmp:
        workdir = Path(tmp)
        listed: dict[str, list[dict[str, Any]]] = {}
        with (workdir / "servers.log").open("w") as errlog:
            for name, server in sorted(servers(workdir).items()):
                listed[name] = await list_tools(server, errlog)
    return {"servers": listed}


def main() -> None:
    parser = argparse.ArgumentParser(description="Snapshot the reference servers' tools/list.")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    data = anyio.run(snapshot)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    counts = {name: len(tools) for name, tools in data["servers"].items()}
    print(json.dumps({"out": str(args.out), "tools": counts, "total": sum(counts.values())}))


if __name__ == "__main__":
    main()
