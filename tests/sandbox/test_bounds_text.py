"""Cutting text to a byte bound (``pml.sandbox.truncate``) and rewriting a snippet for its
size guards (``pml.sandbox.guards``)."""

from __future__ import annotations

import json
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pml.sandbox.guards import guarded
from pml.sandbox.program import prepare
from pml.sandbox.truncate import bounded_text, fits, utf8_size


@given(st.text(), st.integers(min_value=0, max_value=400))
def test_a_cut_text_is_within_the_bound_and_a_head_of_the_original(
    text: str, max_bytes: int
) -> None:
    cut = bounded_text(text, max_bytes)
    assert utf8_size(cut) <= max_bytes
    if fits(text, max_bytes):
        assert cut == text
    else:
        head = cut.split("…")[0]
        assert text.startswith(head)
        json.loads(json.dumps(cut))  # always JSON


@given(st.text(alphabet=st.characters(blacklist_categories=["Cs"])), st.integers(60, 400))
def test_a_cut_text_without_surrogates_is_valid_utf8(text: str, max_bytes: int) -> None:
    cut = bounded_text(text, max_bytes)
    cut.encode("utf-8")  # strict
    head = cut.split("… [truncated: ")[0]
    if head != text and len(head) < len(text):
        assert unicodedata.combining(text[len(head)]) == 0  # not before a combining mark


def test_the_marker_says_how_many_characters_were_left_out() -> None:
    # Room is kept for the longest marker (4 digits), so the head may be a byte or two short.
    assert bounded_text("a" * 1000, 60) == "a" * 23 + "… [truncated: 977 more characters]"


def test_characters_cut_earlier_are_counted() -> None:
    assert bounded_text("abc", 100, more_chars=7) == "abc… [truncated: 7 more characters]"


def test_a_bound_too_small_for_the_marker_keeps_an_ellipsis() -> None:
    assert bounded_text("abcdef", 5) == "ab…"
    assert bounded_text("abcdef", 2) == ""


def test_a_huge_text_is_measured_without_encoding_it_whole() -> None:
    text = "é" * 10_000_000
    assert not fits(text, 1000)
    assert utf8_size(bounded_text(text, 1000)) <= 1000


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("return x", "return _pml_result((x))"),
        ("return 1, 2", "return _pml_result((1, 2))"),
        ("return (\n  1)", "return (\n  _pml_result((1)))"),  # inside the parentheses
        ("return 'é' + 'ü'", "return _pml_result(('é' + 'ü'))"),
        ("raise E(m) from c", "raise _pml_raised((E(m)), 1) from c"),
        ("assert x, 'm'", "assert x, _pml_message(('m'), 1)"),
        ("def f():\n    return 1", "def f():\n    return 1"),
        ("x = 1; return x", "x = 1; return _pml_result((x))"),
        ("return", "return"),
        ("try:\n    pass\nexcept E:\n    raise", "try:\n    pass\nexcept E:\n    raise"),
    ],
)
def test_returns_raises_and_asserts_are_guarded_in_place(code: str, expected: str) -> None:
    result = guarded(code)
    assert result is not None
    assert result.code == expected
    assert result.code.count("\n") == code.count("\n")  # same lines


def test_columns_map_back_past_inserted_text() -> None:
    result = guarded("x = 1; return x + y")
    assert result is not None
    # "x = 1; return _pml_result((x + y))": column of "y" (1-based) was 19, is now 32
    assert result.code.index("y") + 1 == 32
    assert result.user_column(1, 32) == 19
    assert result.user_column(1, 3) == 3


def test_only_the_guards_a_snippet_needs_are_in_its_prelude() -> None:
    assert "_pml_result" not in prepare("x = 1", max_code_bytes=100).source
    raising = prepare("raise ValueError('x')", max_code_bytes=100).source
    assert "def _pml_raised" in raising
    assert "def _pml_result" not in raising
