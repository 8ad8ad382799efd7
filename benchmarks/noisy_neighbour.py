"""Noisy neighbour: one tenant's CPU-bound snippets against another tenant's trivial one.

    python benchmarks/noisy_neighbour.py [--seconds 30] [--noisy 4] [--workers 0]
                                         [--tenant-workers 0] [--interval-ms 20]
                                         [--noisy-keys 1]

Starts a real ``pml serve --http`` (SQLite, no upstream servers) with two API keys in
different orgs, each used by its own SDK client over streamable HTTP. The quiet tenant first
times its trivial ``pml_execute`` (``return 40 + 2``) alone; then the noisy tenant starts
``--noisy`` snippets that spin for ``--seconds`` each (``while True: pass`` ended by their
time limit), and while they last the quiet tenant runs its snippet again and again,
``--interval-ms`` apart. Prints one JSON line:

    {"workers": 4, "tenant_workers": 2, "noisy": {"runs": 4, "seconds": 30.0, "outcomes":
     {"TIMEOUT": 4}}, "idle": {"n": 50, "p50_ms": 9.1, ...}, "under_noise": {"n": 900,
     "p50_ms": 12.0, "p95_ms": 20.1, "max_ms": 41.0, "wait_p95_ms": 0.1}, "goal_p95_ms": 100,
     "goal_met": true}

``--tenant-workers`` as large as the pool shows the unfair case (the noisy tenant may take
every worker). ``--noisy-keys 2`` spreads the noisy runs over two users of the noisy org
(one key each): the org's part of the pool, not each user's share, must hold them.
Per-key rate limits are off here: they are measured elsewhere.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from e2e.support import (  # the helpers that start real PML processes live with the e2e tests
    create_key,
    http_client,
    pml_http,
    result_json,
    sqlite_url,
    write_config,
)

TRIVIAL = "return 40 + 2"
SPIN = "while True:\n    pass"
GOAL_P95_MS = 100
IDLE_RUNS = 50


def percentile(samples: list[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation."""
    if len(samples) < 2:
        return samples[0] if samples else 0.0
    return statistics.quantiles(samples, n=100, method="inclusive")[round(q) - 1]


def figures(latencies: list[float], waits: list[float]) -> dict[str, Any]:
    return {
        "n": len(latencies),
        "p50_ms": round(percentile(latencies, 50), 2),
        "p95_ms": round(percentile(latencies, 95), 2),
        "max_ms": round(max(latencies, default=0.0), 2),
        "wait_p95_ms": round(percentile(waits, 95), 3),
    }


async def trivial(client: Client, latencies: list[float], waits: list[float]) -> None:
    """One timed trivial run of the quiet tenant (it must succeed)."""
    started = time.perf_counter()
    result = await client.call_tool("pml_execute", {"intent": "add", "code": TRIVIAL})
    latencies.append((time.perf_counter() - started) * 1000)
    answer = result_json(result)
    if answer.get("status") != "success" or answer.get("result") != 42:
        raise SystemExit(f"the quiet tenant's run failed: {answer}")
    waits.append(float(answer.get("waitMs", 0.0)))


async def spin(client: Client, seconds: float, outcomes: Counter[str]) -> None:
    """One noisy run: spins until its time limit ends it."""
    arguments = {"intent": "spin", "code": SPIN, "options": {"timeout_ms": int(seconds * 1000)}}
    answer = result_json(await client.call_tool("pml_execute", arguments))
    error = answer.get("error")
    outcomes[str(error.get("code")) if isinstance(error, dict) else "success"] += 1  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pml-bench-") as tmp:
        workdir = Path(tmp)
        extra = {
            "sandbox": {"workers": args.workers, "wall_time_s": max(30.0, args.seconds + 5)},
            "limits": {"tenant_workers": args.tenant_workers, "key_rate_per_s": 0},
        }
        config = write_config(
            workdir / "pml.toml", [], database_url=sqlite_url(workdir), extra=extra
        )
        noisy_keys = [
            create_key(config, "noisy-org", "main", f"user-{index}")["key"]
            for index in range(args.noisy_keys)
        ]
        quiet_key = create_key(config, "quiet-org", "main", "bob")["key"]
        with pml_http(config, workdir / "pml.log") as gateway:
            async with AsyncExitStack() as stack:
                noisy = [
                    await stack.enter_async_context(http_client(gateway.mcp_url, key))
                    for key in noisy_keys
                ]
                quiet = await stack.enter_async_context(http_client(gateway.mcp_url, quiet_key))
                for _ in range(10):  # warm-up: the capability is captured, workers started
                    await trivial(quiet, [], [])
                idle: list[float] = []
                idle_waits: list[float] = []
                for _ in range(IDLE_RUNS):
                    await trivial(quiet, idle, idle_waits)
                outcomes: Counter[str] = Counter()
                loaded: list[float] = []
                loaded_waits: list[float] = []
                async with anyio.create_task_group() as group:
                    for index in range(args.noisy):
                        client = noisy[index % len(noisy)]
                        group.start_soon(spin, client, args.seconds, outcomes)
                    await anyio.sleep(0.5)  # the noisy runs have taken their workers
                    deadline = time.monotonic() + args.seconds - 1.0
                    while time.monotonic() < deadline:
                        await trivial(quiet, loaded, loaded_waits)
                        await anyio.sleep(args.interval_ms / 1000)
    pool = args.workers or max(4, 2 * (os.cpu_count() or 1))
    share = min(args.tenant_workers, pool) if args.tenant_workers else max(1, pool // 2)
    under = figures(loaded, loaded_waits)
    return {
        "workers": pool,
        "tenant_workers": share,
        "noisy": {
            "runs": args.noisy,
            "keys": args.noisy_keys,
            "seconds": args.seconds,
            "outcomes": dict(outcomes),
        },
        "idle": figures(idle, idle_waits),
        "under_noise": under,
        "goal_p95_ms": GOAL_P95_MS,
        "goal_met": under["p95_ms"] < GOAL_P95_MS,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="A trivial snippet's latency beside noisy ones.")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long each noisy run spins")
    parser.add_argument("--noisy", type=int, default=4, help="noisy runs at once")
    parser.add_argument("--workers", type=int, default=0, help="[sandbox] workers (0: automatic)")
    parser.add_argument(
        "--tenant-workers", type=int, default=0, help="[limits] tenant_workers (0: half the pool)"
    )
    parser.add_argument("--interval-ms", type=float, default=20.0, help="pause between runs")
    parser.add_argument(
        "--noisy-keys", type=int, default=1, help="users (keys) of the noisy org sharing its runs"
    )
    args = parser.parse_args()
    if args.seconds < 2:
        parser.error("--seconds must be >= 2")
    if args.noisy_keys < 1:
        parser.error("--noisy-keys must be >= 1")
    print(json.dumps(anyio.run(run, args)), flush=True)


if __name__ == "__main__":
    main()
