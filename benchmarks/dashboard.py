"""Server time of every dashboard page with a large install behind it (SPEC §12).

    python benchmarks/dashboard.py [--backend sqlite|postgres] [--capabilities 10000]
                                   [--events 100000] [--servers 50] [--usage 100000] [--n 30]

Fills a fresh database with N capabilities (named, from the synthetic set the discovery
benchmark uses), audit events, upstream servers (their reported state and ten tools each,
every fifth tool's definition changed since pinned), tool usage rows over the last 30 days,
pending approvals and grants; opens the dashboard's services the way ``pml dashboard``
does, signs in, and requests every page ``n`` times in-process (ASGI, no network: the
figure is the server's time to answer). Prints one JSON line:
{"pages": {"<page>": {"p50_ms", "p95_ms", "status"}}, "seed_s", ...}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import mcp_types
from starlette.applications import Starlette

sys.path.insert(0, str(Path(__file__).resolve().parent))
from data.synthetic_capabilities import generate
from pml.config import Settings
from pml.execution.approval_desk import APPROVAL_KIND
from pml.registry.models import CapabilityDraft
from pml.registry.scope import Principal, Scope
from pml.registry.service import CapabilityRegistry
from pml.storage.audit_repo import AuditEntry, AuditRepository
from pml.storage.catalog_repo import CatalogStore
from pml.storage.database import Database
from pml.storage.types import utc_now
from pml.storage.usage_repo import SqlToolUsageRepository, ToolUsageRow
from pml.storage.workflow_repo import WorkflowStateStore
from pml.upstream.base import ServerStatus
from pml.web.dashboard import dashboard_routes
from pml.web.dashboard.sessions import SignInTokens
from pml.web.services import open_web_services
from throwaway_postgres import throwaway_database

SCOPE = Scope("local", "default", "bench")
EVENTS = ("TOOL_CALL_START", "TOOL_CALL_END", "PERMISSION_CHECK", "POLICY_DECISION")
BATCH = 5000


async def seed(db: Database, args: argparse.Namespace) -> dict[str, Any]:
    """Everything the pages read; returns names the timed requests use."""
    registry = CapabilityRegistry(db)
    fqdns: list[str] = []
    for cap in generate(args.capabilities, seed=0):
        draft = CapabilityDraft(
            code=cap["code"],
            name=cap["display_name"],
            intent=cap["intent"],
            parameters_schema=cap["parameters_schema"],
            description=cap["description"],
        )
        record = await registry.capture(SCOPE, draft, latency_ms=1.0)
        fqdns.append(record.record.fqdn)
    catalog = CatalogStore(db)
    statuses: list[ServerStatus] = []
    for index in range(args.servers):
        name = f"srv{index:02d}"
        tools = [
            mcp_types.Tool(
                name=f"tool_{t}",
                description=f"Tool {t} of {name}",
                input_schema={"type": "object", "properties": {"x": {"type": "string"}}},
            )
            for t in range(10)
        ]
        await catalog.record_catalog(name, tools)
        changed = [
            tool.model_copy(update={"description": f"{tool.description}, changed"})
            if t % 5 == 0
            else tool
            for t, tool in enumerate(tools)
        ]
        await catalog.record_catalog(name, changed)
        statuses.append(ServerStatus(name, "running", "stdio", 10, last_latency_ms=3.5))
    await catalog.record_status(statuses, reported_by="bench")
    repo = AuditRepository(db)
    now = utc_now()
    rng = random.Random(0)
    for start in range(0, args.events, BATCH):
        rows = [
            AuditEntry(
                ts=now - timedelta(seconds=args.events - i),
                event=EVENTS[i % len(EVENTS)],
                org=SCOPE.org,
                project=SCOPE.project,
                details={"tool": f"srv{i % args.servers:02d}:tool_{i % 10}", "n": i},
                actor=f"user{i % 7}",
                request_id=f"req_{i // 4}",
                decided_by="rule" if i % 3 else None,
            )
            for i in range(start, min(start + BATCH, args.events))
        ]
        await repo.insert_many(rows)
    for start in range(0, args.usage, BATCH):
        calls = [
            ToolUsageRow(
                server_id=f"srv{rng.randrange(args.servers):02d}",
                tool_name=f"tool_{rng.randrange(10)}",
                latency_ms=rng.uniform(1, 200),
                success=rng.random() > 0.05,
                org=SCOPE.org,
                project=SCOPE.project,
                user_id="bench",
                called_at=now - timedelta(seconds=rng.uniform(0, 30 * 86400)),
            )
            for _ in range(start, min(start + BATCH, args.usage))
        ]
        async with db.transaction() as conn:  # as the gateway records them (with the roll-up)
            await SqlToolUsageRepository(conn).insert_many(calls)
    workflows = WorkflowStateStore(db)
    for index in range(20):
        state = {
            "intent": "write a report",
            "approvals": [
                {
                    "tool": "srv00:tool_1",
                    "server": "srv00",
                    "capability": "file_write",
                    "reason": "ask: srv00:*",
                    "arguments": [
                        {
                            "name": "path",
                            "value": f"/w/report{index}.txt",
                            "bytes": 16,
                            "truncated": False,
                            "target": True,
                        },
                        {
                            "name": "content",
                            "value": "x" * 200,
                            "bytes": 200,
                            "truncated": False,
                            "target": False,
                        },
                    ],
                }
            ],
        }
        await workflows.put(
            f"wf_bench_{index}", kind=APPROVAL_KIND, scope=SCOPE, state=state, ttl_s=3600
        )
    return {"fqdn": fqdns[len(fqdns) // 2], "server": f"srv{min(7, args.servers - 1):02d}"}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def run(url: str, args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    db = await Database.open(url)
    try:
        names = await seed(db, args)
    finally:
        await db.close()
    seed_s = time.perf_counter() - started
    settings = Settings.model_validate(
        {
            "database_url": url,
            "scope": {"org": SCOPE.org, "project": SCOPE.project},
            "discovery": {"embedder": args.embedder},
            "audit": {"file": str(Path(tempfile.mkdtemp()) / "audit.jsonl")},
        }
    )
    pages = {
        "approvals": "/ui/approvals",
        "approvals_live": "/ui/approvals/live",
        "capabilities": "/ui/capabilities",
        "capabilities_search": "/ui/capabilities?q=export+invoices+to+csv",
        "capabilities_page_50": "/ui/capabilities?offset=5000",
        "capability_detail": f"/ui/capabilities/{names['fqdn']}",
        "servers": "/ui/servers",
        "server_detail": f"/ui/servers/{names['server']}",
        "audit": "/ui/audit",
        "audit_filtered": "/ui/audit?event=PERMISSION_CHECK&user=user3",
        "audit_tool": f"/ui/audit?tool={names['server']}:tool_3",
        "usage": "/ui/usage",
    }
    results: dict[str, Any] = {}
    async with open_web_services(settings) as services:
        if services.discovery is not None:  # the search index built before any timing
            await services.discovery.rank(Scope("local", "default", "ana"), "warm up", limit=1)
        tokens = SignInTokens(Principal(Scope(SCOPE.org, SCOPE.project, "ana"), "admin"))
        app = Starlette(routes=dashboard_routes(services, signin=tokens))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as http:
            signed = await http.get("/ui/signin", params={"token": tokens.issue()})
            assert signed.status_code == 303, signed.text
            for page, path in pages.items():
                first = await http.get(path)  # warm: caches, the search index
                answer = first
                times: list[float] = []
                for _ in range(args.n):
                    begin = time.perf_counter()
                    answer = await http.get(path)
                    times.append((time.perf_counter() - begin) * 1000)
                results[page] = {
                    "p50_ms": round(statistics.median(times), 2),
                    "p95_ms": round(percentile(times, 0.95), 2),
                    "status": answer.status_code,
                    "first_ms_status": first.status_code,
                }
    return {
        "backend": args.backend,
        "capabilities": args.capabilities,
        "events": args.events,
        "servers": args.servers,
        "usage_rows": args.usage,
        "embedder": args.embedder,
        "seed_s": round(seed_s, 1),
        "pages": results,
        "slowest_p95_ms": max(page["p95_ms"] for page in results.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--capabilities", type=int, default=10_000)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--servers", type=int, default=50)
    parser.add_argument("--usage", type=int, default=100_000)
    parser.add_argument("--n", type=int, default=30)
    parser.add_argument("--embedder", default="auto", help="auto (MiniLM) or hashing")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # flagged definitions are expected here
    if args.backend == "postgres":

        async def on_postgres() -> dict[str, Any]:
            async with throwaway_database() as url:
                return await run(url, args)

        printed = asyncio.run(on_postgres())
    else:
        with tempfile.TemporaryDirectory() as folder:
            printed = asyncio.run(run(f"sqlite:///{folder}/pml.db", args))
    print(json.dumps(printed))


if __name__ == "__main__":
    main()
