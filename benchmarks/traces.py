"""Client-routed execution: trace ingest rate and the latency ``pml connect`` adds (SPEC §9).

    python benchmarks/traces.py [--traces 5000] [--snippets 20] [--calls 300] [--interleave]
                                [--quota 50000]

1. **Ingest**: a real ``pml serve --http`` on a fresh PostgreSQL database. ``--traces`` live
   client workflows are prepared (one real ``execute_locally`` hand-off per distinct snippet,
   its learning context copied under new workflow ids), then their traces are posted to
   ``POST /api/traces`` in batches of 100 and timed end to end (HTTP, validation, claim,
   capture, trace rows). ``--snippets`` distinct snippets: the first trace of each creates
   its capability, the others count a use — as agents re-run what they learned.
   ``--interleave``: every trace is a new snippet, and each batch's traces are sent right after
   its hand-offs (as ``pml connect`` sends them after running the code): only the posting
   of the traces is timed.
2. **Forwarding**: ``pml_discover`` called ``--calls`` times by an SDK client, directly
   over HTTP and through a ``pml connect`` process (stdio → HTTP), alternating; the added
   latency is the difference of the medians.

``--quota``: the capabilities-per-project quota the server checks on each creation (off by
default, as before; the product's default is 50 000).

Prints one JSON line: ``{"traces_per_s", "forward_added_p50_ms", ...}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from e2e.support import (
    PML,
    create_key,
    http_client,
    pml_http,
    result_json,
    write_config,
)
from pml.storage.database import Database
from pml.storage.tables import workflow_state
from throwaway_postgres import throwaway_database

BATCH = 100
BENCH_LIMITS = {"key_rate_per_s": 0, "pending_workflows_per_user": 0}
CLIENT_HEADERS = {"X-PML-Client": "pml-connect/bench", "X-PML-Client-Servers": "filesystem"}


def snippet(i: int) -> str:
    return f'read = await mcp.filesystem.read_text_file(path="/data/note_{i}.txt")\nreturn read\n'


async def prepare(url: str, database_url: str, key: str, traces: int, snippets: range) -> list[str]:
    """``traces`` live workflows: one real hand-off per snippet, its state copied."""
    states: list[Any] = []
    async with http_client(url, key, extra_headers=CLIENT_HEADERS) as client:
        for i in snippets:
            handed = result_json(
                await client.call_tool(
                    "pml_execute", {"intent": f"read note {i}", "code": snippet(i)}
                )
            )
            assert handed["status"] == "execute_locally", handed
            states.append(handed["workflowId"])
    db = await Database.open(database_url)
    try:
        async with db.transaction() as conn:
            rows = (
                await conn.execute(
                    sa.select(workflow_state).where(workflow_state.c.workflow_id.in_(states))
                )
            ).mappings()
            template = [dict(row) for row in rows]
            ids: list[str] = []
            copies: list[dict[str, Any]] = []
            for n in range(traces):
                row = dict(template[n % len(template)])
                row["workflow_id"] = f"wf_bench_{uuid.uuid4().hex}"
                ids.append(row["workflow_id"])
                copies.append(row)
            await conn.execute(sa.insert(workflow_state), copies)
    finally:
        await db.close()
    return ids


async def ingest(base_url: str, key: str, ids: list[str]) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {key}"}
    statuses: dict[str, int] = {}
    batches = [ids[i : i + BATCH] for i in range(0, len(ids), BATCH)]
    task = {"tool": "filesystem:read_text_file", "argsDigest": "ab" * 8, "durationMs": 1.2}
    async with httpx.AsyncClient(timeout=60.0) as http:
        started = time.perf_counter()
        for batch in batches:
            body = {
                "traces": [
                    {"workflowId": wid, "success": True, "durationMs": 4.2, "taskResults": [task]}
                    for wid in batch
                ]
            }
            reply = await http.post(f"{base_url}/api/traces", json=body, headers=headers)
            reply.raise_for_status()
            for result in reply.json()["results"]:
                statuses[result["status"]] = statuses.get(result["status"], 0) + 1
        elapsed = time.perf_counter() - started
    return {
        "traces_per_s": round(len(ids) / elapsed, 1),
        "ingest_s": round(elapsed, 2),
        "statuses": statuses,
    }


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used (``/proc/PID/stat``), in seconds: what
    ingest costs the server whatever else the machine is doing."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def forwarding(base_url: str, key: str, workdir: Path, calls: int) -> dict[str, Any]:
    config = write_config(
        workdir / "connect.toml", [], database_url=f"sqlite:///{workdir / 'connect.db'}"
    )
    params = StdioServerParameters(
        command=str(PML),
        args=["--config", str(config), "connect", "--server", base_url, "--api-key", key,
              "--queue", str(workdir / "queue.sqlite3")],
    )  # fmt: skip
    arguments = {"intent": "read a note file", "limit": 3}
    direct_ms: list[float] = []
    forwarded_ms: list[float] = []
    with (workdir / "connect.log").open("w") as errlog:
        async with (
            http_client(f"{base_url}/mcp", key) as direct,
            Client(stdio_client(params, errlog=errlog)) as connected,
        ):
            for _ in range(20):  # warm both paths
                await direct.call_tool("pml_discover", arguments)
                await connected.call_tool("pml_discover", arguments)
            for _ in range(calls):
                for client, bucket in ((direct, direct_ms), (connected, forwarded_ms)):
                    started = time.perf_counter()
                    result = await client.call_tool("pml_discover", arguments)
                    bucket.append((time.perf_counter() - started) * 1000)
                    assert not result.is_error, result
    direct_p50, forwarded_p50 = statistics.median(direct_ms), statistics.median(forwarded_ms)
    return {
        "forward_added_p50_ms": round(forwarded_p50 - direct_p50, 3),
        "direct_p50_ms": round(direct_p50, 3),
        "forwarded_p50_ms": round(forwarded_p50, 3),
        "forwarded_p95_ms": round(statistics.quantiles(forwarded_ms, n=20)[-1], 3),
    }


def limits_of(args: argparse.Namespace) -> dict[str, int]:
    return {**BENCH_LIMITS, "capabilities_per_project": args.quota}


async def run(args: argparse.Namespace, database_url: str) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp())
    config = write_config(
        workdir / "pml.toml",
        [],
        database_url=database_url,
        expose_upstream=False,
        # The benchmark measures ingest, not the limits: one key sends every request, and
        # --traces hand-offs wait at once (their traces are what is ingested).
        extra={"routing": {"local": ["filesystem"]}, "limits": limits_of(args)},
    )
    key = create_key(config, "bench", "main", "alice")["key"]
    with pml_http(config, workdir / "server.log") as gateway:
        pid = gateway.process.pid
        if args.interleave:  # each batch's hand-offs, then their traces at once
            ingested, cpu_s = {"ingest_s": 0.0, "statuses": {}}, 0.0
            for first in range(0, args.traces, BATCH):
                chunk = range(first, min(first + BATCH, args.traces))
                ids = await prepare(gateway.mcp_url, database_url, key, len(chunk), chunk)
                cpu_before = cpu_seconds(pid)
                part = await ingest(gateway.base_url, key, ids)
                cpu_s += cpu_seconds(pid) - cpu_before
                ingested["ingest_s"] += part["ingest_s"]
                for status, count in part["statuses"].items():
                    ingested["statuses"][status] = ingested["statuses"].get(status, 0) + count
            ingested["traces_per_s"] = round(args.traces / ingested["ingest_s"], 1)
        else:
            ids = await prepare(
                gateway.mcp_url, database_url, key, args.traces, range(args.snippets)
            )
            cpu_before = cpu_seconds(pid)
            ingested = await ingest(gateway.base_url, key, ids)
            cpu_s = cpu_seconds(pid) - cpu_before
        ingested["server_cpu_ms_per_trace"] = round(cpu_s * 1000 / max(1, args.traces), 3)
        forwarded = await forwarding(gateway.base_url, key, workdir, args.calls)
    return {
        "traces_per_s": ingested["traces_per_s"],
        "forward_added_p50_ms": forwarded["forward_added_p50_ms"],
        "backend": "postgresql",
        "traces": args.traces,
        "batch": BATCH,
        "distinct_snippets": args.traces if args.interleave else args.snippets,
        "interleaved": args.interleave,
        "limits": limits_of(args),
        **{k: v for k, v in ingested.items() if k != "traces_per_s"},
        **{k: v for k, v in forwarded.items() if k != "forward_added_p50_ms"},
    }


async def with_postgres(args: argparse.Namespace) -> dict[str, Any]:
    async with throwaway_database() as url:
        db = await Database.open(url)  # migrated before the server and the key command start
        await db.close()
        return await run(args, url)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--traces", type=int, default=5000)
    parser.add_argument("--snippets", type=int, default=20)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument(
        "--interleave",
        action="store_true",
        help="every trace a new snippet, sent right after its hand-off (a batch at a time)",
    )
    parser.add_argument(
        "--quota",
        type=int,
        default=0,
        help="[limits] capabilities_per_project (0: none; the product's default is 50000)",
    )
    args = parser.parse_args()
    print(json.dumps(asyncio.run(with_postgres(args))))


if __name__ == "__main__":
    main()
