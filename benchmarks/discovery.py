"""Discovery quality and speed: the reference servers' tools plus synthetic capabilities.

    python benchmarks/discovery.py [--items 10000] [--queries benchmarks/data/discovery_dev.json]
                                   [--embedder auto|minilm|hashing] [--db PATH]

Builds a fresh SQLite database holding ``items - 51`` named synthetic capabilities (the
learned capabilities of one project) next to the 51 tools of the real reference servers
(filesystem, memory, everything, time, git, fetch; ``benchmarks/data/reference_tools.json``,
listed from the servers by ``snapshot_reference_tools.py``), opens a ``DiscoveryService`` on
it as ``pml serve`` does, and runs each query of the set once through ``discover`` (the
query's embedding included: the query cache is off). Prints one JSON line:
``{"n_items", "recall_at_1", "recall_at_5", "mrr", "p50_ms", "p95_ms", ...}`` with the index
build time and the embedder used. ``--db`` keeps the database (and its stored vectors) so a
second run skips the captures and the embedding.
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


async def run(
    items: int, queries_path: Path, embedder_choice: str, db_path: Path
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
        queries = load_queries(queries_path)
        await service.discover(SCOPE, "warm up the worker thread")
        report = await evaluate(service, SCOPE, queries, names)
        return {
            "n_items": len(service),
            **report.summary(),
            "n_queries": report.n_queries,
            "embedder": embedder.model_id,
            "capture_s": round(fill_s, 1),
            "index_build_s": round(build_s, 2),
            "misses": [{"query": q, "top3": top} for q, top in report.misses][:20],
        }
    finally:
        await db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description="Discovery quality and speed")
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--queries", type=Path, default=DEV_SET)
    parser.add_argument("--embedder", default="auto", choices=["auto", "minilm", "hashing"])
    parser.add_argument("--db", type=Path, default=None)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db_path = options.db or Path(tmp) / "discovery.db"
        result = anyio.run(run, options.items, options.queries, options.embedder, db_path)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
