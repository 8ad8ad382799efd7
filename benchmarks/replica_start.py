"""Replicas of one PostgreSQL database building their discovery index at the same moment.

    python benchmarks/replica_start.py [--replicas 3] [--capabilities 1000] [--embedder auto]
                                       [--sqlite]

A fresh PostgreSQL database (``PML_TEST_POSTGRES_URL``, default the local server; with
``--sqlite`` a SQLite file, as the local gateways of one user share) is given
``--capabilities`` learned capabilities (the synthetic generator of the quality tests). Then
``--replicas`` processes start at once, each as ``pml serve --http`` starts its index: its
own embedder (the shipped model, own process), the reference servers' 51 tools
(``benchmarks/data/reference_tools.json``) and ``DiscoveryService.refresh()`` on that
database, counting the texts it embeds. A single process on a second fresh database, after
them, is the baseline: what one replica alone embeds (every text once) and how long it takes.

Prints one JSON object: ``texts`` (what one replica alone embeds), ``alone_s``, and for the
replicas started together ``embedded`` (per replica), ``embedded_total`` and its ratio to
``texts`` (1.0: each text embedded once between them; ``replicas``: every replica embedded
everything), ``wall_s`` (per replica, from its start to its index loaded, the model's load
excluded) and ``cpu_s`` (per replica, the same span).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncGenerator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "discovery"))
sys.path.insert(0, str(HERE))
from quality import StaticTools, fill, generate, reference_tools  # noqa: E402  # pyright: ignore[reportMissingImports]

from pml.discovery.embedder import Embedder, load_embedder  # noqa: E402
from pml.discovery.service import DiscoveryService  # noqa: E402
from pml.registry.models import RoutingRules  # noqa: E402
from pml.registry.scope import Scope  # noqa: E402
from pml.registry.service import CapabilityRegistry  # noqa: E402
from pml.storage.database import Database  # noqa: E402
from throwaway_postgres import throwaway_database  # noqa: E402

SCOPE = Scope("local", "default", "bench")


class Counted:
    """An embedder that counts the texts it embeds."""

    def __init__(self, inner: Embedder) -> None:
        self.inner, self.model_id, self.dim, self.count = inner, inner.model_id, inner.dim, 0

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        self.count += len(texts)
        return self.inner.embed(texts)


async def child(url: str, embedder_choice: str, start_at: float) -> dict[str, Any]:
    """One replica's index build (printed as JSON by the child process)."""
    embedder = Counted(load_embedder(embedder_choice))  # type: ignore[arg-type]
    embedder.embed(["warm the model up"])
    embedder.count = 0
    db = await Database.open(url, migrate=False)
    try:
        service = DiscoveryService(
            db, StaticTools(reference_tools()), embedder, routing=RoutingRules()
        )
        await asyncio.sleep(max(0.0, start_at - time.time()))  # every replica at one moment
        cpu, started = time.process_time(), time.perf_counter()
        await service.refresh()
        return {
            "embedded": embedder.count,
            "wall_s": round(time.perf_counter() - started, 2),
            "cpu_s": round(time.process_time() - cpu, 2),
            "items": len(service),
        }
    finally:
        await db.close()


async def prepared(url: str, capabilities: int) -> None:
    db = await Database.open(url)
    try:
        await fill(CapabilityRegistry(db), SCOPE, generate(capabilities))
    finally:
        await db.close()


def start(url: str, count: int, embedder_choice: str) -> list[dict[str, Any]]:
    """``count`` replica processes building their index at the same moment."""
    start_at = time.time() + 4.0  # after every process has loaded its model
    command = [sys.executable, __file__, "--child", url, "--embedder", embedder_choice]
    processes = [
        subprocess.Popen([*command, "--start-at", str(start_at)], stdout=subprocess.PIPE, text=True)
        for _ in range(count)
    ]
    results = []
    for process in processes:
        out, _ = process.communicate(timeout=600)
        if process.returncode != 0:
            raise SystemExit(f"a replica failed with exit code {process.returncode}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


@asynccontextmanager
async def fresh_database(sqlite: bool) -> AsyncGenerator[str]:
    if not sqlite:
        async with throwaway_database() as url:
            yield url
        return
    with tempfile.TemporaryDirectory(prefix="pml-replica-start-") as folder:
        yield f"sqlite:///{Path(folder) / 'pml.db'}"


async def run(options: argparse.Namespace) -> dict[str, Any]:
    async with fresh_database(options.sqlite) as url:
        await prepared(url, options.capabilities)
        together = start(url, options.replicas, options.embedder)
    async with fresh_database(options.sqlite) as url:
        await prepared(url, options.capabilities)
        alone = start(url, 1, options.embedder)[0]
    total = sum(result["embedded"] for result in together)
    return {
        "backend": "sqlite" if options.sqlite else "postgresql",
        "replicas": options.replicas,
        "capabilities": options.capabilities,
        "items": alone["items"],
        "texts": alone["embedded"],
        "alone_s": alone["wall_s"],
        "embedded": [result["embedded"] for result in together],
        "embedded_total": total,
        "embedded_ratio": round(total / max(1, alone["embedded"]), 2),
        "wall_s": [result["wall_s"] for result in together],
        "cpu_s": [result["cpu_s"] for result in together],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="Replicas building their index together")
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--capabilities", type=int, default=1000)
    parser.add_argument("--embedder", default="auto", choices=["auto", "minilm", "hashing"])
    parser.add_argument("--sqlite", action="store_true", help="a SQLite file, not PostgreSQL")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--start-at", type=float, default=0.0, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        print(json.dumps(asyncio.run(child(options.child, options.embedder, options.start_at))))
        return
    if options.replicas < 1 or options.capabilities < 0:
        parser.error("--replicas must be at least 1 and --capabilities at least 0")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    print(json.dumps(asyncio.run(run(options))))


if __name__ == "__main__":
    main()
