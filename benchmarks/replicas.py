"""The same load through HAProxy in front of 1 and of 3 ``pml serve --http`` replicas.

    python benchmarks/replicas.py [--clients 12] [--calls 60] [--warmup 5]
                                  [--mode auto|legacy] [--load passthrough|execute]
                                  [--replicas 1,3]

For each replica count: a fresh PostgreSQL database (``PML_TEST_POSTGRES_URL``, default the
local server), that many replicas of one ``pml.toml`` (mcp-server-time upstream) behind
HAProxy running ``deploy/haproxy.cfg`` (round-robin, no stickiness), and ``--clients`` SDK
clients calling at once, each ``--calls`` times after ``--warmup`` untimed calls. The load is
a pass-through tool call (``time__get_current_time``) or ``pml_execute`` of a snippet that
calls it (sandbox, policy and capture on every call). Prints one JSON line per count:

    {"replicas": 3, "mode": "auto", "load": "passthrough", "clients": 12, "calls": 720,
     "seconds": 4.1, "calls_per_s": 175.6, "p50_ms": 61.2, "p95_ms": 120.3, "errors": 0}

``--mode`` is the protocol generation the clients speak (``auto``: stateless 2026-07-28;
``legacy``: 2025-11-25 sessions, shared by the replicas). Needs haproxy
(``.ci/ensure-haproxy``) and PostgreSQL (``.ci/ensure-postgres``). The replicas share the
machine's cores with HAProxy and the clients: more replicas help only while cores are free.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
# The helpers that start replicas behind HAProxy live with the e2e tests.
from e2e.replicas import (
    POSTGRES_URL,
    Hops,
    balanced_client,
    drop_database,
    fresh_database,
    replicas_behind_haproxy,
)
from e2e.support import Upstream, create_key, python_server, write_config

SNIPPET = "now = await mcp.time.get_current_time(timezone='UTC')\nreturn now"


def _call(load: str) -> tuple[str, dict[str, Any]]:
    if load == "execute":
        return "pml_execute", {"intent": "the time in UTC", "code": SNIPPET}
    return "time__get_current_time", {"timezone": "UTC"}


async def _client(
    url: str, key: str, args: argparse.Namespace, latencies: list[float], errors: list[str]
) -> None:
    tool, arguments = _call(args.load)
    async with balanced_client(url, key, Hops(), mode=args.mode) as client:
        for _ in range(args.warmup):
            await client.call_tool(tool, arguments)
        for _ in range(args.calls):
            started = time.perf_counter()
            result = await client.call_tool(tool, arguments)
            latencies.append((time.perf_counter() - started) * 1000)
            if result.is_error:
                errors.append(str(result.content)[:200])


async def _load(url: str, key: str, args: argparse.Namespace) -> dict[str, Any]:
    latencies: list[float] = []
    errors: list[str] = []
    started = time.perf_counter()
    async with anyio.create_task_group() as clients:
        for _ in range(args.clients):
            clients.start_soon(_client, url, key, args, latencies, errors)
    seconds = time.perf_counter() - started
    timed = args.clients * args.calls
    # Every client warms up first; the wall time counts them, so rate only the timed calls.
    busy = seconds * timed / (timed + args.clients * args.warmup)
    cuts = statistics.quantiles(latencies, n=100)
    return {
        "clients": args.clients,
        "calls": len(latencies),
        "seconds": round(busy, 2),
        "calls_per_s": round(len(latencies) / busy, 1),
        "p50_ms": round(statistics.median(latencies), 1),
        "p95_ms": round(cuts[94], 1),
        "errors": len(errors),
    }


def _measure(count: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    name = f"pml_bench_replicas_{uuid.uuid4().hex[:8]}"
    database_url = anyio.run(fresh_database, POSTGRES_URL, name)
    try:
        time_server = Upstream(
            "time", str(python_server("mcp-server-time")), ("--local-timezone", "UTC")
        )
        config = write_config(
            workdir / "pml.toml",
            [time_server],
            database_url=database_url,
            extra={"limits": {"key_rate_per_s": 0}},  # load from one key: not rate-limited
        )
        key = create_key(config, "bench", "replicas", "bench")["key"]
        with replicas_behind_haproxy(config, workdir, count=count) as cluster:
            figures = anyio.run(_load, cluster.mcp_url, key, args)
    finally:
        anyio.run(drop_database, POSTGRES_URL, name)
    return {"replicas": count, "mode": args.mode, "load": args.load, **figures}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--clients", type=int, default=12)
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--mode", choices=["auto", "legacy"], default="auto")
    parser.add_argument("--load", choices=["passthrough", "execute"], default="passthrough")
    parser.add_argument("--replicas", default="1,3")
    args = parser.parse_args()
    counts = [int(part) for part in args.replicas.split(",")]
    for count in counts:
        with tempfile.TemporaryDirectory(prefix="pml-bench-replicas-") as folder:
            print(json.dumps(_measure(count, args, Path(folder))), flush=True)


if __name__ == "__main__":
    main()
