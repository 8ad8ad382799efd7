"""A long run of mixed traffic against one ``pml serve --http``: does anything grow?

    python benchmarks/soak.py [--minutes 30] [--clients 8] [--distinct-new N] [--sqlite]
                              [--sample-s 60]

Starts ``pml serve --http`` on a throwaway PostgreSQL database (``--sqlite``: a SQLite file)
with ``mcp-server-time`` upstream, and real SDK clients over streamable HTTP, each with its
own API key, that loop through a mix: ``pml_execute`` of known code (reuse), of new code
(a new capability each time), a snippet that fails, ``pml_discover``, a pass-through call,
``tools/list``, and sometimes a new session. After a warm-up (a tenth of the run, at least a
minute), and at the end, it samples the gateway process: RSS, open files, threads, child
processes and the database connections it holds (PostgreSQL: ``pg_stat_activity`` for the
database). Prints one JSON line:

    {"minutes": 30, "calls": 51234, "errors": 0, "start": {"rss_mb": ..., "open_files": ...,
     "children": ..., "db_connections": ...}, "end": {...}, "growth": {...}, "p95_ms": ...,
     "series": [{"minute": 1.0, "calls": ..., "rss_mb": ..., ...}, ...],
     "rss_mb_per_10_min": {"first_half": ..., "second_half": ...}}

``--python-heap`` also traces the gateway's Python allocations from the end of warm-up on
(``tracemalloc``, through a ``sitecustomize`` on its ``PYTHONPATH``; the gateway runs slower
then): each sample adds ``python_heap_mb``, what the Python objects allocated since warm-up
and still alive hold, so RSS growth can be told apart from the allocator keeping freed memory.

``series`` samples the same every ``--sample-s`` seconds from the start; ``rss_mb_per_10_min``
is the RSS slope (least squares) over the first and the second half of the samples taken
after warm-up, so a leak shows as a slope that does not fall.

Goal (issue "fair and bounded"): no growth beyond warm-up. With the default, every "new"
call learns a capability, and the gateway's discovery index holds each one (a few KB):
``--distinct-new 200`` draws new code from a fixed set, so growth then means a leak.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import asyncpg  # pyright: ignore[reportMissingTypeStubs]

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from e2e.replicas import POSTGRES_URL, drop_database, fresh_database
from e2e.support import (
    Upstream,
    create_key,
    http_client,
    pml_http,
    python_server,
    sqlite_url,
    write_config,
)

KNOWN = "now = await mcp.time.get_current_time(timezone=args['tz'])\nreturn now['datetime'][:4]"
FAILING = "raise ValueError('the soak test fails on purpose ' * 50)"


def sample(pid: int) -> dict[str, Any]:
    """What the gateway process holds now."""
    status = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    children = [
        entry.name
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and _parent(entry) == pid
    ]
    return {
        "rss_mb": round(int(status["VmRSS"].split()[0]) / 1024, 1),
        "threads": int(status["Threads"]),
        "open_files": len(list(Path(f"/proc/{pid}/fd").iterdir())),
        "children": len(children),
    }


def _parent(entry: Path) -> int:
    try:
        stat = (entry / "stat").read_text()
    except OSError:
        return -1
    return int(stat.rsplit(")", 1)[1].split()[1])


async def db_connections(database: str | None) -> int | None:
    if database is None:
        return None
    conn = await asyncpg.connect(POSTGRES_URL)  # pyright: ignore[reportUnknownMemberType]
    try:
        count = await conn.fetchval(  # pyright: ignore[reportUnknownMemberType]
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", database
        )
    finally:
        await conn.close()  # pyright: ignore[reportUnknownMemberType]
    return int(count)  # pyright: ignore[reportUnknownArgumentType]


class Traffic:
    """The mixed calls of every client, and what they measured."""

    def __init__(self, url: str, keys: list[str], deadline: float, distinct_new: int) -> None:
        self.url, self.keys, self.deadline = url, keys, deadline
        self.distinct_new = distinct_new
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self.by_kind: dict[str, int] = {}

    async def client(self, index: int) -> None:
        rng = random.Random(index)
        while time.monotonic() < self.deadline:
            async with http_client(self.url, self.keys[index]) as client:
                for _ in range(rng.randrange(20, 200)):
                    if time.monotonic() >= self.deadline:
                        return
                    await self.one_call(client, rng, index)

    async def one_call(self, client: Any, rng: random.Random, index: int) -> None:
        roll = rng.random()
        started = time.perf_counter()
        if roll < 0.05:
            kind = "list"
            await client.list_tools()
        else:
            kind, tool, arguments, expect_error = self.pick(roll, rng, index)
            result = await client.call_tool(tool, arguments)
            if result.is_error != expect_error:
                self.errors.append(f"{kind}: {str(result.content)[:200]}")
        self.latencies.append((time.perf_counter() - started) * 1000)
        self.by_kind[kind] = self.by_kind.get(kind, 0) + 1

    def pick(
        self, roll: float, rng: random.Random, index: int
    ) -> tuple[str, str, dict[str, Any], bool]:
        if roll < 0.55:
            return (
                "reuse",
                "pml_execute",
                {"intent": "year", "code": KNOWN, "args": {"tz": "UTC"}},
                False,
            )
        if roll < 0.70:
            number, tag = rng.randrange(10**9), uuid.uuid4().hex
            if self.distinct_new:  # a fixed set: what is learned stops growing after warm-up
                number, tag = rng.randrange(self.distinct_new), "set"
            code = f"return {{'n': {number}, 'client': {index}, 'tag': '{tag}'}}"
            return "new", "pml_execute", {"intent": "a new number", "code": code}, False
        if roll < 0.75:
            return "failing", "pml_execute", {"intent": "fail", "code": FAILING}, True
        if roll < 0.85:
            return "discover", "pml_discover", {"intent": "what time is it in Paris"}, False
        return "passthrough", "time__get_current_time", {"timezone": "Europe/Paris"}, False


# Loaded by the gateway's interpreter (``--python-heap``); inert in every other process.
_HEAP_PROBE = """
import os, sys, threading, time
if "serve" in sys.argv and "--http" in sys.argv:
    def _probe():
        import tracemalloc
        time.sleep(float(os.environ["PML_SOAK_HEAP_AFTER_S"]))
        tracemalloc.start(1)
        while True:
            with open(os.environ["PML_SOAK_HEAP_FILE"] + ".new", "w") as out:
                out.write(str(tracemalloc.get_traced_memory()[0]))
            os.replace(os.environ["PML_SOAK_HEAP_FILE"] + ".new", os.environ["PML_SOAK_HEAP_FILE"])
            time.sleep(5)
    threading.Thread(target=_probe, daemon=True, name="soak-heap-probe").start()
"""


def trace_python_heap(workdir: Path, after_s: float) -> Path:
    """Make the gateway started next trace its Python heap after ``after_s``; the file it
    writes the traced bytes to."""
    probe = workdir / "heap_probe"
    probe.mkdir()
    (probe / "sitecustomize.py").write_text(_HEAP_PROBE)
    heap_file = workdir / "python_heap.txt"
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(probe), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    os.environ["PML_SOAK_HEAP_FILE"] = str(heap_file)
    os.environ["PML_SOAK_HEAP_AFTER_S"] = str(after_s)
    return heap_file


def python_heap_mb(heap_file: Path | None) -> dict[str, float]:
    if heap_file is None or not heap_file.exists():
        return {}
    return {"python_heap_mb": round(int(heap_file.read_text()) / 1e6, 2)}


async def soak(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    database = None if args.sqlite else f"pml_soak_{uuid.uuid4().hex[:8]}"
    start: dict[str, Any] = {}
    end: dict[str, Any] = {}
    series: list[dict[str, Any]] = []
    calls_at_start = 0
    url = sqlite_url(workdir) if database is None else await fresh_database(POSTGRES_URL, database)
    try:
        time_server = Upstream(
            "time", str(python_server("mcp-server-time")), ("--local-timezone", "UTC")
        )
        config = write_config(
            workdir / "pml.toml",
            [time_server],
            database_url=url,
            extra={"limits": {"key_rate_per_s": 0}},  # measure the gateway, not the limiter
        )
        keys = [create_key(config, "soak", "run", f"user{i}")["key"] for i in range(args.clients)]
        total = args.minutes * 60
        warmup = max(60.0, total / 10)
        heap_file = trace_python_heap(workdir, warmup) if args.python_heap else None
        with pml_http(config, workdir / "gateway.log") as gateway:
            traffic = Traffic(gateway.mcp_url, keys, time.monotonic() + total, args.distinct_new)
            began = time.monotonic()

            async def measured() -> dict[str, Any]:
                return {
                    "minute": round((time.monotonic() - began) / 60, 2),
                    "calls": len(traffic.latencies),
                    **sample(gateway.process.pid),
                    "db_connections": await db_connections(database),
                    **python_heap_mb(heap_file),
                }

            async def sampler() -> None:
                while time.monotonic() < traffic.deadline:
                    await anyio.sleep(args.sample_s)
                    series.append(await measured())

            async with anyio.create_task_group() as clients:
                for index in range(args.clients):
                    clients.start_soon(traffic.client, index)
                clients.start_soon(sampler)
                await anyio.sleep(warmup)
                start = {
                    **sample(gateway.process.pid),
                    "db_connections": await db_connections(database),
                }
                calls_at_start = len(traffic.latencies)
            end = {**sample(gateway.process.pid), "db_connections": await db_connections(database)}
    finally:
        if database is not None:
            await drop_database(POSTGRES_URL, database)
    cuts = (
        statistics.quantiles(traffic.latencies, n=100) if len(traffic.latencies) > 1 else [0.0] * 99
    )
    return {
        "minutes": args.minutes,
        "database": "sqlite" if database is None else "postgresql",
        "clients": args.clients,
        "distinct_new": args.distinct_new,
        "calls": len(traffic.latencies),
        "calls_after_warmup": len(traffic.latencies) - calls_at_start,
        "by_kind": traffic.by_kind,
        "errors": len(traffic.errors),
        "first_errors": traffic.errors[:3],
        "p50_ms": round(statistics.median(traffic.latencies), 1) if traffic.latencies else None,
        "p95_ms": round(cuts[94], 1),
        "start": start,
        "end": end,
        "growth": {key: _delta(start[key], end[key]) for key in start},
        "series": series,
        "rss_mb_per_10_min": _halves_slopes(
            [point for point in series if point["minute"] * 60 >= max(60.0, args.minutes * 6)]
        ),
    }


def _halves_slopes(points: list[dict[str, Any]]) -> dict[str, float | None]:
    """The RSS slope in MB per 10 minutes over each half of ``points`` (None: too few)."""
    half = len(points) // 2
    return {"first_half": _slope(points[:half]), "second_half": _slope(points[half:])}


def _slope(points: list[dict[str, Any]]) -> float | None:
    if len(points) < 2:
        return None
    xs = [point["minute"] for point in points]
    ys = [point["rss_mb"] for point in points]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        return None
    covariance = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    return round(10 * covariance / spread, 2)


def _delta(before: Any, after: Any) -> Any:
    if isinstance(before, int | float) and isinstance(after, int | float):
        return round(after - before, 1)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument(
        "--distinct-new",
        type=int,
        default=0,
        help="draw 'new' code from this many variants (0: always new, so capabilities grow)",
    )
    parser.add_argument("--sqlite", action="store_true", help="a SQLite file, not PostgreSQL")
    parser.add_argument("--sample-s", type=float, default=60.0, help="seconds between samples")
    parser.add_argument(
        "--python-heap", action="store_true", help="trace the gateway's Python heap after warm-up"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pml-soak-") as folder:
        print(json.dumps(anyio.run(soak, args, Path(folder))), flush=True)


if __name__ == "__main__":
    main()
