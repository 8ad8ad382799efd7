"""How long an agent waits for PML at start: ``initialize`` and the first ``tools/list``.

    python benchmarks/startup.py [--runs 5] [--mode auto|legacy] [--list-wait 2]

Starts ``pml serve --stdio`` as an MCP client does (a new process each run, the real SDK
client in front) with (a) the three example servers of ``examples/pml.toml`` and (b) the
same with ``filesystem`` replaced by a server that never answers. Times, from the spawn:
the answer to ``initialize`` and the first ``tools/list`` (upstream tools exposed, so the
list waits for servers still starting, up to ``[upstream] list_wait_s``). Prints one JSON
line per case:

    {"case": "examples", "runs": 5, "initialize_p50_s": 0.9, "first_list_p50_s": 1.2, ...}

Goals (issue "instant gateway"): initialize < 1 s and first list < 2.5 s in both cases.
Needs the npm servers of the e2e tests (installed by ``scripts/e2e-deps.sh``, run here).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

ROOT = Path(__file__).resolve().parents[1]
PML = ROOT / ".venv" / "bin" / "pml"
STUCK = [sys.executable, "-c", "import sys; sys.stdin.read()"]


def npm_modules() -> Path:
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "e2e-deps.sh")], check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip().splitlines()[-1])


def servers(modules: Path, *, stuck: bool) -> dict[str, dict[str, Any]]:
    everything = modules / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
    filesystem = modules / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"
    found: dict[str, dict[str, Any]] = {
        "time": {"command": str(ROOT / ".venv" / "bin" / "mcp-server-time")},
        "everything": {"command": "node", "args": [str(everything), "stdio"]},
        "filesystem": {"command": "node", "args": [str(filesystem), str(ROOT / "examples")]},
    }
    if stuck:
        found["filesystem"] = {"command": STUCK[0], "args": STUCK[1:]}
    return found


def write_config(directory: Path, entries: dict[str, dict[str, Any]], list_wait_s: float) -> Path:
    lines = [
        f'database_url = "sqlite:///{directory / "pml.db"}"',
        "expose_upstream = true",
        "[scope]",
        'org = "bench"',
        'project = "startup"',
        "[upstream]",
        f"list_wait_s = {list_wait_s}",
    ]
    for name, entry in entries.items():
        lines.append(f"[servers.{name}]")
        lines.extend(f"{key} = {json.dumps(value)}" for key, value in entry.items())
    config = directory / "pml.toml"
    config.write_text("\n".join(lines) + "\n")
    return config


async def one_run(config: Path, mode: Any) -> tuple[float, float, int]:
    params = StdioServerParameters(
        command=str(PML), args=["--config", str(config), "serve", "--stdio"], env=dict(os.environ)
    )
    started = time.perf_counter()
    with anyio.fail_after(60):
        async with Client(params, mode=mode) as client:
            initialized = time.perf_counter() - started
            tools = (await client.list_tools()).tools
            listed = time.perf_counter() - started
    return initialized, listed, len(tools)


def summary(case: str, runs: list[tuple[float, float, int]]) -> dict[str, Any]:
    inits = [run[0] for run in runs]
    lists = [run[1] for run in runs]
    return {
        "case": case,
        "runs": len(runs),
        "initialize_p50_s": round(statistics.median(inits), 3),
        "initialize_max_s": round(max(inits), 3),
        "first_list_p50_s": round(statistics.median(lists), 3),
        "first_list_max_s": round(max(lists), 3),
        "tools_in_first_list": [run[2] for run in runs],
        "goal_initialize_s": 1.0,
        "goal_first_list_s": 2.5,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--mode", default="auto", choices=["auto", "legacy"])
    parser.add_argument("--list-wait", type=float, default=2.0)
    options = parser.parse_args()
    modules = npm_modules()
    with tempfile.TemporaryDirectory() as temp:
        directory = Path(temp)
        for case, stuck in (("examples", False), ("one_server_never_answers", True)):
            config = write_config(directory, servers(modules, stuck=stuck), options.list_wait)
            await one_run(config, options.mode)  # warm-up: migrations, npm and OS caches
            runs = [await one_run(config, options.mode) for _ in range(options.runs)]
            print(json.dumps(summary(case, runs)), flush=True)


if __name__ == "__main__":
    anyio.run(main)
