"""Measuring discovery: the reference tools, synthetic capabilities and a query set.

    tools = reference_tools()                       # the real servers' tools (snapshot)
    names = await fill(registry, scope, generate(2000))   # synthetic capabilities, named
    report = await evaluate(service, scope, load_queries(path), names)
    report.recall_at_5, report.p95_ms, report.misses
    report.per_kind()      # {"tool": {...}, "capability": {...}}: the same figures per kind

Used by ``benchmarks/discovery.py`` (the development set, and the held-out sets with
``--holdout``) and by the held-out tests. A query names its expected item as
``tool:<server>:<tool>`` or ``capability:<id>`` (an id of the synthetic generator);
``expected_any`` lists equally good answers. A query's kind is that of its answers
(``mixed`` when they are of both kinds).
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import mcp_types

from pml.discovery.service import DiscoveryService
from pml.registry.models import CapabilityDraft
from pml.registry.scope import Scope
from pml.registry.service import CapabilityRegistry
from pml.upstream.base import UpstreamTool

ROOT = Path(__file__).resolve().parents[2]
BENCHMARK_DATA = ROOT / "benchmarks" / "data"
DEV_SET = BENCHMARK_DATA / "discovery_dev.json"
HOLDOUT_SET = Path(__file__).resolve().parent / "data" / "discovery_holdout.json"
# written after the ranking work of issue 20 began, never shown to it: look at it once
HOLDOUT_V2_SET = Path(__file__).resolve().parent / "data" / "discovery_holdout_v2.json"
HOLDOUT_SETS = (HOLDOUT_SET, HOLDOUT_V2_SET)
RANKS = 5  # what an agent gets by default; MRR is MRR@5


def _load_synthetic() -> ModuleType:
    """``benchmarks/data/synthetic_capabilities.py``, loaded from its file: ``benchmarks/``
    is never put on the import path (its sandbox.py and agent.py would hide the test
    packages of those names)."""
    name = "pml_benchmark_synthetic_capabilities"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(
        name, BENCHMARK_DATA / "synthetic_capabilities.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up while being made
    spec.loader.exec_module(module)
    return module


generate: Callable[..., list[dict[str, Any]]] = _load_synthetic().generate

__all__ = ["generate"]


class StaticTools:
    """A fixed tool list where the upstream pool would be."""

    def __init__(self, tools: list[UpstreamTool]) -> None:
        self.tools = tools

    async def list_tools(self) -> list[UpstreamTool]:
        return list(self.tools)


def reference_tools() -> list[UpstreamTool]:
    """The tools of the reference servers, as ``benchmarks/snapshot_reference_tools.py``
    listed them from the real servers."""
    data = json.loads((BENCHMARK_DATA / "reference_tools.json").read_text())
    return [
        UpstreamTool(server, mcp_types.Tool.model_validate(tool))
        for server, tools in data["servers"].items()
        for tool in tools
    ]


@dataclass(frozen=True)
class Query:
    text: str
    expected: frozenset[str]

    @property
    def kind(self) -> str:
        """``tool``, ``capability`` or ``mixed``: the kind of the expected answers."""
        kinds = {key.split(":", 1)[0] for key in self.expected}
        return kinds.pop() if len(kinds) == 1 else "mixed"


def load_queries(path: Path) -> list[Query]:
    queries: list[Query] = []
    for item in json.loads(path.read_text()):
        expected = item.get("expected_any") or [item["expected"]]
        queries.append(Query(item["query"], frozenset(expected)))
    return queries


def capability_ids(queries: list[Query]) -> set[str]:
    """The synthetic capability ids ``queries`` expect."""
    return {
        key.removeprefix("capability:")
        for query in queries
        for key in query.expected
        if key.startswith("capability:")
    }


async def fill(
    registry: CapabilityRegistry, scope: Scope, items: list[dict[str, Any]]
) -> dict[str, str]:
    """Capture ``items`` as named capabilities; display name → generator id."""
    names: dict[str, str] = {}
    for item in items:
        draft = CapabilityDraft(
            code=item["code"],
            intent=item["intent"],
            description=item["description"],
            tools_used=item["tools_used"],
            parameters_schema=item["parameters_schema"],
            name=item["display_name"],
        )
        await registry.capture(scope, draft, latency_ms=5.0)
        names[item["display_name"]] = item["id"]
    return names


@dataclass
class Report:
    n_queries: int = 0
    hits_at_1: int = 0
    hits_at_5: int = 0
    reciprocal_ranks: list[float] = field(default_factory=list[float])
    latencies_ms: list[float] = field(default_factory=list[float])
    misses: list[tuple[str, list[str]]] = field(default_factory=list[tuple[str, list[str]]])
    kinds: dict[str, Report] = field(default_factory=dict[str, "Report"])

    def add(self, rank: int | None, latency_ms: float, query: str, top: list[str]) -> None:
        """Count one query answered at ``rank`` (None: not in the results)."""
        self.n_queries += 1
        self.hits_at_1 += rank == 1
        self.hits_at_5 += rank is not None and rank <= RANKS
        self.reciprocal_ranks.append(1 / rank if rank else 0.0)
        self.latencies_ms.append(latency_ms)
        if rank is None or rank > RANKS:
            self.misses.append((query, top))

    def per_kind(self) -> dict[str, dict[str, float]]:
        """recall@1, recall@5, MRR and latency for each kind of query, with their count."""
        return {
            kind: {"n_queries": part.n_queries, **part.summary()}
            for kind, part in sorted(self.kinds.items())
        }

    @property
    def recall_at_1(self) -> float:
        return self.hits_at_1 / self.n_queries

    @property
    def recall_at_5(self) -> float:
        return self.hits_at_5 / self.n_queries

    @property
    def mrr(self) -> float:
        return sum(self.reciprocal_ranks) / self.n_queries

    def percentile_ms(self, share: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(share * len(ordered)))]

    def summary(self) -> dict[str, float]:
        return {
            "recall_at_1": round(self.recall_at_1, 4),
            "recall_at_5": round(self.recall_at_5, 4),
            "mrr": round(self.mrr, 4),
            "p50_ms": round(statistics.median(self.latencies_ms), 3),
            "p95_ms": round(self.percentile_ms(0.95), 3),
        }


def result_key(result: dict[str, Any], names: dict[str, str]) -> str:
    if result["kind"] == "tool":
        return f"tool:{result['name']}"
    return f"capability:{names.get(result['name'], result.get('fqdn', ''))}"


async def evaluate(
    service: DiscoveryService, scope: Scope, queries: list[Query], names: dict[str, str]
) -> Report:
    """Run every query once (the embedding of each is part of its time)."""
    report = Report()
    for query in queries:
        started = time.perf_counter()
        results = await service.discover(scope, query.text, limit=RANKS)
        latency_ms = (time.perf_counter() - started) * 1000
        keys = [result_key(result, names) for result in results]
        rank = next((i + 1 for i, key in enumerate(keys) if key in query.expected), None)
        report.add(rank, latency_ms, query.text, keys[:3])
        report.kinds.setdefault(query.kind, Report()).add(rank, latency_ms, query.text, keys[:3])
    return report
