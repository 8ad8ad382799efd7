"""A busy team on one shared PML: many HTTP sessions running ``pml_execute`` at once.

    python benchmarks/load.py [--sessions 50] [--calls 100] [--users 10] [--known 20]
                              [--new-every 5] [--profile /tmp/pml-load.prof]

A real ``pml serve --http`` on a throwaway PostgreSQL database (``PML_TEST_POSTGRES_URL``,
default the local server), and ``--sessions`` real MCP SDK clients over HTTP calling at
once, each ``--calls`` times. One call in ``--new-every`` runs code never seen before (a
new capability is created); the others run one of ``--known`` snippets captured before the
clock starts (reuse: one read, usage queued). Two identical rounds are run (the second
with new code of its own); the gateway's RSS is read after each.

The sessions use ``--users`` API keys (one user each, ``pml keys create``), so the fair
scheduler sees that many tenants; ``[limits] key_rate_per_s = 0`` turns the per-key rate
limit off (it is not what this measures); the capability quota keeps its default.

Prints one JSON line: per round, errors and p50/p95/p99/max in milliseconds for reuse and
for new-capability calls, calls per second and the gateway's own CPU per call (what the
machine's other load does not change); RSS after each round, and ``rss_growth_mb`` (second
round minus first). The clients run on the same machine: on 2 cores they take a large
share of it. ``--profile PATH``: the server runs under cProfile (written at exit).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _profiled_pml(path: Path, workdir: Path) -> None:
    """Make the e2e helpers start ``pml`` under cProfile (they read PML_E2E_PML)."""
    pml = Path(sys.executable).parent / "pml"
    wrapper = workdir / "pml-profiled"
    wrapper.write_text(
        f'#!/bin/sh\nif [ "$3" = serve ]; then exec {sys.executable} -m cProfile -o {path} '
        f'{pml} "$@"; fi\nexec {pml} "$@"\n'
    )
    wrapper.chmod(0o755)
    os.environ["PML_E2E_PML"] = str(wrapper)


@dataclass
class Round:
    """What one round's calls measured."""

    reuse_ms: list[float] = field(default_factory=list[float])
    new_ms: list[float] = field(default_factory=list[float])
    errors: list[str] = field(default_factory=list[str])
    not_created: int = 0  # "new" calls that did not create a capability
    seconds: float = 0.0
    cpu_ms_per_call: float = 0.0  # the gateway process's own CPU (user + system)

    def figures(self) -> dict[str, Any]:
        calls = len(self.reuse_ms) + len(self.new_ms)
        return {
            "calls": calls,
            "errors": len(self.errors),
            "error_samples": self.errors[:3],
            "new_not_created": self.not_created,
            "seconds": round(self.seconds, 2),
            "calls_per_s": round(calls / self.seconds, 1) if self.seconds else None,
            "gateway_cpu_ms_per_call": round(self.cpu_ms_per_call, 2),
            "reuse": _percentiles(self.reuse_ms),
            "new_capability": _percentiles(self.new_ms),
        }


def _percentiles(values: list[float]) -> dict[str, float | int]:
    if len(values) < 2:
        return {"n": len(values)}
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {
        "n": len(values),
        "p50_ms": round(statistics.median(values), 1),
        "p95_ms": round(cuts[94], 1),
        "p99_ms": round(cuts[98], 1),
        "max_ms": round(max(values), 1),
    }


def known_snippet(k: int) -> str:
    return f"total = 0\nfor i in range(args.get('n', 3)):\n    total += i * {k}\nreturn total\n"


def new_snippet(round_no: int, session: int, call: int) -> str:
    return f"seen = {{'round': {round_no}, 'session': {session}, 'call': {call}}}\nreturn seen\n"


async def _session(
    url: str, key: str, number: int, round_no: int, args: argparse.Namespace, into: Round
) -> None:
    from e2e.support import http_client, result_json

    async with http_client(url, key) as client:
        for call in range(args.calls):
            new = call % args.new_every == 0
            if new:
                code = new_snippet(round_no, number, call)
            else:
                code = known_snippet((number + call) % args.known)
            started = time.perf_counter()
            try:
                result = await client.call_tool(
                    "pml_execute", {"intent": "load test", "code": code, "args": {"n": 4}}
                )
            except Exception as error:  # noqa: BLE001 - a broken session is counted, not fatal
                into.errors.append(f"{type(error).__name__}: {error}"[:300])
                continue
            elapsed = (time.perf_counter() - started) * 1000
            answer = result_json(result)
            if result.is_error or answer.get("status") != "success":
                into.errors.append(json.dumps(answer)[:300])
                continue
            (into.new_ms if new else into.reuse_ms).append(elapsed)
            if new and answer.get("created") is not True:
                into.not_created += 1


async def _round(url: str, keys: list[str], round_no: int, args: argparse.Namespace) -> Round:
    measured = Round()
    started = time.perf_counter()
    async with anyio.create_task_group() as sessions:
        for number in range(args.sessions):
            key = keys[number % len(keys)]
            sessions.start_soon(_session, url, key, number, round_no, args, measured)
    measured.seconds = time.perf_counter() - started
    return measured


async def _warm(url: str, keys: list[str], args: argparse.Namespace) -> None:
    """Capture the known snippets (each key's user runs each once: its tenant's first run)."""
    from e2e.support import http_client

    for key in keys:
        async with http_client(url, key) as client:
            for k in range(args.known):
                code = known_snippet(k)
                await client.call_tool("pml_execute", {"intent": "warm", "code": code})


def rss_mb(pid: int) -> float:
    """The resident set of one process (``VmRSS``), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time one process has used (``/proc/PID/stat``), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _migrate(url: str) -> None:
    from pml.storage.database import Database

    db = await Database.open(url)
    await db.close()


async def _throwaway(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    from throwaway_postgres import throwaway_database

    async with throwaway_database() as url:
        await _migrate(url)  # before the server and the key commands start
        return await anyio.to_thread.run_sync(_measure, args, workdir, url)


def _measure(args: argparse.Namespace, workdir: Path, database_url: str) -> dict[str, Any]:
    from e2e.support import create_key, pml_http, write_config

    limits = {"key_rate_per_s": 0}
    config = write_config(
        workdir / "pml.toml",
        [],
        database_url=database_url,
        expose_upstream=False,
        extra={"limits": limits},
    )
    keys = [create_key(config, "load", "main", f"user{n}")["key"] for n in range(args.users)]
    with pml_http(config, workdir / "server.log") as gateway:
        pid = gateway.process.pid
        anyio.run(_warm, gateway.mcp_url, keys, args)
        rss_start, cpu_start = rss_mb(pid), cpu_seconds(pid)
        first = anyio.run(_round, gateway.mcp_url, keys, 1, args)
        rss_first, cpu_first = rss_mb(pid), cpu_seconds(pid)
        second = anyio.run(_round, gateway.mcp_url, keys, 2, args)
        rss_second, cpu_second = rss_mb(pid), cpu_seconds(pid)
    calls = args.sessions * args.calls
    first.cpu_ms_per_call = (cpu_first - cpu_start) * 1000 / calls
    second.cpu_ms_per_call = (cpu_second - cpu_first) * 1000 / calls
    return {
        "backend": "postgresql",
        "sessions": args.sessions,
        "calls_per_session": args.calls,
        "new_every": args.new_every,
        "known_snippets": args.known,
        "keys": args.users,
        "limits": limits | {"note": "per-key rate limit off; one key per user, users share"},
        "round_1": first.figures(),
        "round_2": second.figures(),
        "rss_mb": {
            "after_warmup": rss_start,
            "after_round_1": rss_first,
            "after_round_2": rss_second,
        },
        "rss_growth_mb": round(rss_second - rss_first, 1),
        "cpus": os.cpu_count(),
        "load_average": [round(value, 2) for value in os.getloadavg()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--users", type=int, default=10, help="API keys (one user each)")
    parser.add_argument("--known", type=int, default=20, help="snippets reused")
    parser.add_argument("--new-every", type=int, default=5, help="1 call in N runs new code")
    parser.add_argument("--profile", type=Path, default=None, help="cProfile the server here")
    args = parser.parse_args()
    if min(args.sessions, args.calls, args.users, args.known, args.new_every) < 1:
        parser.error("--sessions, --calls, --users, --known and --new-every must be >= 1")
    with tempfile.TemporaryDirectory(prefix="pml-bench-load-") as folder:
        workdir = Path(folder)
        if args.profile is not None:
            _profiled_pml(args.profile.resolve(), workdir)
        print(json.dumps(anyio.run(_throwaway, args, workdir)))


if __name__ == "__main__":
    main()
