"""One analysis per distinct snippet, whatever limit it is checked against: a hand-off
(``[sandbox] max_code_bytes``) and the trace that ends it (the stored code's own size) share
it, and the limit of each call still holds on a cached one."""

from __future__ import annotations

import threading
from typing import Any, cast

import pytest

from pml.analysis.snippet import SnippetAnalysis, analyze_snippet
from pml.errors import CodeTooLarge, InvalidInput
from pml.execution.analysis_cache import AnalysisCache, weight
from pml.execution.answers import cached_analysis

CODE = 'data = await mcp.filesystem.read_text_file(path="/tmp/notes.txt")\nreturn len(data)'


def test_the_hand_off_and_its_trace_share_one_analysis() -> None:
    at_the_hand_off = cached_analysis(CODE, 100_000)
    at_the_trace = cached_analysis(CODE, len(CODE.encode()))
    assert at_the_trace is at_the_hand_off
    assert at_the_trace.code_hash == at_the_hand_off.code_hash
    assert at_the_trace.servers_and_tools() == [("filesystem", "read_text_file")]


def test_a_cached_analysis_still_obeys_each_calls_size_limit() -> None:
    code = CODE + "  # " + "é" * 40
    assert cached_analysis(code, 100_000).code == code
    with pytest.raises(CodeTooLarge) as raised:
        cached_analysis(code, len(code))  # characters, not bytes: the bytes are more
    assert raised.value.message == (
        f"Code size exceeds maximum: {len(code.encode())} bytes (max: {len(code)})"
    )


@pytest.mark.parametrize("code", [None, 42, ["return 1"], b"return 1"])
def test_code_that_is_not_text_is_an_input_error_not_a_crash(code: object) -> None:
    with pytest.raises(InvalidInput, match="code must be a string"):
        cached_analysis(cast("Any", code), 100_000)


def _snippet(number: int, padding: int = 0) -> str:
    pad = f"  # {'x' * padding}" if padding else ""
    return f'data = await mcp.filesystem.read_text_file(path="/tmp/{number}.txt"){pad}\nreturn 1'


def test_a_hand_off_is_still_cached_after_a_thousand_other_snippets() -> None:
    # a busy gateway hands off hundreds of snippets before the first one's trace arrives
    first = cached_analysis(_snippet(-1), 100_000)
    for number in range(1000):
        cached_analysis(_snippet(number), 100_000)
    assert cached_analysis(_snippet(-1), 100_000) is first


def test_the_cache_holds_at_most_its_text_bound_and_drops_the_least_recently_used() -> None:
    cache = AnalysisCache(entries=1000, max_chars=60_000)
    kept = [cache.put(code, analyze_snippet(code)) for code in map(_snippet, range(3))]
    assert cache.get(_snippet(0)) is kept[0]  # used again: the last to go now
    for number in range(3, 40):
        code = _snippet(number, padding=2_000)
        cache.put(code, analyze_snippet(code))
        assert cache.chars <= 60_000
    assert 0 < len(cache) < 40
    assert cache.get(_snippet(39, padding=2_000)) is not None
    assert cache.get(_snippet(1)) is None
    assert cache.get(_snippet(0)) is None
    assert cache.chars == sum(weight(cache.get(c) or _fail()) for c in _held_codes(cache))


def test_an_analysis_heavier_than_an_eighth_of_the_bound_is_returned_not_kept() -> None:
    cache = AnalysisCache(entries=10, max_chars=60_000)
    small = _snippet(1)
    cache.put(small, analyze_snippet(small))
    heavy = _snippet(2, padding=5_000)
    analysis = analyze_snippet(heavy)
    assert cache.put(heavy, analysis) is analysis
    assert cache.get(heavy) is None
    assert cache.get(small) is not None
    assert len(cache) == 1


def test_the_count_bound_holds_and_the_same_code_twice_is_one_entry() -> None:
    cache = AnalysisCache(entries=5, max_chars=1_000_000)
    for number in [*range(8), 7, 7]:
        code = _snippet(number)
        cache.put(code, analyze_snippet(code))
    assert len(cache) == 5
    assert sorted(_held_codes(cache)) == sorted(map(_snippet, range(3, 8)))
    assert cache.chars == sum(weight(analyze_snippet(_snippet(n))) for n in range(3, 8))


def test_threads_putting_and_getting_at_once_keep_the_accounts_right() -> None:
    cache = AnalysisCache(entries=50, max_chars=40_000)
    analyses = [(c, analyze_snippet(c)) for c in (_snippet(n, padding=n * 10) for n in range(80))]

    def churn(offset: int) -> None:
        for round_ in range(300):
            code, analysis = analyses[(offset * 7 + round_) % len(analyses)]
            cache.put(code, analysis)
            cache.get(analyses[round_ % len(analyses)][0])

    threads = [threading.Thread(target=churn, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(cache) <= 50
    assert cache.chars <= 40_000
    assert cache.chars == sum(weight(cache.get(c) or _fail()) for c in _held_codes(cache))


def _held_codes(cache: AnalysisCache) -> list[str]:
    """The codes of ``_snippet`` this module's tests use that ``cache`` holds."""
    paddings = (0, 2_000, *(n * 10 for n in range(80)))
    candidates = dict.fromkeys(_snippet(n, p) for n in range(-1, 80) for p in paddings)
    return [code for code in candidates if code in cache]


def _fail() -> SnippetAnalysis:
    raise AssertionError("an entry went missing")
