"""What ``pml serve`` holds in memory: its own RSS after start, a discover and an execute.

    python benchmarks/footprint.py [--embedder auto|hashing] [--executes 20] [--migrated]
                                   [--model-process auto|own|shared] [--others N]

Starts ``pml serve --stdio`` as an MCP client does (the real SDK client in front) with one
upstream server (``mcp-server-time``), then reads ``/proc/<pid>/status`` of the gateway
process alone (not its upstream or sandbox children) after the first ``tools/list``, after
a ``pml_discover`` (which builds the embedding model) and after ``--executes`` runs of
``pml_execute``. The database is new, so the gateway migrates it as it starts (alembic and
its template engine stay loaded); ``--migrated`` starts a gateway once before, to measure
one on a database already at the head revision. Prints one JSON line:

    {"embedder": "auto", "after_list_mb": 171.2, "after_discover_mb": 258.1,
     "after_execute_mb": 261.8, "anon_mb": ..., "file_mb": ..., "threads": 13,
     "file_top_mb": {"onnxruntime_pybind11_state...so": 27.8, ...}, "children": {...}}

``file_top_mb`` is the file-backed RSS of the largest mapped files (shared libraries).
With ``[discovery] model_process`` "auto" (the default: "shared" for ``pml serve --stdio``)
the model runs in the shared embedding process, which serves every local gateway of the
user: ``shared_model_mb`` is its RSS. ``--others N`` keeps N more gateways (other agent
windows, each on its own database, after a ``pml_discover``) running meanwhile:
``others_mb`` lists their RSS, and ``total_mb`` sums every gateway and the shared process.
The gateways' data directory (``XDG_DATA_HOME``, where that process's socket lives) is the
run's own.

Goal (issue "fair and bounded"): < 150 MB after a discover and an execute.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

ROOT = Path(__file__).resolve().parents[1]
PML = ROOT / ".venv" / "bin" / "pml"
TIME_SERVER = ROOT / ".venv" / "bin" / "mcp-server-time"
SETTLE_S = 1.5  # background work (the model built on first use, usage writes) settles


def memory_mb(pid: int) -> dict[str, float]:
    """VmRSS, RssAnon and RssFile of one process, in MB."""
    found: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            found[key] = round(int(value.split()[0]) / 1024, 1)
    return found


def thread_count(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/task").iterdir()))


def file_top_mb(pid: int, count: int = 8) -> dict[str, float]:
    """The resident pages of the ``count`` mapped files holding most, by file name, in MB."""
    resident: collections.Counter[str] = collections.Counter()
    mapped = ""
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and not fields[0].endswith(":"):  # a mapping's header
            mapped = Path(fields[5]).name if len(fields) > 5 and fields[5][0] == "/" else ""
        elif fields and fields[0] == "Rss:" and mapped:
            resident[mapped] += int(fields[1])
    return {name: round(kb / 1024, 1) for name, kb in resident.most_common(count)}


def children_mb(pid: int) -> dict[str, float]:
    """The RSS of each child process (upstream servers, sandbox workers), by command."""
    out = subprocess.run(
        ["ps", "-o", "rss=,comm=", "--ppid", str(pid)], capture_output=True, text=True, check=False
    )
    found: dict[str, float] = {}
    for line in out.stdout.splitlines():
        rss, _, command = line.strip().partition(" ")
        found[command] = round(found.get(command, 0.0) + int(rss) / 1024, 1)
    return found


def gateway_pid(config: Path) -> int:
    out = subprocess.run(
        ["pgrep", "-n", "-f", f"pml --config {config} serve"], capture_output=True, text=True
    )
    return int(out.stdout.split()[0])


def shared_model_pid(data_home: Path) -> int | None:
    """The shared embedding process whose socket lies under ``data_home``, if one runs."""
    out = subprocess.run(
        ["pgrep", "-n", "-f", f"embed_service --socket {data_home}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return int(out.stdout.split()[0]) if out.stdout.strip() else None


def gateway_params(folder: Path, embedder: str, model_process: str) -> StdioServerParameters:
    """``pml serve --stdio`` on a config (and database) of its own in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "pml.toml"
    config.write_text(
        f'database_url = "sqlite:///{folder / "pml.db"}"\n'
        '[scope]\norg = "bench"\nproject = "footprint"\n'
        f'[discovery]\nembedder = "{embedder}"\nmodel_process = "{model_process}"\n'
        "[upstream]\nlist_wait_s = 60\n"
        f'[servers.time]\ncommand = "{TIME_SERVER}"\n'
    )
    return StdioServerParameters(
        command=str(PML),
        args=["--config", str(config), "serve", "--stdio"],
        env={**os.environ, "XDG_DATA_HOME": str(folder.parent / "data")},
    )


async def measure(
    directory: Path,
    embedder: str,
    executes: int,
    migrated: bool,
    model_process: str = "auto",
    others: int = 0,
) -> dict[str, Any]:
    config = directory / "main" / "pml.toml"
    data_home = directory / "data"
    params = gateway_params(config.parent, embedder, model_process)
    report: dict[str, Any] = {
        "embedder": embedder,
        "model_process": model_process,
        "executes": executes,
        "migrated": migrated,
    }
    if migrated:  # a first gateway migrates the new database
        async with Client(params) as client:
            await client.list_tools()
    async with contextlib.AsyncExitStack() as stack:
        other_pids = []
        for index in range(others):  # other agent windows, each with a gateway of its own
            folder = directory / f"other{index}"
            other = await stack.enter_async_context(
                Client(gateway_params(folder, embedder, model_process))
            )
            await other.call_tool("pml_discover", {"intent": "what time is it in Lima"})
            other_pids.append(gateway_pid(folder / "pml.toml"))
        report["others_mb"] = await measure_one(
            params, config, data_home, executes, report, other_pids
        )
    return report


async def measure_one(
    params: StdioServerParameters,
    config: Path,
    data_home: Path,
    executes: int,
    report: dict[str, Any],
    other_pids: list[int],
) -> list[float]:
    """Fill ``report`` with the measured gateway's figures; the others' RSS."""
    shared = None
    async with Client(params) as client:
        await client.list_tools()
        pid = gateway_pid(config)
        await anyio.sleep(SETTLE_S)
        report["after_list_mb"] = memory_mb(pid)["VmRSS"]
        found = await client.call_tool("pml_discover", {"intent": "what time is it in Tokyo"})
        if found.is_error:
            raise SystemExit(f"pml_discover failed: {found.content}")
        await anyio.sleep(SETTLE_S)
        report["after_discover_mb"] = memory_mb(pid)["VmRSS"]
        for index in range(executes):
            code = f"return await mcp.time.get_current_time(timezone='Asia/Tokyo')  # {index % 3}"
            ran = await client.call_tool("pml_execute", {"intent": "time in Tokyo", "code": code})
            if ran.is_error:
                raise SystemExit(f"pml_execute failed: {ran.content}")
        await anyio.sleep(SETTLE_S)
        final = memory_mb(pid)
        report["after_execute_mb"] = final["VmRSS"]
        report["anon_mb"], report["file_mb"] = final["RssAnon"], final["RssFile"]
        report["threads"] = thread_count(pid)
        report["file_top_mb"] = file_top_mb(pid)
        report["children_mb"] = children_mb(pid)
        others = [memory_mb(pid)["VmRSS"] for pid in other_pids]
        shared = shared_model_pid(data_home)
        if shared is not None:
            report["shared_model_mb"] = memory_mb(shared)["VmRSS"]
        total = final["VmRSS"] + sum(others) + report.get("shared_model_mb", 0.0)
        report["total_mb"] = round(total, 1)
    if shared is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(shared, signal.SIGTERM)  # it would stop by itself once idle
    report["goal_mb"] = 150
    return others


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--embedder", choices=["auto", "hashing"], default="auto")
    parser.add_argument("--executes", type=int, default=20)
    parser.add_argument(
        "--migrated", action="store_true", help="measure a gateway on a migrated database"
    )
    parser.add_argument("--model-process", choices=["auto", "own", "shared"], default="auto")
    parser.add_argument(
        "--others", type=int, default=0, help="more gateways running meanwhile (agent windows)"
    )
    options = parser.parse_args()
    if not TIME_SERVER.exists():
        sys.exit(f"{TIME_SERVER} is missing: run make install")
    with tempfile.TemporaryDirectory() as directory:
        report = anyio.run(
            measure,
            Path(directory),
            options.embedder,
            options.executes,
            options.migrated,
            options.model_process,
            options.others,
        )
    print(json.dumps(report))


if __name__ == "__main__":
    main()
