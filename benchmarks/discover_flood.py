"""Discovery flood: one tenant's many long ``pml_discover`` calls against another's short ones.

    python benchmarks/discover_flood.py [--seconds 20] [--flooders 32] [--intent-chars 10000]
                                        [--interval-ms 20] [--slots N] [--queue N]
                                        [--retry immediate|honour] [--key-rate 0]

Starts a real ``pml serve --http`` (SQLite, the reference servers: time and git, and the npm
filesystem, memory and everything servers when installed) with two API keys in different
orgs. The victim first times short ``pml_discover`` calls alone (each intent new, so each is
embedded: the query cache never answers); then ``--flooders`` SDK clients of the other
tenant, each its own session, send new random ``--intent-chars`` intents back to back for
``--seconds``, while the victim goes on with its short calls ``--interval-ms`` apart. A
flooder answered ``BUSY`` tries again at once (``--retry immediate``, a hostile client) or
after ``retryAfterS`` (``honour``), and likewise after a ``RATE_LIMITED`` (HTTP 429): the
per-key rate limit is off unless ``--key-rate`` sets it. Prints one JSON line:

    {"lane": {"slots": 1, "queue_per_tenant": 32}, ..., "idle": {"n": 30, "p50_ms": ...,
     "p95_ms": ..., "max_ms": ...}, "victim": {...}, "flood": {"ok": 420, "busy": 0,
     "errors": 0, "per_s": 21.0}, "rss_mb": {"before_flood": 190.2, "peak": 240.7,
     "peak_in_flood": 230.1}}

``peak`` is the server process's ``VmHWM`` (its start and index build included);
``peak_in_flood`` the same after the mark was reset just before the flood (``clear_refs``;
null where the kernel refuses). ``--slots``/``--queue`` set ``pml.discovery.embed_lane``'s
constants in the server (to compare them); with ``PYTHONPATH`` naming another checkout's
``src`` the server runs that code (the lane's constants are then ignored if it has none).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, MCPError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from e2e.support import (  # the helpers that start real PML processes live with the e2e tests
    E2eSetupError,
    HttpGateway,
    Upstream,
    create_key,
    free_port,
    http_client,
    install_npm_deps,
    make_git_repo,
    python_server,
    reference_servers,
    result_json,
    sqlite_url,
    stop_process_tree,
    wait_healthy,
    write_config,
)

# The server is `pml serve` with the lane's constants set first (when the module exists).
LAUNCH = """
import os, sys
try:
    import pml.discovery.embed_lane as lane
    for name, variable in (("SLOTS", "BENCH_SLOTS"), ("QUEUE_PER_TENANT", "BENCH_QUEUE")):
        if os.environ.get(variable):
            setattr(lane, name, int(os.environ[variable]))
except ImportError:
    pass
from pml.cli.app import main
sys.argv[0] = "pml"
main()
"""
IDLE_CALLS = 30
_WORDS = (
    "read write list search count find show open parse fetch store delete rename move copy "
    "file files directory folder log logs error errors line lines json yaml csv page url "
    "commit commits branch diff status time zone timezone meeting note notes memory entity "
    "the a of in on for with to from and every last first new old all my our its"
)
VOCABULARY = _WORDS.split()
SHORT = [
    "read the error log",
    "what time is it in Tokyo",
    "list the files in my folder",
    "show the last commits",
    "remember that Alice works at Acme",
    "fetch a web page",
    "count the lines of a file",
    "convert a meeting time to Paris",
]


def percentile(samples: list[float], q: float) -> float:
    if len(samples) < 2:
        return samples[0] if samples else 0.0
    return statistics.quantiles(samples, n=100, method="inclusive")[round(q) - 1]


def figures(latencies: list[float]) -> dict[str, Any]:
    return {
        "n": len(latencies),
        "p50_ms": round(percentile(latencies, 50), 1),
        "p95_ms": round(percentile(latencies, 95), 1),
        "max_ms": round(max(latencies, default=0.0), 1),
    }


def long_intent(rnd: random.Random, chars: int) -> str:
    words: list[str] = []
    size = 0
    while size < chars:
        word = rnd.choice(VOCABULARY)
        words.append(word)
        size += len(word) + 1
    return " ".join(words)[:chars]


def status_kb(pid: int, field: str) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return float(line.split()[1])
    except OSError:
        return None
    return None


def mb(kb: float | None) -> float | None:
    return None if kb is None else round(kb / 1024, 1)


def reset_peak(pid: int) -> bool:
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def lane_constants(args: argparse.Namespace) -> dict[str, int] | None:
    """The lane the server runs with (None: the code under test has no lane)."""
    try:
        import pml.discovery.embed_lane as lane
    except ImportError:
        return None
    return {
        "slots": args.slots or lane.SLOTS,
        "queue_per_tenant": args.queue or lane.QUEUE_PER_TENANT,
    }


def servers(workdir: Path) -> list[Upstream]:
    try:
        return list(reference_servers(install_npm_deps(), workdir).values())
    except E2eSetupError:  # the Python reference servers alone
        repo = make_git_repo(workdir / "repo")
        return [
            Upstream("time", str(python_server("mcp-server-time")), ("--local-timezone", "UTC")),
            Upstream("git", str(python_server("mcp-server-git")), ("--repository", str(repo))),
        ]


def start_server(config: Path, log: Path, args: argparse.Namespace) -> HttpGateway:
    port = free_port()
    env = dict(os.environ)
    env["BENCH_SLOTS"] = str(args.slots or "")
    env["BENCH_QUEUE"] = str(args.queue or "")
    command = [sys.executable, "-c", LAUNCH, "--config", str(config)]
    with log.open("ab") as out:
        process = subprocess.Popen(
            [*command, "serve", "--http", f"127.0.0.1:{port}"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=config.parent,
            env=env,
        )
    gateway = HttpGateway(process, port, log)
    try:
        wait_healthy(gateway, timeout_s=60)
    except BaseException:
        stop_process_tree(process)
        raise
    return gateway


async def discover(client: Client, intent: str) -> dict[str, Any]:
    return result_json(await client.call_tool("pml_discover", {"intent": intent}))


async def victim_call(client: Client, n: int, latencies: list[float]) -> None:
    intent = f"{SHORT[n % len(SHORT)]} {n}"  # new text: embedded, not a cached vector
    started = time.perf_counter()
    answer = await discover(client, intent)
    latencies.append((time.perf_counter() - started) * 1000)
    if not answer.get("results"):
        raise SystemExit(f"the victim's discover failed: {answer}")


async def flooder(
    url: str, key: str, seed: int, deadline: float, outcomes: Counter[str], args: argparse.Namespace
) -> None:
    rnd = random.Random(seed)
    async with http_client(url, key) as client:
        while time.monotonic() < deadline:
            try:
                answer = await discover(client, long_intent(rnd, args.intent_chars))
            except MCPError as refused:  # the per-key rate limit: HTTP 429
                outcomes["rate_limited"] += 1
                data: Any = refused.data
                delay = data.get("retryAfterS") if isinstance(data, dict) else None
                if args.retry == "honour":
                    await anyio.sleep(float(delay) if isinstance(delay, int | float) else 0.1)
                continue
            error: Any = answer.get("error")
            if not isinstance(error, dict):
                outcomes["ok"] += 1
                continue
            busy = error.get("code") == "BUSY"
            outcomes["busy" if busy else "errors"] += 1
            if busy and args.retry == "honour":
                await anyio.sleep(float(error.get("retryAfterS", 0.1)))


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pml-bench-") as tmp:
        workdir = Path(tmp)
        extra = {"limits": {"key_rate_per_s": args.key_rate, "sessions_per_key": 1024}}
        config = write_config(
            workdir / "pml.toml", servers(workdir), database_url=sqlite_url(workdir), extra=extra
        )
        flood_key = create_key(config, "flood-org", "web", "mallory")["key"]
        victim_key = create_key(config, "quiet-org", "web", "bob")["key"]
        gateway = start_server(config, workdir / "pml.log", args)
        pid = gateway.process.pid
        try:
            async with http_client(gateway.mcp_url, victim_key) as victim:
                for n in range(10):  # the index built, the model loaded
                    await victim_call(victim, 10_000 + n, [])
                idle: list[float] = []
                for n in range(IDLE_CALLS):
                    await victim_call(victim, n, idle)
                before = status_kb(pid, "VmRSS")
                peak_at_start = status_kb(pid, "VmHWM")
                resettable = reset_peak(pid)
                outcomes: Counter[str] = Counter()
                loaded: list[float] = []
                started = time.monotonic()
                deadline = started + args.seconds
                async with anyio.create_task_group() as group:
                    for i in range(args.flooders):
                        group.start_soon(
                            flooder, gateway.mcp_url, flood_key, i, deadline, outcomes, args
                        )
                    await anyio.sleep(1.0)  # the flood is under way
                    n = IDLE_CALLS
                    while time.monotonic() < deadline - 0.5:
                        await victim_call(victim, n, loaded)
                        n += 1
                        await anyio.sleep(args.interval_ms / 1000)
                elapsed = time.monotonic() - started
                peak_in_flood = status_kb(pid, "VmHWM") if resettable else None
                peaks = [kb for kb in (peak_at_start, status_kb(pid, "VmHWM")) if kb is not None]
        finally:
            stop_process_tree(gateway.process)
    return {
        "lane": lane_constants(args),
        "flooders": args.flooders,
        "intent_chars": args.intent_chars,
        "retry": args.retry,
        "key_rate_per_s": args.key_rate,
        "seconds": round(elapsed, 1),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "idle": figures(idle),
        "victim": figures(loaded),
        "flood": {
            "ok": outcomes["ok"],
            "busy": outcomes["busy"],
            "rate_limited": outcomes["rate_limited"],
            "errors": outcomes["errors"],
            "per_s": round(outcomes["ok"] / elapsed, 1),
        },
        "rss_mb": {
            "before_flood": mb(before),
            "peak": mb(max(peaks, default=None)),
            "peak_in_flood": mb(peak_in_flood),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="A short discover's latency beside a flood.")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the flood lasts")
    parser.add_argument("--flooders", type=int, default=32, help="flooding callers at once")
    parser.add_argument("--intent-chars", type=int, default=10_000, help="a flood intent's size")
    parser.add_argument("--interval-ms", type=float, default=20.0, help="between victim calls")
    parser.add_argument("--slots", type=int, default=0, help="the lane's slots (0: its own)")
    parser.add_argument("--queue", type=int, default=0, help="its queue per tenant (0: its own)")
    parser.add_argument("--retry", choices=["immediate", "honour"], default="immediate")
    parser.add_argument(
        "--key-rate", type=float, default=0.0, help="[limits] key_rate_per_s (0: off)"
    )
    args = parser.parse_args()
    if args.seconds < 3:
        parser.error("--seconds must be >= 3")
    print(json.dumps(anyio.run(run, args)), flush=True)


if __name__ == "__main__":
    main()
