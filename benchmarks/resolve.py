"""Name-resolution latency of the capability registry.

    python benchmarks/resolve.py --backend sqlite --n 100000
    python benchmarks/resolve.py --backend postgres --n 100000 [--url postgresql://...]

Fills one scope with N capabilities (each with two versions, one in ten renamed so it has
an alias), plus N/10 in other scopes, then times ``CapabilityRegistry.resolve`` through the
public API on a mix of references (display names, aliases, FQDNs, tool names, @v1). Prints
one JSON line: {"backend", "n", "p50_ms", "p95_ms", "p99_ms", ...}.

PostgreSQL: without --url a throw-away database is created on the local server
(PML_TEST_POSTGRES_URL or postgresql://postgres@127.0.0.1:5432/postgres) and dropped after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg  # pyright: ignore[reportMissingTypeStubs]
import sqlalchemy as sa

from pml.registry.scope import Scope
from pml.registry.service import CapabilityRegistry
from pml.storage.database import Database
from pml.storage.tables import capability_aliases, capability_records, capability_versions

SCOPE = Scope("bench", "main", "bench-user")
BATCH = 5_000


def _rows(
    first: int, count: int, org: str, project: str, start: datetime
) -> tuple[list[dict[str, Any]], ...]:
    records: list[dict[str, Any]] = []
    versions: list[dict[str, Any]] = []
    aliases: list[dict[str, Any]] = []
    for i in range(first, first + count):
        digest = f"{i:08x}" + uuid.uuid4().hex + uuid.uuid4().hex[:24]
        action = f"action_{i}"
        fqdn = f"{org}.{project}.ns{i % 50}.{action}.{digest[:4]}"
        renamed = i % 10 == 0
        name = f"ns{i % 50}:{action}" + ("_v2" if renamed else "")
        tool = f"mcp__ns{i % 50}__{action}" + ("_v2" if renamed else "")
        when = start + timedelta(seconds=i)
        common = {
            "parameters_schema": {"type": "object", "properties": {}},
            "tools_used": [f"srv{i % 7}:tool"],
            "routing": "local",
        }
        records.append(
            {
                "fqdn": fqdn,
                "id": str(uuid.uuid4()),
                "record_type": "capability",
                "org": org,
                "project": project,
                "display_name": name,
                "named": True,
                "namespace": f"ns{i % 50}",
                "action": action + ("_v2" if renamed else ""),
                "tool_name": tool,
                "hash": digest[:4],
                "code": f"return {i} + 1",
                "code_hash": digest,
                "intent": f"benchmark capability {i}",
                "tags": ["bench"],
                "visibility": "project",
                "version": 2,
                "created_by": SCOPE.user,
                "created_at": when,
                "updated_by": SCOPE.user,
                "updated_at": when,
                **common,
            }
        )
        for version in (1, 2):
            versions.append(
                {
                    "capability_fqdn": fqdn,
                    "version": version,
                    "code": f"return {i} + {version - 1}",
                    "code_hash": digest if version == 2 else None,
                    "updated_by": SCOPE.user,
                    "updated_at": when - timedelta(hours=2 - version),
                    **common,
                }
            )
        if renamed:
            aliases.append(
                {
                    "org": org,
                    "project": project,
                    "alias": f"ns{i % 50}:{action}",
                    "tool_name": f"mcp__ns{i % 50}__{action}",
                    "target_fqdn": fqdn,
                    "created_at": when,
                }
            )
    return records, versions, aliases


async def fill(db: Database, n: int) -> list[str]:
    """Insert the data set; return the references to resolve."""
    start = datetime(2025, 1, 1, tzinfo=UTC)
    refs: list[str] = []
    for org, project, count in (
        (SCOPE.org, SCOPE.project, n),
        ("other", "tenant", max(1, n // 10)),
    ):
        for offset in range(0, count, BATCH):
            records, versions, aliases = _rows(
                offset, min(BATCH, count - offset), org, project, start
            )
            async with db.transaction() as conn:
                await conn.execute(capability_records.insert(), records)
                await conn.execute(capability_versions.insert(), versions)
                if aliases:
                    await conn.execute(capability_aliases.insert(), aliases)
            if org == SCOPE.org:
                for record in records:
                    refs.extend([record["display_name"], record["fqdn"], record["tool_name"]])
                refs.extend(alias["alias"] for alias in aliases)
                refs.extend(f"{record['display_name']}@v1" for record in records[:50])
    return refs


async def measure(db: Database, refs: list[str], samples: int) -> dict[str, float]:
    """Time ``resolve`` on random references; milliseconds."""
    registry = CapabilityRegistry(db)
    rng = random.Random(7)
    for ref in rng.sample(refs, min(500, len(refs))):  # warm caches and the connection pool
        await registry.resolve(SCOPE, ref)
    timings: list[float] = []
    for _ in range(samples):
        ref = rng.choice(refs)
        started = time.perf_counter()
        await registry.resolve(SCOPE, ref)
        timings.append((time.perf_counter() - started) * 1000)
    quantiles = statistics.quantiles(timings, n=100, method="inclusive")
    return {
        "p50_ms": round(quantiles[49], 4),
        "p95_ms": round(quantiles[94], 4),
        "p99_ms": round(quantiles[98], 4),
    }


async def _admin(url: str, statement: str) -> None:
    parsed = sa.make_url(url)
    conn = await asyncpg.connect(  # pyright: ignore[reportUnknownMemberType]
        host=parsed.host,
        port=parsed.port or 5432,
        user=parsed.username,
        password=parsed.password,
        database=parsed.database,
    )
    try:
        await conn.execute(statement)  # pyright: ignore[reportUnknownMemberType]
    finally:
        await conn.close()  # pyright: ignore[reportUnknownMemberType]


async def run(backend: str, n: int, samples: int, url: str | None) -> dict[str, Any]:
    """Fill, measure, clean up; the JSON result."""
    throwaway: tuple[str, str] | None = None
    workdir = tempfile.TemporaryDirectory()
    if url is None and backend == "sqlite":
        url = f"sqlite:///{Path(workdir.name) / 'bench.db'}"
    elif url is None:
        admin = os.environ.get(
            "PML_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
        )
        name = f"pml_bench_{uuid.uuid4().hex[:10]}"
        await _admin(admin, f'CREATE DATABASE "{name}"')
        throwaway = (admin, name)
        url = sa.make_url(admin).set(database=name).render_as_string(hide_password=False)
    db = await Database.open(url)
    try:
        fill_started = time.perf_counter()
        refs = await fill(db, n)
        if db.dialect == "postgresql":
            async with db.transaction() as conn:
                await conn.execute(sa.text("ANALYZE"))
        fill_s = time.perf_counter() - fill_started
        figures = await measure(db, refs, samples)
    finally:
        await db.close()
        if throwaway is not None:
            await _admin(throwaway[0], f'DROP DATABASE IF EXISTS "{throwaway[1]}" WITH (FORCE)')
        workdir.cleanup()
    return {"backend": backend, "n": n, **figures, "samples": samples, "fill_s": round(fill_s, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description="Name-resolution latency of the registry.")
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=5_000)
    parser.add_argument(
        "--url", default=None, help="an existing database to fill (it is not emptied)"
    )
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.backend, args.n, args.samples, args.url))))


if __name__ == "__main__":
    main()
