"""Discovery's ranking pieces: views (several vectors per row), kind calibration, the
recent-runs prior, and visibility with views."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import mcp_types
import numpy as np
import numpy.typing as npt
import pytest

from discovery.entries import DIM, ME, axis, capability_entry
from pml.discovery.index import Entry, HybridIndex
from pml.discovery.items import capability_item, remembered_intents, render, tool_item
from pml.discovery.ranking import (
    FAILING_PENALTY,
    NO_RUNS,
    TOOL_LIFT,
    calibrate,
    capability_prior,
    reliability_prior,
)
from pml.discovery.views import MAX_VIEWS, RowViews
from pml.registry.reliability import Reliability
from pml.registry.scope import Scope
from pml.storage.discovery_repo import CapabilityRow
from pml.upstream.base import UpstreamTool

Vector = npt.NDArray[np.float32]


def unit(*values: float) -> Vector:
    vector = np.zeros(DIM, dtype=np.float32)
    vector[: len(values)] = values
    return (vector / np.linalg.norm(vector)).astype(np.float32)


def search(index: HybridIndex, query: Vector, scope: Scope = ME, **options: Any) -> list[str]:
    return [hit.entry.key for hit in index.search(query, [], scope, **options)]


# -- views: several vectors per row --------------------------------------------------------


def test_a_row_is_found_by_its_best_vector() -> None:
    index = HybridIndex(DIM)
    index.put(capability_entry("a"), axis(0), [], np.stack([axis(1)]))
    index.put(capability_entry("b"), unit(1, 1, 0), [])  # half way to axis 0 and axis 1
    hits = index.search(axis(1), [], ME, kind="capability")
    assert [hit.entry.key for hit in hits] == ["a", "b"]
    assert hits[0].semantic == pytest.approx(1.0)  # the view's cosine, not the main one's
    assert search(index, axis(0), kind="capability")[0] == "a"  # the main vector still counts


def test_views_are_replaced_kept_or_cleared_and_leave_with_their_row() -> None:
    index = HybridIndex(DIM)
    index.put(capability_entry("a"), axis(0), [], np.stack([axis(1), axis(2)]))
    assert index.views("a") == 2
    index.put(capability_entry("a"), None, None)  # None keeps them
    assert index.views("a") == 2
    index.put(capability_entry("a"), None, None, np.stack([axis(3)]))
    assert index.views("a") == 1
    assert index.search(axis(1), [], ME)[0].semantic == pytest.approx(0.0)
    assert index.search(axis(3), [], ME)[0].semantic == pytest.approx(1.0)
    index.put(capability_entry("a"), None, None, np.zeros((0, DIM), np.float32))
    assert index.views("a") == 0
    index.put(capability_entry("a"), None, None, np.stack([axis(4)]))
    index.remove("a")
    assert index.views("a") == 0
    index.put(capability_entry("c"), axis(0), [])  # reuses the row: none of a's views
    assert index.search(axis(4), [], ME)[0].semantic == pytest.approx(0.0)


def test_views_are_bounded_reuse_slots_and_grow() -> None:
    views = RowViews(DIM, capacity=2)
    views.set(0, np.stack([axis(i % DIM) for i in range(MAX_VIEWS + 5)]))
    assert views.of(0) == MAX_VIEWS
    for row in range(1, 40):
        views.set(row, np.stack([axis(row % DIM)] * 3))
    assert len(views) == MAX_VIEWS + 39 * 3
    for row in range(1, 40):
        views.clear(row)
    views.clear(99)  # nothing to clear: no error
    assert len(views) == MAX_VIEWS
    semantic = np.zeros(1, dtype=np.float32)
    views.raise_to(semantic, axis(2))
    assert semantic[0] == pytest.approx(1.0)


def test_views_of_a_wrong_shape_are_refused() -> None:
    index = HybridIndex(DIM)
    with pytest.raises(ValueError, match="views of shape"):
        index.put(capability_entry("a"), axis(0), [], np.zeros((2, DIM + 1), np.float32))
    with pytest.raises(ValueError, match="views of shape"):
        index.put(capability_entry("a"), axis(0), [], np.zeros(DIM, np.float32))
    with pytest.raises(ValueError, match="views of shape"):
        RowViews(DIM).set(0, np.zeros((1, 3), np.float32))


@pytest.mark.parametrize(
    ("owner", "visibility", "creator"),
    [
        (Scope("globex", "web", "erwan"), "project", "erwan"),  # another org
        (Scope("acme", "other", "erwan"), "project", "erwan"),  # another project
        (Scope("acme", "web", "bob"), "private", "bob"),  # someone else's private one
        (Scope("globex", "web", "x"), "org", "x"),  # another org's org-wide one
    ],
)
def test_a_hidden_capability_is_never_found_through_a_view(
    owner: Scope, visibility: str, creator: str
) -> None:
    index = HybridIndex(DIM)
    hidden = Entry("secret", "capability", "s", None, owner.org, owner.project, visibility, creator)
    index.put(hidden, axis(0), [], np.stack([axis(1)] * MAX_VIEWS))
    index.put(capability_entry("mine"), axis(5), [])
    for kind in ("all", "capability", "tool"):
        found = search(index, axis(1), kind=kind, limit=50)
        assert "secret" not in found
    assert search(index, axis(1), owner, kind="capability", limit=1) == ["secret"]


# -- kind calibration -----------------------------------------------------------------------


def test_calibration_lifts_tools_keeps_their_order_and_the_ends() -> None:
    relevance = np.array([0.0, 0.1, 0.3, 0.6, 1.0, 0.3], dtype=np.float32)
    is_tool = np.array([True, True, True, True, True, False])
    calibrate(relevance, is_tool)
    assert relevance[0] == 0.0
    assert relevance[4] == pytest.approx(1.0)
    assert relevance[2] == pytest.approx(1 - 0.7**TOOL_LIFT)
    assert list(relevance[:5]) == sorted(relevance[:5])  # order among tools kept
    assert relevance[5] == pytest.approx(0.3)  # capabilities untouched
    assert relevance[1] < 0.2  # a weak tool match stays weak


def test_a_tool_beats_a_capability_matching_as_closely_but_not_a_much_closer_one() -> None:
    index = HybridIndex(DIM)
    index.put(Entry("tool:fs:read", "tool", "t", None), unit(1, 1), [])
    index.put(capability_entry("capability:close"), unit(1, 1.05), [])
    assert search(index, axis(0), limit=2)[0] == "tool:fs:read"
    weak = HybridIndex(DIM)
    weak.put(Entry("tool:fs:read", "tool", "t", None), unit(1, 6), [])  # cosine ~0.16
    weak.put(capability_entry("capability:fits"), unit(1, 0.9), [])  # cosine ~0.74
    assert search(weak, axis(0), limit=2)[0] == "capability:fits"


# -- the recent runs -------------------------------------------------------------------------


def runs(successes: int, count: int, latency_ms: float = 10.0) -> Reliability:
    bits = (1 << successes) - 1  # the newest `successes` runs succeeded
    return Reliability.of(bits, count, latency_ms)


def test_recent_runs_only_ever_lower_a_capability() -> None:
    assert reliability_prior(NO_RUNS) == 0.0
    assert reliability_prior(runs(10, 10)) == 0.0
    assert reliability_prior(runs(7, 10)) < 0.0
    assert reliability_prior(runs(10, 10, 5_000)) < reliability_prior(runs(10, 10, 500)) < 0
    assert reliability_prior(runs(10, 10, 10_000)) == reliability_prior(runs(10, 10, 1e9))
    failing = runs(2, 10)
    assert failing.failing
    assert reliability_prior(failing) <= -FAILING_PENALTY
    deprecated = capability_prior(10, 10, NO_RUNS, deprecated=True)
    assert deprecated < capability_prior(10, 10, NO_RUNS, deprecated=False)


def test_discovery_prefers_a_reliable_alternative_to_a_failing_capability() -> None:
    index = HybridIndex(DIM)
    index.put(capability_entry("flaky"), unit(1, 0.30), [])  # fits slightly better
    index.put(capability_entry("steady"), unit(1, 0.35), [])
    assert search(index, axis(0), kind="capability") == ["flaky", "steady"]
    index.set_stats("flaky", 10, 4, runs(2, 10))
    index.set_stats("steady", 10, 10, runs(10, 10))
    assert search(index, axis(0), kind="capability") == ["steady", "flaky"]
    entry = index.get("flaky")
    assert entry is not None
    assert entry.recent.failing
    index.set_stats("flaky", 12, 6, None)  # no recent runs given: the last ones are kept
    entry = index.get("flaky")
    assert entry is not None
    assert entry.recent == runs(2, 10)
    assert entry.usage_count == 12
    index.set_stats("missing", 1, 1, runs(1, 1))  # an unknown key: nothing happens
    index.put(Entry("tool:a:b", "tool", "t", None), axis(0), [])
    before = index.search(axis(0), [], ME, kind="tool")[0].score
    index.set_stats("tool:a:b", 5, 0, runs(0, 5))  # tools have no prior
    assert index.search(axis(0), [], ME, kind="tool")[0].score == before


def row(**fields: Any) -> CapabilityRow:
    base: dict[str, Any] = {
        "fqdn": "acme.web.fs.count.abcd",
        "org": "acme",
        "project": "web",
        "display_name": "fs:count",
        "named": True,
        "namespace": "fs",
        "action": "count",
        "tool_name": "fs__count",
        "intent": "count the lines of a file",
        "description": "Counts lines.",
        "parameters_schema": {"type": "object"},
        "tools_used": ["filesystem:read_text_file"],
        "routing": "local",
        "visibility": "project",
        "created_by": "erwan",
        "usage_count": 10,
        "success_count": 3,
        "updated_at": datetime(2026, 1, 1, tzinfo=UTC),
    }
    return CapabilityRow(**(base | fields))


def test_results_carry_the_reliability_fields() -> None:
    item = capability_item(row(recent_outcomes=0b0000000011, recent_runs=10, recent_latency_ms=42))
    index = HybridIndex(DIM)
    index.put(item.entry, axis(0), [])
    result = render(index.search(axis(0), [], ME)[0], routing="local")
    assert result["recent_runs"] == 10
    assert result["recent_success_rate"] == 0.2
    assert result["recent_latency_ms"] == 42.0
    assert result["failing"] is True
    fresh = render(index.search(axis(0), [], ME)[0], routing="local")
    index.set_stats(item.entry.key, 11, 4, runs(10, 10))
    fresh = render(index.search(axis(0), [], ME)[0], routing="local")
    assert fresh["recent_success_rate"] == 1.0
    assert "failing" not in fresh
    never = capability_item(row())
    index.put(never.entry, axis(0), [])
    plain = render(index.search(axis(0), [], ME)[0], routing="local")
    # no recent run: the reliability fields would say nothing, so they are left out
    assert not {"recent_runs", "recent_success_rate", "recent_latency_ms", "failing"} & set(plain)
    assert (plain["usage_count"], plain["success_rate"]) == (10, 0.3)


# -- what becomes a view -------------------------------------------------------------------


def test_remembered_intents_other_than_the_first_are_views_bounded_and_cut() -> None:
    intents = (
        "Count the lines of a FILE",  # the original intent, differently cased: not again
        "how long is this log",
        "how long is   this LOG",  # the same text again
        "x" * 100_000,  # huge: cut
        "",  # blank: skipped
        "ça compte les lignes 📄 ✓",
        "'; DROP TABLE capability_intents; --",
        *(f"intent number {i}" for i in range(20)),
    )
    item = capability_item(row(intents=intents))
    views = item.views
    assert len(views) == MAX_VIEWS
    assert views[0] == "how long is this log"
    assert len(views[1]) == 500  # cut to what is embedded
    assert "ça compte les lignes 📄 ✓" in views
    assert "'; DROP TABLE capability_intents; --" in views
    assert remembered_intents(row(intents=("count the lines of a file",))) == ()
    assert "how long is this log" in item.index_text  # their words are searchable too


def test_a_tool_is_seen_with_its_server_and_each_sentence() -> None:
    definition = mcp_types.Tool(
        name="edit_file",
        description="Make line-based edits to a text file. Each edit replaces lines. Ok.",
        input_schema={"type": "object"},
    )
    views = tool_item(UpstreamTool("filesystem", definition)).views
    assert views == (
        "edit file (filesystem): Make line-based edits to a text file.",
        "edit file (filesystem): Each edit replaces lines.",
    )
    bare = mcp_types.Tool(name="ping", description=None, input_schema={"type": "object"})
    assert tool_item(UpstreamTool("s", bare)).views == ("ping (s)",)
    many = mcp_types.Tool(
        name="t", description=" ".join(f"Sentence number {i}." for i in range(50)),
        input_schema={"type": "object"},
    )  # fmt: skip
    assert len(tool_item(UpstreamTool("s", many)).views) == MAX_VIEWS


# -- a capability over the tools of the servers it calls -------------------------------------


def test_a_capability_comes_above_a_tool_of_its_server_when_it_fits_as_well() -> None:
    index = HybridIndex(DIM)
    read = Entry("tool:filesystem:read", "tool", "t", None, servers=("filesystem",))
    index.put(read, unit(1, 0.9), [])
    index.put(capability_entry("counts", servers=("filesystem",)), unit(1, 0.8), [])
    index.put(capability_entry("other", servers=("github",)), unit(1, 0.8), [])
    hits = index.search(axis(0), [], ME, limit=3)
    assert [hit.entry.key for hit in hits] == ["counts", "tool:filesystem:read", "other"]
    assert hits[0].score == pytest.approx(hits[1].score, abs=1e-3)
    only = index.search(axis(0), [], ME, kind="capability", limit=3)  # no tools: no lift
    assert only[0].score < hits[0].score


def test_a_capability_that_fits_worse_or_keeps_failing_stays_below_its_tool() -> None:
    index = HybridIndex(DIM)
    read = Entry("tool:filesystem:read", "tool", "t", None, servers=("filesystem",))
    index.put(read, unit(1, 0.5), [])
    index.put(capability_entry("looser", servers=("filesystem",)), unit(1, 0.7), [])
    assert search(index, axis(0), limit=2) == ["tool:filesystem:read", "looser"]
    index.put(capability_entry("closer", servers=("filesystem",)), unit(1, 0.45), [])
    assert search(index, axis(0), limit=3)[0] == "closer"
    index.set_stats("closer", 10, 2, runs(1, 10))  # failing: its malus counts
    assert search(index, axis(0), limit=3)[0] == "tool:filesystem:read"
