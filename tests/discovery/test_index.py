"""The hybrid index: BM25, visibility masks, kinds, limits, prior, rows that come and go."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pml.discovery.embedder import HashingEmbedder
from pml.discovery.index import Entry, HybridIndex, prior
from pml.discovery.lexical import LexicalIndex
from pml.discovery.text import stem, terms
from pml.registry.scope import Scope

EMBEDDER = HashingEmbedder()
ME = Scope("acme", "web", "erwan")


def vector(text: str) -> np.ndarray:
    return EMBEDDER.embed([text])[0]


def tool(index: HybridIndex, key: str, text: str) -> None:
    index.put(Entry(key, "tool", key, payload=None), vector(text), terms(text))


def capability(
    index: HybridIndex,
    key: str,
    text: str,
    *,
    org: str = "acme",
    project: str = "web",
    visibility: str = "project",
    created_by: str = "erwan",
    usage: int = 0,
    success: int = 0,
) -> None:
    entry = Entry(
        key, "capability", key, None, org, project, visibility, created_by, usage, success
    )
    index.put(entry, vector(text), terms(text))


def keys(index: HybridIndex, query: str, scope: Scope = ME, **options: object) -> list[str]:
    hits = index.search(vector(query), terms(query), scope, **options)  # type: ignore[arg-type]
    return [hit.entry.key for hit in hits]


def test_terms_split_identifiers_and_fold_word_forms() -> None:
    assert terms("readTextFile: Reads the FILES") == ["read", "text", "file", "read", "file"]
    assert terms("git_diff_unstaged list-directories") == [
        "git",
        "diff",
        "unstag",
        "list",
        "directory",
    ]
    assert stem("listing") == stem("listed") == stem("lists") == "list"
    assert terms("") == terms("the of and") == []


def test_bm25_ranks_rarer_and_more_frequent_words_higher() -> None:
    lexical = LexicalIndex()
    lexical.put(0, terms("read file read file"))
    lexical.put(1, terms("write file"))
    lexical.put(2, terms("current time zone"))
    scores = lexical.scores(terms("read a file"), size=3)
    assert scores[0] > scores[1] > scores[2] == 0
    lexical.remove(0)
    assert lexical.scores(terms("read"), size=3).tolist() == [0.0, 0.0, 0.0]
    lexical.put(1, terms("read only"))  # replacing a row's terms
    assert lexical.scores(terms("write"), size=3)[1] == 0
    assert lexical.scores(terms("read"), size=3)[1] > 0


def test_the_best_match_comes_first_and_scores_stay_within_0_and_1() -> None:
    index = HybridIndex(EMBEDDER.dim)
    tool(index, "tool:fs:read_file", "read file: Read the complete contents of a file")
    tool(index, "tool:time:now", "get current time: Get the current time in a timezone")
    tool(index, "tool:git:log", "git log: Show the commit logs")
    hits = index.search(vector("read a file"), terms("read a file"), ME, limit=3)
    assert hits[0].entry.key == "tool:fs:read_file"
    assert all(0.0 <= hit.score <= 1.0 for hit in hits)
    assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)
    assert keys(index, "read a file", limit=1) == ["tool:fs:read_file"]
    assert keys(index, "read a file", min_score=1.01) == []


def test_visibility_follows_the_registry_rules() -> None:
    index = HybridIndex(EMBEDDER.dim)
    text = "export invoices to csv"
    capability(index, "capability:mine", text)
    capability(index, "capability:teammate-private", text, visibility="private", created_by="bob")
    capability(index, "capability:my-private", text, visibility="private")
    capability(index, "capability:other-project", text, project="api")
    capability(index, "capability:org-wide", text, project="api", visibility="org")
    capability(index, "capability:other-org", text, org="globex", project="web")
    capability(index, "capability:public", text, org="globex", visibility="public")
    seen = set(keys(index, text, limit=50))
    assert seen == {
        "capability:mine",
        "capability:my-private",
        "capability:org-wide",
        "capability:public",
    }
    stranger = set(keys(index, text, Scope("initech", "web", "erwan"), limit=50))
    assert stranger == {"capability:public"}


def test_kind_filter_and_tools_are_visible_to_everyone() -> None:
    index = HybridIndex(EMBEDDER.dim)
    tool(index, "tool:fs:read_file", "read a file")
    capability(index, "capability:read", "read a file", org="globex")
    stranger = Scope("initech", "x", "y")
    assert keys(index, "read a file", stranger, kind="tool") == ["tool:fs:read_file"]
    assert keys(index, "read a file", stranger, kind="capability") == []
    assert keys(index, "read a file", Scope("globex", "web", "z"), kind="capability") == [
        "capability:read"
    ]


def test_prior_is_mild_and_prefers_used_successful_capabilities() -> None:
    assert prior(0, 0) == 0.0
    assert 0 < prior(100, 100) <= 0.045
    assert prior(100, 0) < 0 < prior(100, 100)
    index = HybridIndex(EMBEDDER.dim)
    capability(index, "capability:a", "send the weekly report", usage=50, success=50)
    capability(index, "capability:b", "send the weekly report", usage=50, success=5)
    assert keys(index, "send the weekly report", limit=2) == ["capability:a", "capability:b"]
    index.set_stats("capability:b", 500, 500)
    index.set_stats("capability:a", 500, 10)
    assert keys(index, "send the weekly report", limit=2) == ["capability:b", "capability:a"]


def test_rows_are_replaced_removed_reused_and_grow_past_capacity() -> None:
    index = HybridIndex(EMBEDDER.dim, capacity=4)
    for number in range(40):
        tool(index, f"tool:s:t{number}", f"tool number {number} zebra{number}")
    assert len(index) == 40
    assert keys(index, "zebra39", limit=1) == ["tool:s:t39"]
    index.remove("tool:s:t39")
    index.remove("tool:s:missing")  # nothing happens
    assert "tool:s:t39" not in keys(index, "zebra39", limit=40)
    tool(index, "tool:s:new", "a brand new giraffe tool")  # reuses the freed row
    assert keys(index, "giraffe", limit=1) == ["tool:s:new"]
    tool(index, "tool:s:new", "now about penguins")  # replaced: old words are gone
    assert index.search(vector("giraffe"), terms("giraffe"), ME, limit=1)[0].lexical == 0.0
    assert len(index) == 40


def test_bad_vectors_and_incomplete_new_entries_are_refused() -> None:
    index = HybridIndex(EMBEDDER.dim)
    entry = Entry("tool:s:t", "tool", "h", None)
    with pytest.raises(ValueError, match="shape"):
        index.put(entry, np.zeros(3, dtype=np.float32), ["x"])
    with pytest.raises(ValueError, match="needs a vector"):
        index.put(entry, None, ["x"])
    assert index.search(vector("x"), ["x"], ME) == []


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=300), st.integers(min_value=0, max_value=60))
def test_any_query_text_and_limit_search_safely(query: str, limit: int) -> None:
    index = HybridIndex(EMBEDDER.dim)
    tool(index, "tool:fs:read_file", "read a file")
    capability(index, "capability:c", "export invoices")
    hits = index.search(vector(query), terms(query), ME, limit=limit)
    assert len(hits) <= min(limit, 2)
    assert all(0.0 <= hit.score <= 1.0 for hit in hits)
