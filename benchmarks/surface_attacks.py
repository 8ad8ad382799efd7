"""One tenant attacking a shared PML's other surfaces while another tenant is timed.

    python benchmarks/surface_attacks.py [--only NAME ...] [--tags 40000] [--denials 3000]

Starts a real ``pml serve --http`` (SQLite in a temporary folder, ``mcp-server-time`` as
the upstream, ``time:convert_time`` denied) with two API keys in different orgs, each used
by its own SDK client over streamable HTTP. Per-key rate limits are off (they bound every
attack equally and are measured elsewhere), so what is measured is what one request costs.
Each attack is bounded: it stops by itself. While it runs, the victim tenant runs
``return 40 + 2`` again and again; the gateway's resident set (``VmRSS``) is sampled every
50 ms. Prints one JSON object:

    {"idle": {"p50_ms": ..., "p95_ms": ...}, "attacks": [{"name": "cap_rename_tags",
      "seconds": 0.3, "rss_before_mb": 150.1, "rss_peak_mb": 151.0, "rss_after_mb": 150.9,
      "victim": {"n": 12, "p50_ms": 9.0, "p95_ms": 14.0, "max_ms": 20.0, "errors": 0},
      "attacker_audit_rows_added": 0, "attacker_audit_bytes_added": 0, "outcome": {...}}, ...],
     "still_serving": true}

Measured on 2 shared cores (victim idle p50 2.6 ms, p95 6.5 ms), before -> after the fixes:

- ``cap_rename_tags_distinct`` (30 000 tags, 300 KB): victim blocked 2 962 ms -> 33 ms,
  INVALID_INPUT both times (quadratic de-duplication before the count was checked; a
  4 MiB body of ~450 000 tags would have held the loop for minutes).
- ``versions_setup`` (a second version of 90 KB code changing every line): the gateway
  stopped answering every tenant for > 120 s (``difflib.ndiff`` in the change summary,
  inside the write transaction; 600+ lines hit the recursion limit) -> 1.3-2 s a version.
- ``cap_history_many_versions`` (40 versions of 90 KB): 0.62 s a call, RSS peak +46 MB,
  victim p95 431 ms -> 0.24-0.36 s, +22 MB, p95 169-178 ms; bounded at 20 versions
  whatever the total (1 000 versions were ~250 MB in one answer).
- ``cap_lookup_version_specs``: a specifier read every version's code (~100 MB a lookup at
  1 000 versions of 100 KB) -> the chosen version's only (0.015 s a call at 40).
- ``big_snippets_parallel`` (4 streams of new ~80 KB snippets, 8 each) and
  ``versions_setup``, when large snippets were checked in the gateway's interpreter (the
  analysis on a thread, the sandbox program on the event loop, ~1 s of CPU each): victim
  p95 727 ms and 390-530 ms -> 18 ms and 17 ms with the checks in the gateway's child
  process (``pml.cpu_process``); ``cap_history_many_versions`` with the diffs there too:
  p95 169-178 ms -> 38 ms.
- Every other attack here was already bounded (refused with INVALID_INPUT or answered in
  milliseconds; victim p95 under 35 ms, no victim errors, RSS within +5 MB).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
from mcp import Client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from e2e.support import (  # the helpers that start real PML processes live with the e2e tests
    HttpGateway,
    Upstream,
    create_key,
    http_client,
    pml_http,
    python_server,
    result_json,
    sqlite_url,
    write_config,
)

TRIVIAL = "return 40 + 2"
DENIED_LOOP = (  # one run, many denied calls, each with other arguments
    "n = 0\nfor i in range({n}):\n"
    "    try:\n"
    "        await mcp.time.convert_time(source_timezone='UTC', time=str(i), "
    "target_timezone='UTC')\n"
    "    except Exception:\n"
    "        n += 1\nreturn n"
)
ALLOWED_LOOP = (  # one run, many allowed calls
    "for i in range({n}):\n    await mcp.time.get_current_time(timezone='UTC')\nreturn {n}"
)


def versioned_code(version: int, lines: int = 5_500) -> str:
    """~100 KB of code, every line different from every other version's."""
    return "\n".join(f"v{version}_{i} = {i}" for i in range(lines)) + "\nreturn 1"


FAILING = 'raise ValueError("failing run {i} " + "x" * 5000)'


def percentile(samples: list[float], q: float) -> float:
    if len(samples) < 2:
        return samples[0] if samples else 0.0
    return statistics.quantiles(samples, n=100, method="inclusive")[round(q) - 1]


def figures(latencies: list[float], errors: int) -> dict[str, Any]:
    return {
        "n": len(latencies),
        "p50_ms": round(percentile(latencies, 50), 1),
        "p95_ms": round(percentile(latencies, 95), 1),
        "max_ms": round(max(latencies, default=0.0), 1),
        "errors": errors,
    }


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def audit_size(db: Path) -> tuple[int, int]:
    with sqlite3.connect(db) as conn:
        rows, size = conn.execute(
            "SELECT count(*), coalesce(sum(length(details)), 0) FROM audit_events"
            " WHERE org = 'evil-org'"
        ).fetchone()
    return int(rows), int(size)


async def trivial(client: Client) -> None:
    answer = result_json(await client.call_tool("pml_execute", {"intent": "add", "code": TRIVIAL}))
    if answer.get("result") != 42:
        raise RuntimeError(f"victim run failed: {str(answer)[:200]}")


async def tool(client: Client, name: str, arguments: dict[str, Any]) -> str:
    """Call a tool; the outcome's error code (or ``ok``), never raising."""
    try:
        result = await client.call_tool(name, arguments)
    except Exception as error:  # noqa: BLE001 - a protocol error is an outcome too
        return type(error).__name__
    if not result.is_error:
        return "ok"
    try:
        error = result_json(result).get("error")
    except Exception:  # noqa: BLE001 - an answer that is not PML's JSON is an outcome too
        return "error"
    return str(error.get("code")) if isinstance(error, dict) else "error"  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]


class Bench:
    def __init__(self, gateway: HttpGateway, db: Path, victim: Client, attacker: Client) -> None:
        self.gateway, self.db, self.victim, self.attacker = gateway, db, victim, attacker

    async def measure(
        self, name: str, attack: Callable[[], Awaitable[dict[str, Any]]]
    ) -> dict[str, Any]:
        pid = self.gateway.process.pid
        before = rss_mb(pid)
        rows_before, bytes_before = audit_size(self.db)
        peak = before
        latencies: list[float] = []
        errors = 0
        outcome: dict[str, Any] = {}
        done = anyio.Event()

        async def victim() -> None:
            nonlocal errors
            while not done.is_set():
                started = time.perf_counter()
                try:
                    await trivial(self.victim)
                except Exception:  # noqa: BLE001 - counted: what the victim sees
                    errors += 1
                latencies.append((time.perf_counter() - started) * 1000)
                await anyio.sleep(0.02)

        async def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, rss_mb(pid))
                await anyio.sleep(0.05)

        async def attacker() -> None:
            nonlocal outcome
            try:
                outcome = await attack()
            finally:
                done.set()

        started = time.perf_counter()
        async with anyio.create_task_group() as group:
            group.start_soon(victim)
            group.start_soon(sample)
            group.start_soon(attacker)
        seconds = time.perf_counter() - started
        await anyio.sleep(0.5)  # the audit writer flushes every 0.2 s
        rows_after, bytes_after = audit_size(self.db)
        return {
            "name": name,
            "seconds": round(seconds, 2),
            "rss_before_mb": round(before, 1),
            "rss_peak_mb": round(peak, 1),
            "rss_after_mb": round(rss_mb(pid), 1),
            "victim": figures(latencies, errors),
            "attacker_audit_rows_added": rows_after - rows_before,
            "attacker_audit_bytes_added": bytes_after - bytes_before,
            "outcome": outcome,
        }


async def calls(client: Client, items: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    outcomes: Counter[str] = Counter()
    slowest = 0.0
    for name, arguments in items:
        started = time.perf_counter()
        outcomes[await tool(client, name, arguments)] += 1
        slowest = max(slowest, time.perf_counter() - started)
    return {**outcomes, "slowest_call_s": round(slowest, 3)}


async def parallel_calls(
    client: Client, streams: list[list[tuple[str, dict[str, Any]]]]
) -> dict[str, Any]:
    """``calls`` on several streams at once (each stream's calls one after another)."""
    outcomes: list[dict[str, Any]] = []

    async def stream(items: list[tuple[str, dict[str, Any]]]) -> None:
        outcomes.append(await calls(client, items))

    async with anyio.create_task_group() as group:
        for items in streams:
            group.start_soon(stream, items)
    total: Counter[str] = Counter()
    for outcome in outcomes:
        total.update({k: v for k, v in outcome.items() if k != "slowest_call_s"})
    return {**total, "slowest_call_s": max(o["slowest_call_s"] for o in outcomes)}


def attacks(bench: Bench, args: argparse.Namespace) -> dict[str, Callable[[], Awaitable[Any]]]:
    a = bench.attacker
    http = httpx.AsyncClient(
        base_url=bench.gateway.base_url,
        headers={"Authorization": f"Bearer {args.attacker_key}"},
        timeout=120.0,
    )

    async def rest(paths: list[str]) -> dict[str, Any]:
        statuses: Counter[str] = Counter()
        for path in paths:
            statuses[str((await http.get(path)).status_code)] += 1
        return dict(statuses)

    async def notifications() -> dict[str, Any]:
        sent = 0
        for i in range(args.notifications):
            await a.send_progress_notification(f"unknown-{i}", float(i), 1.0, "x" * 1000)
            await a.send_roots_list_changed()
            sent += 2
        return {"sent": sent}

    async def set_levels() -> dict[str, Any]:
        outcomes: Counter[str] = Counter()
        for i in range(args.calls):
            try:
                await a.set_logging_level(["debug", "emergency", "info"][i % 3])  # pyright: ignore[reportArgumentType]
                outcomes["ok"] += 1
            except Exception as error:  # noqa: BLE001 - refusals are the outcome
                outcomes[type(error).__name__] += 1
        return dict(outcomes)

    async def subscribe() -> dict[str, Any]:
        outcomes: Counter[str] = Counter()
        for i in range(1_200):
            try:
                await a.subscribe_resource(f"time://{'u' * 2000}/{i}")
                outcomes["ok"] += 1
            except Exception as error:  # noqa: BLE001 - refusals are the outcome
                outcomes[type(error).__name__] += 1
        return dict(outcomes)

    async def prompts_resources() -> dict[str, Any]:
        outcomes: Counter[str] = Counter()
        for i in range(args.calls):
            for call in (
                lambda i=i: a.read_resource(f"nope://{'r' * 50_000}/{i}"),
                lambda: a.get_prompt("p" * 50_000, {"k" * 1000: "v" * 100_000}),
                lambda: a.list_resources(cursor="c" * 100_000),
                lambda: a.list_prompts(cursor="c" * 100_000),
            ):
                try:
                    await call()
                    outcomes["ok"] += 1
                except Exception as error:  # noqa: BLE001 - refusals are the outcome
                    outcomes[type(error).__name__] += 1
        return dict(outcomes)

    tags_distinct = [f"t{i}" for i in range(args.tags)]
    return {
        "cap_rename_tags_distinct": lambda: calls(
            a, [("cap_rename", {"name": "victimless", "tags": tags_distinct})]
        ),
        "cap_rename_description_huge": lambda: calls(
            a,
            [("cap_rename", {"name": "victimless", "description": "d" * 3_000_000})] * 5,
        ),
        "cap_list_hostile_patterns": lambda: calls(
            a,
            [
                ("cap_list", {"pattern": p, "offset": 10_000_000, "limit": 500})
                for p in ("*" * 1000, "?*" * 500, "[!" * 500, "[" * 1000, "%_" * 500)
            ]
            * (args.calls // 5),
        ),
        "cap_list_tags_64x1000": lambda: calls(
            a, [("cap_list", {"tags": ["t" * 1000] * 64})] * args.calls
        ),
        "cap_lookup_whois_history_huge_names": lambda: calls(
            a,
            [
                (name, {key: "n" * 10_000 + suffix})
                for name, key in (
                    ("cap_lookup", "name"),
                    ("cap_whois", "fqdn"),
                    ("cap_history", "name"),
                )
                for suffix in ("", "@v1", "@2025-12-22", "." * 5)
            ]
            * (args.calls // 12),
        ),
        "cap_curate_apply_500_huge_ids": lambda: calls(
            a,
            [
                (
                    "cap_curate",
                    {
                        "mode": "apply",
                        "renames": [
                            {"id": f"{i}" + "i" * 5000, "name": f"n{i}"} for i in range(500)
                        ],
                    },
                )
            ]
            * 3,
        ),
        "cap_curate_suggest_auto": lambda: calls(
            a, [("cap_curate", {"mode": m}) for m in ("suggest", "auto")] * (args.calls // 10)
        ),
        "pml_execute_hostile_options": lambda: calls(
            a,
            [
                ("pml_execute", {"intent": "x", "code": TRIVIAL, "options": options})
                for options in (
                    {"timeout_ms": 10**18},
                    {"timeout_ms": -1},
                    {"timeout_ms": 1, "x" * 1000: 1},
                    {"timeout_ms": 1.5},
                    {"timeout_ms": True},
                )
            ]
            * (args.calls // 5),
        ),
        "api_capabilities_hostile_queries": lambda: rest(
            [
                "/api/capabilities?" + q
                for q in (
                    "pattern=" + "*" * 256,
                    "offset=9999999999999999999&limit=500",
                    "tags=" + ",".join(["t"] * 5000),
                    "&".join(f"tags=t{i}" for i in range(5000)),
                    "x" * 60_000 + "=1",
                )
            ]
            * (args.calls // 5)
            + ["/api/capabilities/" + "f" * 60_000] * 20
        ),
        "api_audit_forged_filters": lambda: rest(
            [
                "/api/audit?" + q
                for q in (
                    "limit=1000",
                    "before_id=9223372036854775807&limit=1000",
                    "after_id=-1",
                    "&".join(f"event=E{i}" for i in range(5000)),
                    "tool=" + "t" * 50_000,
                    "since=0001-01-01T00:00Z&until=9999-12-31T00:00Z&limit=1000",
                    "user=" + "%" * 1000,
                )
            ]
            * (args.calls // 7)
        ),
        "notifications_flood": notifications,
        "logging_set_level_many": set_levels,
        "resources_subscribe_1200": subscribe,
        "prompts_resources_huge_args": prompts_resources,
        "failing_runs_loop": lambda: calls(
            a,
            [
                ("pml_execute", {"intent": "fail", "code": FAILING.format(i=i)})
                for i in range(args.calls)
            ],
        ),
        "allowed_calls_one_run": lambda: calls(
            a,
            [("pml_execute", {"intent": "what time", "code": ALLOWED_LOOP.format(n=args.denials)})],
        ),
        "versions_setup": lambda: calls(
            a,
            [
                (
                    "pml_execute",
                    {"intent": "hist", "code": versioned_code(v), "name": "hist", "update": v > 0},
                )
                for v in range(args.versions)
            ],
        ),
        "big_snippets_parallel": lambda: parallel_calls(
            a,
            [
                [
                    ("pml_execute", {"intent": "big", "code": versioned_code(1000 + 100 * s + i)})
                    for i in range(args.big_snippets)
                ]
                for s in range(args.big_streams)
            ],
        ),
        "cap_history_many_versions": lambda: calls(a, [("cap_history", {"name": "hist"})] * 3),
        "cap_lookup_version_specs": lambda: calls(
            a, [("cap_lookup", {"name": f"hist@{spec}"}) for spec in ("v1", "1", "2999-12-31")] * 10
        ),
        "denied_calls_one_run": lambda: calls(
            a,
            [
                (
                    "pml_execute",
                    {"intent": "convert times", "code": DENIED_LOOP.format(n=args.denials)},
                )
            ],
        ),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pml-bench-") as tmp:
        workdir = Path(tmp)
        time_server = Upstream(
            "time", str(python_server("mcp-server-time")), ("--local-timezone", "UTC")
        )
        extra = {
            "limits": {"key_rate_per_s": 0},
            "permissions": {"allow": ["time:*"], "deny": ["time:convert_time"]},
        }
        config = write_config(
            workdir / "pml.toml", [time_server], database_url=sqlite_url(workdir), extra=extra
        )
        args.attacker_key = create_key(config, "evil-org", "main", "mallory")["key"]
        victim_key = create_key(config, "good-org", "main", "alice")["key"]
        with pml_http(config, workdir / "pml.log") as gateway:
            async with (
                http_client(gateway.mcp_url, victim_key) as victim,
                http_client(gateway.mcp_url, args.attacker_key) as attacker,
            ):
                for _ in range(10):
                    await trivial(victim)
                await attacker.call_tool(
                    "pml_execute",
                    {"intent": "victimless", "code": "return 1", "name": "victimless"},
                )
                idle: list[float] = []
                for _ in range(50):
                    started = time.perf_counter()
                    await trivial(victim)
                    idle.append((time.perf_counter() - started) * 1000)
                bench = Bench(gateway, workdir / "pml.db", victim, attacker)
                chosen = attacks(bench, args)
                results: list[dict[str, Any]] = []
                for name, attack in chosen.items():
                    if args.only and name not in args.only:
                        continue
                    results.append(await bench.measure(name, attack))
                    print(json.dumps(results[-1]), file=sys.stderr, flush=True)
                alive = True
                try:
                    with anyio.fail_after(30):
                        await trivial(victim)
                except Exception:  # noqa: BLE001 - any failure means it stopped serving
                    alive = False
                rss = rss_mb(gateway.process.pid)
    return {
        "idle": figures(idle, 0),
        "attacks": results,
        "final_rss_mb": round(rss, 1),
        "still_serving": alive,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--tags", type=int, default=40_000, help="distinct tags in one rename")
    parser.add_argument("--calls", type=int, default=100, help="calls per many-calls attack")
    parser.add_argument("--denials", type=int, default=3_000, help="denied calls in one run")
    parser.add_argument("--versions", type=int, default=150, help="versions of one capability")
    parser.add_argument("--big-streams", type=int, default=4, help="parallel big-snippet streams")
    parser.add_argument("--big-snippets", type=int, default=8, help="new ~80 KB snippets a stream")
    parser.add_argument("--notifications", type=int, default=500)
    args = parser.parse_args()
    print(json.dumps(anyio.run(run, args), indent=1))


if __name__ == "__main__":
    main()
