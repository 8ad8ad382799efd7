"""A run's journal holds only what a pause needs (bounded while the run goes on), and
tool-result sizes are counted without building their JSON text."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pml.errors import LimitExceeded
from pml.execution import journal as journal_module
from pml.execution.journal import Journal
from pml.execution.values import MAX_TOOL_ERROR_BYTES, raise_for_error
from pml.sandbox.base import SnippetToolError
from pml.sandbox.jsonvalue import bounded_json_size as result_size

READ = "filesystem:read_file"


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}]}


def test_results_past_the_bound_are_not_kept_while_the_run_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(journal_module, "MAX_JOURNAL_BYTES", 10_000)
    journal = Journal()
    for index in range(190):  # the 190 reads, scaled down
        journal.record(READ, f"d{index}", text("x" * 4000))
    kept = [entry for entry in journal.recorded if "result" in entry]
    assert len(kept) == 2  # 2 × ~4 KB fit in 10 KB, the third does not
    assert journal.overflowed
    assert len(journal.recorded) == 190  # the calls are still counted
    assert journal.kept_bytes <= 10_000
    with pytest.raises(LimitExceeded) as caught:
        journal.to_json()
    assert caught.value.data == {"limit": "journal_bytes"}
    assert "190 completed tool calls" in caught.value.message


def test_a_given_size_is_used_instead_of_measuring_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(journal_module, "MAX_JOURNAL_BYTES", 100)
    journal = Journal()
    journal.record(READ, "a", text("tiny"), size=101)
    assert journal.overflowed
    assert "result" not in journal.recorded[0]


def test_a_journal_under_the_bound_keeps_every_result() -> None:
    journal = Journal()
    for index in range(5):
        journal.record(READ, f"d{index}", text("y" * 100))
    assert not journal.overflowed
    assert [entry["result"] for entry in journal.to_json()] == [text("y" * 100)] * 5


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=30,
)


@given(_JSON)
def test_a_result_size_never_exceeds_its_json_size(value: Any) -> None:
    exact = len(
        json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode(
            "utf-8", "surrogatepass"
        )
    )
    assert result_size(value, 10**9) <= exact


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(alphabet="abcé🙂 "),
        lambda children: st.lists(children) | st.dictionaries(st.text("xyz"), children),
        max_leaves=30,
    )
)
def test_a_result_size_is_exact_without_escapes(value: Any) -> None:
    exact = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
    assert result_size(value, 10**9) == exact


def test_counting_stops_soon_after_the_limit() -> None:
    huge = {"items": ["x" * 100] * 1_000_000}  # ~103 MB of JSON
    assert 1000 < result_size(huge, 1000) < 1_100_000  # the list's commas, a few strings


@pytest.mark.parametrize("piece", ["e", "é", "e\u0301", "🙂", "\ud800"])
def test_an_upstream_error_text_is_cut(piece: str) -> None:
    result = {"isError": True, "content": [{"type": "text", "text": piece * 200_000}]}
    with pytest.raises(SnippetToolError) as caught:
        raise_for_error("fs:read", result)
    message = caught.value.message
    assert len(message.encode("utf-8", "surrogatepass")) <= MAX_TOOL_ERROR_BYTES
    assert message.endswith("more characters]")
    json.dumps(message)


def test_an_error_text_in_structured_content_is_cut_too() -> None:
    result = {"isError": True, "structuredContent": {"error": {"message": "m" * 10**6}}}
    with pytest.raises(SnippetToolError) as caught:
        raise_for_error("fs:read", result)
    assert len(caught.value.message) <= MAX_TOOL_ERROR_BYTES
