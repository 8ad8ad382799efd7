"""Held-out discovery quality (set v2): recall@1 and recall@5 per kind, on a real database.

``data/discovery_holdout_v2.json`` was written apart from the development set the ranking
is tuned on (``benchmarks/data/discovery_dev.json``) and is not to be tuned on: 103 queries
for the reference servers' tools, 100 for the synthetic generator's target capabilities.
Here they run against 500 items (the 53 tools and 447 synthetic capabilities: the 50
targets and their nearest neighbours, the distractors that make it hard) with the shipped
embedding model, as ``pml serve`` ranks them. The full-size figures (10 000 items) come
from ``benchmarks/discovery.py --holdout``.

Each kind must reach the issue's goals (recall@5 >= 0.95, recall@1 >= 0.80) where they are
met; where they are not met yet, the floor is the level measured at this size minus a
margin (the numbers below say which), so a regression fails and an improvement is free to
raise the floor.
"""

from __future__ import annotations

import os

import pytest

from discovery.quality import (
    HOLDOUT_V2_SET,
    Report,
    StaticTools,
    capability_ids,
    evaluate,
    fill,
    generate,
    load_queries,
    reference_tools,
)
from pml.discovery.embedder import HashingEmbedder, load_embedder
from pml.discovery.service import DiscoveryService
from pml.registry.models import RoutingRules
from pml.registry.scope import Scope
from pml.registry.service import CapabilityRegistry
from pml.storage.database import Database

pytestmark = pytest.mark.anyio

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
SCOPE = Scope("local", "default", "holdout")
ITEMS = 500
GOAL_AT_1, GOAL_AT_5 = 0.80, 0.95
MARGIN = 0.05  # another CPU's int8 kernels may move a borderline result or two
# kind: (recall@1, recall@5) measured at ITEMS with minilm-l6-v2/onnx-int8/2 after the
# ranking changes of issue 20 (before them: tools 0.54/0.85, capabilities 0.91/1.0); a floor
# is the goal where the measure meets it, else the measure minus MARGIN. Tools miss both
# goals (floors 0.58 and 0.82); capabilities meet both (floors 0.80 and 0.95).
MEASURED = {
    "tool": (0.6311, 0.8738),
    "capability": (0.89, 0.99),
}


def floor(measured: float, goal: float) -> float:
    return goal if measured >= goal else round(measured - MARGIN, 2)


@pytest.fixture(scope="module")
async def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    embedder = load_embedder("auto")
    if isinstance(embedder, HashingEmbedder):
        if IN_CI:
            pytest.fail("CI needs the shipped embedding model")
        pytest.skip("the embedding model is not installed (pip install of the project brings it)")
    folder = tmp_path_factory.mktemp("holdout")
    db = await Database.open(f"sqlite:///{folder / 'holdout.db'}")
    try:
        tools = reference_tools()
        names = await fill(CapabilityRegistry(db), SCOPE, generate(ITEMS - len(tools)))
        service = DiscoveryService(
            db, StaticTools(tools), embedder, routing=RoutingRules(), query_cache_size=0
        )
        await service.refresh()
        return await evaluate(service, SCOPE, load_queries(HOLDOUT_V2_SET), names)
    finally:
        await db.close()


def test_the_set_covers_every_reference_tool_and_target_capability() -> None:
    queries = load_queries(HOLDOUT_V2_SET)
    kinds = [query.kind for query in queries]
    assert (kinds.count("tool"), kinds.count("capability"), len(kinds)) == (103, 100, 203)
    targets = {item["id"] for item in generate(50)}
    assert capability_ids(queries) == targets
    listed = {f"tool:{tool.server}:{tool.name}" for tool in reference_tools()}
    expected = {key for query in queries for key in query.expected if key.startswith("tool:")}
    assert expected == listed
    assert len({query.text for query in queries}) == len(queries)


@pytest.mark.parametrize("kind", sorted(MEASURED))
async def test_held_out_queries_find_their_answer_per_kind(report: Report, kind: str) -> None:
    figures = report.per_kind()[kind]
    at_1, at_5 = MEASURED[kind]
    misses = report.kinds[kind].misses[:10]
    assert figures["recall_at_5"] >= floor(at_5, GOAL_AT_5), (figures, misses)
    assert figures["recall_at_1"] >= floor(at_1, GOAL_AT_1), figures
