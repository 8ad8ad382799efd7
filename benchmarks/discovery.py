"""Discovery quality and speed: the reference servers' tools plus synthetic capabilities.

    python benchmarks/discovery.py [--items 10000] [--queries benchmarks/data/discovery_dev.json]
                                   [--queries MORE.json ...] [--holdout]
                                   [--embedder auto|minilm|hashing] [--db PATH]

Builds a fresh SQLite database holding ``items - 51`` named synthetic capabilities (the
learned capabilities of one project) next to the 51 tools of the real reference servers
(filesystem, memory, everything, time, git, fetch; ``benchmarks/data/reference_tools.json``,
listed from the servers by ``snapshot_reference_tools.py``), opens a ``DiscoveryService`` on
it as ``pml serve`` does, and runs each query of the set once through ``discover`` (the
query's embedding included: the query cache is off). Prints one JSON line:
``{"n_items", "recall_at_1", "recall_at_5", "mrr", "p50_ms", "p95_ms", "per_kind", ...}``
for the first query set (the development set unless ``--queries`` says otherwise), with the
index build time and the embedder used; ``per_kind`` gives the same figures for the tool and
the capability queries apart. Every further set (``--queries`` again, or ``--holdout``: the
held-out sets ``tests/discovery/data/discovery_holdout*.json``, to be looked at, never tuned
on) is reported under ``"sets": {<file stem>: {...}}`` with its own per-kind figures.
``--db`` keeps the database (and its stored vectors) so a second run skips the captures and
the embedding.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import anyio

# this script is itself named "discovery": take the helpers from their folder directly
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "discovery"))
from quality import (  # pyright: ignore[reportMissingImports]
    DEV_SET,
    HOLDOUT_SETS,
    Report,
    StaticTools,
    evaluate,
    fill,
    generate,
    load_queries,
    reference_tools,
)

from pml.discovery.embedder import load_embedder
from pml.discovery.service import DiscoveryService
from pml.registry.models import ListQuery, RoutingRules
from pml.registry.scope import Scope
from pml.registry.service import CapabilityRegistry
from pml.storage.database import Database

SCOPE = Scope("local", "default", "bench")


def figures(report: Report) -> dict[str, object]:
    return {
        **report.summary(),
        "n_queries": report.n_queries,
        "per_kind": report.per_kind(),
    }


def missed(report: Report) -> list[dict[str, object]]:
    misses = report.misses
    return [{"query": q, "top3": top} for q, top in misses][:20]


async def run(
    items: int, query_sets: list[Path], embedder_choice: str, db_path: Path
) -> dict[str, object]:
    tools = reference_tools()
    synthetic = generate(max(items - len(tools), 50))
    db = await Database.open(f"sqlite:///{db_path}")
    try:
        registry = CapabilityRegistry(db)
        started = time.perf_counter()
        existing = (await registry.list(SCOPE, ListQuery(named_only=True, limit=1))).total
        if existing < len(synthetic):
            names = await fill(registry, SCOPE, synthetic)
        else:
            names = {item["display_name"]: item["id"] for item in synthetic}
        fill_s = time.perf_counter() - started
        embedder = load_embedder(embedder_choice)  # type: ignore[arg-type]
        service = DiscoveryService(
            db, StaticTools(tools), embedder, routing=RoutingRules(), query_cache_size=0
        )
        started = time.perf_counter()
        await service.refresh()
        build_s = time.perf_counter() - started
        await service.discover(SCOPE, "warm up the worker thread")
        reports = [await evaluate(service, SCOPE, load_queries(path), names) for path in query_sets]
        return {
            "n_items": len(service),
            **figures(reports[0]),
            "embedder": embedder.model_id,
            "capture_s": round(fill_s, 1),
            "index_build_s": round(build_s, 2),
            "misses": missed(reports[0]),
            "sets": {
                path.stem: {**figures(report), "misses": missed(report)}
                for path, report in zip(query_sets[1:], reports[1:], strict=True)
            },
        }
    finally:
        await db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description="Discovery quality and speed")
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument(
        "--queries", type=Path, action="append", help="a query set (repeatable; first: the dev set)"
    )
    parser.add_argument("--holdout", action="store_true", help="also the held-out sets")
    parser.add_argument("--embedder", default="auto", choices=["auto", "minilm", "hashing"])
    parser.add_argument("--db", type=Path, default=None)
    options = parser.parse_args()
    query_sets: list[Path] = options.queries or [DEV_SET]
    if options.holdout:
        query_sets += [path for path in HOLDOUT_SETS if path not in query_sets]
    with tempfile.TemporaryDirectory() as tmp:
        db_path = options.db or Path(tmp) / "discovery.db"
        result = anyio.run(run, options.items, query_sets, options.embedder, db_path)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
