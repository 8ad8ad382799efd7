"""Cost of the enforcement point per tool call: policy gate, capability map, permission
rules and grant check (SPEC §10).

    python benchmarks/policy.py [--backend sqlite|postgres] [--n 20000] [--rules 1000]
                                [--grants 10000]

Configures 1 000 permission rules (allow/ask/deny globs and exact names over 200 servers)
and stores 10 000 active grants (100 principals × 100 grants), then times
``PolicyEnforcer.authorize`` — the call every tool call of a snippet makes — on a mix of
calls: tools allowed by a rule or a capability default (decided in memory) and tools whose
rule says ``ask``, covered by one of the principal's grants (one indexed read of that
principal's grants for that capability). The audit log is real but writes to a temporary
file and database. Prints one JSON line:
{"per_call_p50_us", "per_call_p95_us", "memory_p50_us", "memory_p95_us",
 "grant_p50_us", "grant_p95_us", ...}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from pml.config import PermissionsSettings, PolicySettings, Settings
from pml.gateway.policy_services import build_enforcer
from pml.policy.audit import AuditLog
from pml.policy.grant_stamp import grant_stamp_for
from pml.policy.grants import GrantService
from pml.policy.version import policy_version
from pml.registry.scope import Scope
from pml.storage.database import Database
from throwaway_postgres import throwaway_database

PRINCIPALS = 100


def _rules(count: int) -> PermissionsSettings:
    allow, ask, deny = [], [], []
    for i in range(count):
        pattern = f"srv{i % 200}:tool_{i}" if i % 3 else f"srv{i % 200}:group{i}_*"
        (allow, ask, deny)[i % 3].append(pattern)
    ask.append("files:write_*")
    allow.append("files:read_*")
    return PermissionsSettings(allow=allow, ask=ask, deny=deny)


def _settings(url: str, rules: int) -> Settings:
    return Settings(
        database_url=url,
        policy=PolicySettings(
            capabilities={"files:read_*": "file_read", "files:write_*": "file_write"}
        ),
        permissions=_rules(rules),
    )


def _grants_per_principal(total: int) -> int:
    """At least two, so that every principal has a ``file_write`` grant (the odd ones)."""
    return max(2, total // PRINCIPALS)


async def _fill_grants(grants: GrantService, total: int) -> None:
    per = _grants_per_principal(total)
    for p in range(PRINCIPALS):
        scope = Scope("bench", "main", f"user{p}")
        for g in range(per):
            await grants.issue(
                scope,
                capability="file_write" if g % 2 else "system_execute",
                tool_pattern="files:write_*" if g % 2 else f"shell{g}:*",
                path_prefix=f"/data/u{p}/{g}" if g % 2 else None,
                ttl_s=86_400.0,
                max_uses=None,
                decided_by="benchmark",
            )


async def run(url: str, n: int, rules: int, total_grants: int) -> dict[str, Any]:
    settings = _settings(url, rules)
    db = await Database.open(url)
    tmp = Path(tempfile.mkdtemp())
    audit = AuditLog(db, tmp / "audit.jsonl", coalesce_window_s=60.0)
    try:
        async with audit.running():
            grants = GrantService(
                db, audit, policy_version=policy_version(settings), stamp=grant_stamp_for(settings)
            )
            started = time.perf_counter()
            await _fill_grants(grants, total_grants)
            fill_s = time.perf_counter() - started
            enforcer = build_enforcer(settings, audit, grants, llm=None)
            rng = random.Random(7)
            scope = Scope("bench", "main", "user7")
            request = await enforcer.begin(scope, "edit the notes in /data", source="benchmark")
            memory: list[float] = []
            granted: list[float] = []
            for i in range(n):
                if i % 5 == 0:  # ask rule, covered by a grant with a path prefix
                    g = rng.randrange(1, _grants_per_principal(total_grants), 2)
                    server, tool = "files", "write_file"
                    arguments: dict[str, Any] = {"path": f"/data/u7/{g}/notes.txt", "content": "x"}
                    bucket = granted
                else:
                    server, tool = ("files", "read_file") if i % 2 else ("time", "get_current_time")
                    arguments = {"path": f"/data/u7/{i}.txt"}
                    bucket = memory
                t0 = time.perf_counter()
                await enforcer.authorize(request, server, tool, arguments)
                bucket.append((time.perf_counter() - t0) * 1e6)
                if i % 2000 == 0:
                    await audit.flush()
    finally:
        await db.close()
    every = sorted(memory + granted)
    return {
        "backend": db.dialect,
        "calls": n,
        "rules": rules + 2,
        "active_grants": _grants_per_principal(total_grants) * PRINCIPALS,
        "per_call_p50_us": round(_pct(every, 50), 1),
        "per_call_p95_us": round(_pct(every, 95), 1),
        "memory_p50_us": round(_pct(sorted(memory), 50), 1),
        "memory_p95_us": round(_pct(sorted(memory), 95), 1),
        "grant_p50_us": round(_pct(sorted(granted), 50), 1),
        "grant_p95_us": round(_pct(sorted(granted), 95), 1),
        "grant_fill_s": round(fill_s, 1),
    }


def _pct(values: list[float], q: int) -> float:
    if not values:
        return 0.0
    return (
        statistics.quantiles(values, n=100, method="inclusive")[q - 1]
        if len(values) > 1
        else values[0]
    )


async def _with_postgres(args: argparse.Namespace) -> dict[str, Any]:
    async with throwaway_database() as url:
        return await run(url, args.n, args.rules, args.grants)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--rules", type=int, default=1_000)
    parser.add_argument("--grants", type=int, default=10_000)
    args = parser.parse_args()
    if args.backend == "postgres":
        result = asyncio.run(_with_postgres(args))
    else:
        folder = Path(tempfile.mkdtemp())
        result = asyncio.run(
            run(f"sqlite:///{folder / 'bench.db'}", args.n, args.rules, args.grants)
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
