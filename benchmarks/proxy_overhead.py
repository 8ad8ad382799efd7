"""What PML adds to one cheap upstream tool call, over stdio and over streamable HTTP.

    python benchmarks/proxy_overhead.py [--n 1000] [--warmup 50] [--tool echo|time]
                                        [--transports stdio,http] [--mode auto|legacy]
                                        [--no-execute]

Calls one cheap tool (server-everything's ``echo`` by default, or mcp-server-time's
``convert_time``) N times directly with the SDK client, N times through PML as the
pass-through tool ``server__tool``, and N times as a one-call ``pml_execute`` snippet
(``--no-execute``: not): ``pml serve --stdio``, and ``pml serve --http`` with an API key.
Direct and proxied calls alternate one by one in the same run, so both see the same machine
load; then direct calls and ``pml_execute`` runs alternate the same way. Prints
one JSON line per transport:

    {"transport": "http", "mode": "auto", "n": 1000, "direct_p50_ms": 0.41,
     "direct_p95_ms": 0.6, "via_pml_p50_ms": 1.8, "via_pml_p95_ms": 2.6,
     "added_p50_ms": 1.4, "added_p95_ms": 2.0, "execute_p50_ms": 4.1,
     "execute_p95_ms": 5.9, "execute_added_p50_ms": 3.7, "execute_added_p95_ms": 5.3}

``added_pXX_ms`` is the proxied percentile minus the direct one (``execute_added_pXX_ms``
the same for ``pml_execute``). ``--mode`` is the protocol the client of PML speaks
(``auto``: stateless 2026-07-28; ``legacy``: 2025-11-25 sessions); PML speaks to the npm
upstream in 2025-11-25 either way. ``--transports direct`` times only the direct half (a
check of the set-up). Needs the npm servers of the e2e tests (installed by
``scripts/e2e-deps.sh``, which this script runs). On a busy machine, run it under
``chrt -f 10`` (real-time priority) for figures that do not move with the load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TextIO

import anyio
from mcp import Client
from mcp.client.stdio import stdio_client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
# The helpers that start real servers and PML live with the e2e tests.
from e2e.support import (
    Upstream,
    create_key,
    http_client,
    install_npm_deps,
    pml_http,
    pml_stdio,
    reference_servers,
    sqlite_url,
    write_config,
)

TOOLS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "echo": ("everything", "echo", {"message": "ping"}),
    "time": (
        "time",
        "convert_time",
        {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"},
    ),
}

Call = Callable[[], Awaitable[Any]]


def percentile(samples: list[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation."""
    return statistics.quantiles(samples, n=100, method="inclusive")[round(q) - 1]


async def timed(call: Call) -> float:
    start = time.perf_counter_ns()
    result = await call()
    elapsed = (time.perf_counter_ns() - start) / 1e6
    if getattr(result, "is_error", False):
        raise SystemExit(f"the benchmarked call failed: {result!r}")
    return elapsed


async def alternate(direct: Call, via: Call | None, n: int, warmup: int) -> dict[str, list[float]]:
    """Warm both paths, then time n calls of each, alternating one by one."""
    paths = {"direct": direct} if via is None else {"direct": direct, "via": via}
    samples = await alternate_paths(paths, n, warmup)
    samples.setdefault("via", [])
    return samples


async def alternate_paths(paths: dict[str, Call], n: int, warmup: int) -> dict[str, list[float]]:
    """Warm every path, then time n calls of each, one of each in turn."""
    for _ in range(warmup):
        for call in paths.values():
            await call()
    samples: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(n):
        for name, call in paths.items():
            samples[name].append(await timed(call))
    return samples


def ms(value: float) -> float:
    return round(value, 3)


def line(transport: str, samples: dict[str, list[float]], mode: str = "auto") -> dict[str, Any]:
    direct = samples["direct"]
    figures: dict[str, Any] = {
        "transport": transport,
        "mode": mode,
        "n": len(direct),
        "direct_p50_ms": ms(percentile(direct, 50)),
        "direct_p95_ms": ms(percentile(direct, 95)),
    }
    for path, prefix, added in (
        ("via", "via_pml", "added"),
        ("execute", "execute", "execute_added"),
    ):
        timed_path = samples.get(path) or []
        if not timed_path:
            continue
        base = samples.get(f"{path}_direct") or direct  # the direct calls timed beside it
        figures |= {
            f"{prefix}_p50_ms": ms(percentile(timed_path, 50)),
            f"{prefix}_p95_ms": ms(percentile(timed_path, 95)),
            f"{added}_p50_ms": ms(percentile(timed_path, 50) - percentile(base, 50)),
            f"{added}_p95_ms": ms(percentile(timed_path, 95) - percentile(base, 95)),
        }
    return figures


@asynccontextmanager
async def via_pml(
    transport: str, upstream: Upstream, workdir: Path, mode: str
) -> AsyncIterator[Client]:
    """A client of PML (stdio, or HTTP with a fresh key) whose only upstream is ``upstream``."""
    folder = workdir / transport
    folder.mkdir()
    # thousands of calls from one key: the per-key rate limit ([limits]) would refuse them
    config = write_config(
        folder / "pml.toml",
        [upstream],
        database_url=sqlite_url(folder),
        extra={"limits": {"key_rate_per_s": 0}},
    )
    if transport == "stdio":
        async with pml_stdio(config, folder / "pml.log", mode=mode) as gateway:
            yield gateway.client
        return
    key = create_key(config, "bench", "main")["key"]
    with pml_http(config, folder / "pml.log") as gateway:
        async with http_client(gateway.mcp_url, key, mode=mode) as client:
            yield client


async def run(args: argparse.Namespace, quiet: TextIO) -> None:
    """``quiet`` takes the direct server's stderr (its start-up banner)."""
    server, tool, arguments = TOOLS[args.tool]
    deps = install_npm_deps()
    with tempfile.TemporaryDirectory(prefix="pml-bench-") as tmp:
        workdir = Path(tmp)
        upstream = reference_servers(deps, workdir)[server]
        async with Client(stdio_client(upstream.params(), errlog=quiet)) as direct_client:

            async def direct() -> Any:
                return await direct_client.call_tool(tool, arguments)

            for transport in args.transports:
                paths: dict[str, Call] = {"direct": direct}
                if transport == "direct":
                    samples = await alternate_paths(paths, args.n, args.warmup)
                    print(json.dumps(line(transport, samples, args.mode)), flush=True)
                    continue
                async with via_pml(transport, upstream, workdir, args.mode) as client:

                    async def via(client: Client = client) -> Any:
                        return await client.call_tool(f"{server}__{tool}", arguments)

                    async def execute(client: Client = client) -> Any:
                        named = ", ".join(f"{key}={value!r}" for key, value in arguments.items())
                        snippet = f"return await mcp.{server}.{tool}({named})"
                        return await client.call_tool(
                            "pml_execute", {"intent": f"{tool} once", "code": snippet}
                        )

                    samples = await alternate_paths(paths | {"via": via}, args.n, args.warmup)
                    if args.execute:  # apart: a run's background work (capture) would slow the rest
                        runs = await alternate_paths(paths | {"execute": execute}, args.n, 3)
                        samples["execute"] = runs["execute"]
                        samples["execute_direct"] = runs["direct"]
                print(json.dumps(line(transport, samples, args.mode)), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description="What PML adds to one cheap upstream tool call.")
    parser.add_argument("--n", type=int, default=1000, help="timed calls per path")
    parser.add_argument("--warmup", type=int, default=50, help="untimed calls per path first")
    parser.add_argument("--tool", choices=sorted(TOOLS), default="echo")
    parser.add_argument(
        "--mode",
        default="auto",
        help="protocol of the client of PML: auto (2026-07-28 stateless) or legacy (sessions)",
    )
    parser.add_argument(
        "--transports",
        type=lambda text: [part for part in text.split(",") if part],
        default=["stdio", "http"],
        help="comma-separated: stdio, http, direct",
    )
    parser.add_argument(
        "--no-execute",
        dest="execute",
        action="store_false",
        help="time only the pass-through call, not pml_execute",
    )
    args = parser.parse_args()
    unknown = set(args.transports) - {"stdio", "http", "direct"}
    if unknown or args.n < 2:
        parser.error(f"unknown transports {sorted(unknown)}" if unknown else "--n must be >= 2")
    with open(os.devnull, "w") as quiet:
        anyio.run(run, args, quiet)


if __name__ == "__main__":
    main()
