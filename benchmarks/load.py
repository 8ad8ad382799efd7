"""A busy team on one shared PML: many HTTP sessions running ``pml_execute`` at once.

    python benchmarks/load.py [--sessions 50] [--calls 100] [--users 10] [--known 20]
                              [--new-every 5] [--think-ms 0] [--profile /tmp/pml-load.prof]

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
share of it, so the CPU each call cost the clients (this process) and PostgreSQL (every
``postgres`` process, when readable) is printed beside the gateway's. Sessions are
closed-loop (a call is sent when the last one returned), so latency is about
sessions ÷ throughput (the sessions connect and list the tools first; the clock starts
when all are connected); ``--think-ms`` makes each session wait between calls (0.5 to 1.5
times that, at random) as an agent reading its answer would, and start at random within
that time rather than all at once. ``--profile PATH``: the server runs under cProfile
(written at exit).
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
    wait_ms: list[float] = field(default_factory=list[float])  # waiting for a sandbox worker
    not_created: int = 0  # "new" calls that did not create a capability
    seconds: float = 0.0
    cpu_ms_per_call: float = 0.0  # the gateway process's own CPU (user + system)
    client_cpu_ms_per_call: float = 0.0  # this process's CPU: the SDK clients
    postgres_cpu_ms_per_call: float | None = None  # every postgres process's, if readable
    workers_cpu_ms_per_call: float = 0.0  # the gateway's children: its sandbox workers

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
            "client_cpu_ms_per_call": round(self.client_cpu_ms_per_call, 2),
            "sandbox_workers_cpu_ms_per_call": round(self.workers_cpu_ms_per_call, 2),
            "postgres_cpu_ms_per_call": (
                round(self.postgres_cpu_ms_per_call, 2)
                if self.postgres_cpu_ms_per_call is not None
                else None
            ),
            "reuse": _percentiles(self.reuse_ms),
            "new_capability": _percentiles(self.new_ms),
            "sandbox_wait": _percentiles(self.wait_ms),
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


@dataclass
class StartLine:
    """Sessions connect first; the clock starts once every one of them is ready."""

    waiting: int
    go: anyio.Event = field(default_factory=anyio.Event)

    async def ready(self) -> None:
        self.waiting -= 1
        if self.waiting == 0:
            self.go.set()
        await self.go.wait()


async def _session(
    url: str, key: str, number: int, round_no: int, args: argparse.Namespace, into: Round,
    start: StartLine,
) -> None:  # fmt: skip
    from e2e.support import http_client, result_json

    async with http_client(url, key) as client:
        # as an agent does once connected; the SDK client would otherwise list the tools
        # inside the first call_tool (to check results against output schemas), timed
        await client.list_tools()
        await start.ready()
        if args.think_ms:  # agents do not all start in the same millisecond either
            await anyio.sleep(random.uniform(0, args.think_ms) / 1000)
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
            into.wait_ms.append(float(answer.get("waitMs") or 0.0))
            if new and answer.get("created") is not True:
                into.not_created += 1
            if args.think_ms:  # uniformly 0.5-1.5 times it: sessions do not stay in step
                await anyio.sleep(args.think_ms * random.uniform(0.5, 1.5) / 1000)


async def _round(url: str, keys: list[str], round_no: int, args: argparse.Namespace) -> Round:
    measured = Round()
    start, started = StartLine(args.sessions), time.perf_counter()
    async with anyio.create_task_group() as sessions:
        for number in range(args.sessions):
            key = keys[number % len(keys)]
            sessions.start_soon(_session, url, key, number, round_no, args, measured, start)
        await start.go.wait()
        started = time.perf_counter()
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


def children_cpu_seconds(pid: int) -> float:
    """User + system CPU time of the live children of ``pid`` (its sandbox workers)."""
    total = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                total += cpu_seconds(int(child))
            except OSError:  # it ended meanwhile
                continue
    return total


def postgres_cpu_seconds() -> float | None:
    """User + system CPU time of every ``postgres`` process on the machine (None if none)."""
    total, found = 0.0, False
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # gone, or not ours to read
            continue
        if "(postgres)" in text:
            found = True
            fields = text.rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total if found else None


class CpuMeter:
    """The CPU the gateway, this process (the clients) and PostgreSQL used between reads."""

    def __init__(self, gateway_pid: int) -> None:
        self._pid = gateway_pid
        self._last = self._read()

    def _read(self) -> tuple[float, float, float | None, float]:
        mine = os.times()
        return (
            cpu_seconds(self._pid),
            mine.user + mine.system,
            postgres_cpu_seconds(),
            children_cpu_seconds(self._pid),
        )

    def charge(self, measured: Round, calls: int) -> None:
        """Set ``measured``'s CPU per call since the last read."""
        now = self._read()
        measured.cpu_ms_per_call = (now[0] - self._last[0]) * 1000 / calls
        measured.client_cpu_ms_per_call = (now[1] - self._last[1]) * 1000 / calls
        measured.workers_cpu_ms_per_call = (now[3] - self._last[3]) * 1000 / calls
        if now[2] is not None and self._last[2] is not None:
            measured.postgres_cpu_ms_per_call = (now[2] - self._last[2]) * 1000 / calls
        self._last = now


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
    extra: dict[str, Any] = {"limits": limits}
    if args.workers:
        extra["sandbox"] = {"workers": args.workers}
    config = write_config(
        workdir / "pml.toml", [], database_url=database_url, expose_upstream=False, extra=extra
    )
    keys = [create_key(config, "load", "main", f"user{n}")["key"] for n in range(args.users)]
    with pml_http(config, workdir / "server.log") as gateway:
        pid = gateway.process.pid
        anyio.run(_warm, gateway.mcp_url, keys, args)
        calls = args.sessions * args.calls
        rss_start, meter = rss_mb(pid), CpuMeter(pid)
        first = anyio.run(_round, gateway.mcp_url, keys, 1, args)
        rss_first = rss_mb(pid)
        meter.charge(first, calls)
        second = anyio.run(_round, gateway.mcp_url, keys, 2, args)
        rss_second = rss_mb(pid)
        meter.charge(second, calls)
    return {
        "backend": "postgresql",
        "sessions": args.sessions,
        "calls_per_session": args.calls,
        "new_every": args.new_every,
        "think_ms": args.think_ms,
        "sandbox_workers": args.workers or "default",
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
    parser.add_argument(
        "--think-ms", type=float, default=0.0, help="each session waits this long between calls"
    )
    parser.add_argument("--workers", type=int, default=0, help="[sandbox] workers (0: default)")
    parser.add_argument("--profile", type=Path, default=None, help="cProfile the server here")
    args = parser.parse_args()
    if min(args.sessions, args.calls, args.users, args.known, args.new_every) < 1:
        parser.error("--sessions, --calls, --users, --known and --new-every must be >= 1")
    if not 0 <= args.workers <= 256:
        parser.error("--workers must be between 0 and 256")
    if not 0 <= args.think_ms <= 60_000:
        parser.error("--think-ms must be between 0 and 60000")
    with tempfile.TemporaryDirectory(prefix="pml-bench-load-") as folder:
        workdir = Path(folder)
        if args.profile is not None:
            _profiled_pml(args.profile.resolve(), workdir)
        print(json.dumps(anyio.run(_throwaway, args, workdir)))


if __name__ == "__main__":
    main()
