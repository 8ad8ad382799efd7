"""Finding a learned capability again by a paraphrase, through a real gateway (issue 20).

    python benchmarks/paraphrase.py [--tasks 50] [--http] [--skip-reuse]

Starts a real ``pml serve`` (``--stdio``, or ``--http`` on a loopback port) with the
filesystem and time reference servers upstream and a SQLite database in a temporary folder,
and connects the official SDK client. The tasks of ``data/paraphrase_tasks.json`` (50
snippets over those servers: reading and counting logs, CSV sums, config checks, notes, code
statistics, folder sizes, time-zone conversions...) each hold one creation intent, two
reuse intents and three queries, all worded differently. Then:

1. creation: ``pml_execute {intent, code, name}`` for every task (a named capability);
2. reuse: the same code again under each of the two other intents, which the capability
   remembers (``--skip-reuse`` leaves this out, to measure what remembering adds);
3. queries: every query (three per task, none of them an intent it was run with) through
   ``pml_discover`` with ``kind: "capability"`` and with ``kind: "all"`` (tools compete).

Prints one JSON object: ``capability`` and ``all`` with ``top1``, ``top3`` (the share of
queries whose capability is first / in the first three), ``p50_ms``/``p95_ms`` of the
``pml_discover`` round trips as the client sees them, ``intents_kept`` (how many intents
``cap_whois`` shows per capability, on average), and the first misses. Goal: capability
top-1 >= 0.90. Needs the npm servers of the e2e tests (``scripts/e2e-deps.sh``, run here).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from e2e.support import (  # the helpers that start real servers and PML live with the e2e tests
    create_key,
    http_client,
    install_npm_deps,
    pml_http,
    pml_stdio,
    reference_servers,
    result_json,
    sqlite_url,
    write_config,
)

TASKS = Path(__file__).resolve().parent / "data" / "paraphrase_tasks.json"
ROOT_MARK = "{root}"
SETTLE_S = 10.0  # how long remembered intents may take to reach discovery


def load_tasks(limit: int) -> tuple[dict[str, str], list[dict[str, Any]]]:
    data = json.loads(TASKS.read_text())
    return data["files"], data["tasks"][:limit]


def write_files(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(share * len(ordered)))], 2)


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return result_json(await client.call_tool(tool, arguments))


async def execute(client: Client, intent: str, code: str, name: str | None = None) -> str:
    """Run ``code`` under ``intent``; the capability's FQDN (fails loudly on an error)."""
    arguments: dict[str, Any] = {"intent": intent, "code": code}
    if name is not None:
        arguments["name"] = name
    answer = await call(client, "pml_execute", arguments)
    if answer.get("status") != "success":
        raise RuntimeError(f"{name or intent!r} failed: {json.dumps(answer)[:600]}")
    return str(answer["capabilityFqdn"])


async def settle(client: Client, intent: str, fqdn: str) -> float:
    """Seconds until ``intent`` (a reuse intent) finds ``fqdn`` first (bounded by SETTLE_S)."""
    started = time.perf_counter()
    while time.perf_counter() - started < SETTLE_S:
        found = await call(client, "pml_discover", {"intent": intent, "kind": "capability"})
        results = found.get("results") or []
        if results and results[0].get("fqdn") == fqdn:
            break
        await anyio.sleep(0.2)
    return round(time.perf_counter() - started, 2)


async def intents_kept(client: Client, fqdns: list[str]) -> float | None:
    """Average number of intents ``cap_whois`` lists per capability (None: not listed)."""
    counts: list[int] = []
    for fqdn in fqdns:
        record = await call(client, "cap_whois", {"fqdn": fqdn})
        kept = record.get("intents")
        if kept is None and isinstance(record.get("record"), dict):
            kept = record["record"].get("intents")
        if isinstance(kept, list):
            counts.append(len(kept))
    return round(sum(counts) / len(counts), 2) if counts else None


class Scores:
    """Top-1 and top-3 hits and round-trip times of one way of asking."""

    def __init__(self) -> None:
        self.top1 = 0
        self.top3 = 0
        self.n = 0
        self.latencies_ms: list[float] = []
        self.misses: list[dict[str, Any]] = []

    def add(self, query: str, fqdn: str, results: list[dict[str, Any]], ms: float) -> None:
        ranked = [str(result.get("fqdn") or result.get("name")) for result in results]
        self.n += 1
        self.top1 += ranked[:1] == [fqdn]
        self.top3 += fqdn in ranked[:3]
        self.latencies_ms.append(ms)
        if ranked[:1] != [fqdn]:
            self.misses.append({"query": query, "want": fqdn, "top3": ranked[:3]})

    def summary(self) -> dict[str, Any]:
        return {
            "top1": round(self.top1 / self.n, 4),
            "top3": round(self.top3 / self.n, 4),
            "p50_ms": percentile(self.latencies_ms, 0.5),
            "p95_ms": percentile(self.latencies_ms, 0.95),
            "misses": self.misses[:15],
        }


async def measure(client: Client, root: Path, tasks: list[dict[str, Any]], reuse: bool) -> Any:
    fqdns: list[str] = []
    started = time.perf_counter()
    for task in tasks:
        code = task["code"].replace(ROOT_MARK, str(root))
        fqdns.append(await execute(client, task["intents"][0], code, task["name"]))
    create_s = time.perf_counter() - started
    started = time.perf_counter()
    if reuse:
        for task, fqdn in zip(tasks, fqdns, strict=True):
            code = task["code"].replace(ROOT_MARK, str(root))
            for intent in task["intents"][1:]:
                if await execute(client, intent, code) != fqdn:
                    raise RuntimeError(f"the same code made another capability: {task['name']}")
    reuse_s = time.perf_counter() - started
    settled = await settle(client, tasks[-1]["intents"][-1], fqdns[-1]) if reuse else 0.0
    scores = {"capability": Scores(), "all": Scores()}
    for task, fqdn in zip(tasks, fqdns, strict=True):
        for query in task["queries"]:
            for kind, score in scores.items():
                sent = time.perf_counter()
                found = await call(client, "pml_discover", {"intent": query, "kind": kind})
                ms = (time.perf_counter() - sent) * 1000
                score.add(query, fqdn, found.get("results") or [], ms)
    return {
        "capabilities": len(fqdns),
        "queries": scores["capability"].n,
        "reuse": reuse,
        **{kind: score.summary() for kind, score in scores.items()},
        "intents_kept": await intents_kept(client, fqdns),
        "create_s": round(create_s, 2),
        "reuse_s": round(reuse_s, 2),
        "settle_s": settled,
    }


@asynccontextmanager
async def gateway_client(config: Path, workdir: Path, http: bool) -> AsyncIterator[Client]:
    """The SDK client of a real ``pml serve`` on ``config`` (stdio, or HTTP with a key)."""
    if not http:
        async with pml_stdio(config, workdir / "pml.log") as gateway:
            yield gateway.client
        return
    key = create_key(config, "local", "default", "bench")["key"]
    with pml_http(config, workdir / "pml.log") as gateway:
        async with http_client(gateway.mcp_url, key) as client:
            yield client


async def run(options: argparse.Namespace) -> dict[str, Any]:
    files, tasks = load_tasks(options.tasks)
    deps = install_npm_deps()
    with tempfile.TemporaryDirectory(prefix="pml-paraphrase-") as tmp:
        workdir = Path(tmp)
        servers = reference_servers(deps, workdir)
        root = workdir / "files"
        write_files(root, files)
        config = write_config(
            workdir / "pml.toml",
            [servers["filesystem"], servers["time"]],
            database_url=sqlite_url(workdir),
            expose_upstream=False,
            # discovery is measured, not the gate: an intent-based refusal of a write would
            # stop a task, so the policy audits instead of refusing
            extra={"permissions": {"allow": ["*:*"]}, "policy": {"mode": "audit"}},
        )
        async with gateway_client(config, workdir, options.http) as client:
            result = await measure(client, root, tasks, not options.skip_reuse)
    return {"transport": "http" if options.http else "stdio", **result}


def main() -> None:
    parser = argparse.ArgumentParser(description="Finding learned capabilities by paraphrase")
    parser.add_argument("--tasks", type=int, default=50, help="how many of the 50 tasks")
    parser.add_argument("--http", action="store_true", help="pml serve --http, not --stdio")
    parser.add_argument("--skip-reuse", action="store_true", help="no second and third intents")
    options = parser.parse_args()
    print(json.dumps(anyio.run(run, options)))


if __name__ == "__main__":
    main()
