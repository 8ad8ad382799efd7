"""Ties in the ranking: capabilities lifted over the same tool keep their own order, and
rows whose scores round alike are still ranked by their exact scores, not by key."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from discovery.entries import DIM, ME, axis, capability_entry
from pml.discovery.index import Entry, HybridIndex
from pml.discovery.rerank import lift_over_their_tools

Vector = npt.NDArray[np.float32]


def at_cosine(cosine: float) -> Vector:
    """A unit vector whose cosine with the first axis is ``cosine``."""
    vector = np.zeros(DIM, dtype=np.float32)
    vector[0], vector[1] = cosine, np.sqrt(1.0 - cosine**2)
    return vector


def keys(index: HybridIndex, **options: Any) -> list[str]:
    return [hit.entry.key for hit in index.search(axis(0), [], ME, **options)]


def test_capabilities_lifted_over_one_tool_keep_the_order_of_their_own_scores() -> None:
    index = HybridIndex(DIM)
    read = Entry("tool:filesystem:read", "tool", "t", None, servers=("filesystem",))
    index.put(read, at_cosine(0.5), [])  # calibrated above both capabilities
    # keys in the opposite order of their fit: a tie would put "a-looser" first
    index.put(capability_entry("a-looser", servers=("filesystem",)), at_cosine(0.6), [])
    index.put(capability_entry("b-closer", servers=("filesystem",)), at_cosine(0.7), [])
    assert keys(index, limit=3) == ["b-closer", "a-looser", "tool:filesystem:read"]
    alone = keys(index, kind="capability", limit=2)  # no tools, no lift: the same order
    assert alone == ["b-closer", "a-looser"]


def test_the_lift_keeps_order_stays_within_1_and_lifts_only_what_fits() -> None:
    scores = np.array([0.9, 0.4, 0.5, 0.3, 0.95], dtype=np.float64)
    relevance = np.array([0.6, 0.62, 0.65, 0.2, 0.9], dtype=np.float64)
    prior = np.zeros(5)
    capabilities = [(1, ("fs",)), (2, ("fs",)), (3, ("fs",))]
    lift_over_their_tools(scores, relevance, prior, capabilities, [(0, "fs")])
    assert scores[2] > scores[1] > scores[0]  # both lifted, in their own order
    assert scores[1] - scores[0] < 1e-3  # a hair above the tool, not more
    assert scores[3] == pytest.approx(0.3)  # fits worse than the tool: not lifted
    top = np.array([1.0, 0.99, 0.9], dtype=np.float64)
    lift_over_their_tools(top, np.array([0.99, 1.0, 1.0]), np.zeros(3), [(1, ("fs",))], [(0, "fs")])
    assert top[1] == 1.0  # never past 1


def test_rows_scoring_within_a_rounding_are_ranked_by_their_exact_scores() -> None:
    index = HybridIndex(DIM)
    # 0.7 * cosine differs by ~2e-5: the same score to 4 decimals
    index.put(capability_entry("a-lower"), at_cosine(0.80000), [])
    index.put(capability_entry("b-higher"), at_cosine(0.80003), [])
    hits = index.search(axis(0), [], ME, kind="capability", limit=2)
    assert [hit.entry.key for hit in hits] == ["b-higher", "a-lower"]
    assert hits[0].score == hits[1].score  # what is shown is rounded alike
    index.put(capability_entry("c-equal"), at_cosine(0.80003), [])  # an exact tie: by key
    assert keys(index, kind="capability", limit=3) == ["b-higher", "c-equal", "a-lower"]
