"""The journal of completed tool calls: replay order, strict matching, what a resumed run
stores again, malformed stored entries, the size bound, and JSON round trips."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pml.errors import LimitExceeded, PmlError
from pml.execution import journal as journal_module
from pml.execution.journal import MAX_JOURNAL_BYTES, Journal

READ = "filesystem:read_file"
WRITE = "filesystem:write_file"


def entry(tool: str, digest: str, result: Any) -> dict[str, Any]:
    return {"tool": tool, "digest": digest, "result": result}


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}]}


def roundtrip(entries: list[dict[str, Any]]) -> Journal:
    return Journal.resumed(json.loads(json.dumps(entries)))


# --- replay -------------------------------------------------------------------------------


def test_a_new_journal_replays_nothing() -> None:
    journal = Journal()

    assert journal.replay(READ, "d1") is None
    assert journal.to_json() == []


def test_equal_calls_replay_their_results_in_recorded_order() -> None:
    journal = Journal.resumed(
        [
            entry(READ, "d1", text("first")),
            entry(READ, "d1", text("second")),
            entry(READ, "d1", text("third")),
        ]
    )

    assert journal.replay(READ, "d1") == text("first")
    assert journal.replay(READ, "d1") == text("second")
    assert journal.replay(READ, "d1") == text("third")
    assert journal.replay(READ, "d1") is None


def test_replay_never_returns_a_result_recorded_for_another_digest_or_tool() -> None:
    journal = Journal.resumed([entry(READ, "d1", text("a")), entry(WRITE, "d2", text("b"))])

    assert journal.replay(READ, "d2") is None
    assert journal.replay(WRITE, "d1") is None
    assert journal.replay("filesystem:read_file ", "d1") is None
    assert journal.replay("FILESYSTEM:READ_FILE", "d1") is None
    assert journal.replay(READ, "D1") is None
    assert journal.replay(READ, "d1 ") is None
    assert journal.replay(READ, "") is None
    assert journal.replay("", "") is None
    # The misses consumed nothing.
    assert journal.replay(READ, "d1") == text("a")
    assert journal.replay(WRITE, "d2") == text("b")


def test_unicode_digests_and_tools_match_exactly_without_normalisation() -> None:
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    journal = Journal.resumed([entry(f"srv:{composed}", composed, {"ok": composed})])

    assert journal.replay(f"srv:{decomposed}", composed) is None
    assert journal.replay(f"srv:{composed}", decomposed) is None
    assert journal.replay(f"srv:{composed}\u200b", composed) is None
    assert journal.replay(f"srv:{composed}", composed) == {"ok": composed}


def test_calls_of_other_tools_may_be_replayed_out_of_recorded_order() -> None:
    journal = Journal.resumed(
        [entry(READ, "d1", text("r1")), entry(WRITE, "d9", text("w")), entry(READ, "d1", {})]
    )

    assert journal.replay(WRITE, "d9") == text("w")
    assert journal.replay(READ, "d1") == text("r1")
    assert journal.replay(READ, "d1") == {}
    assert journal.replay(WRITE, "d9") is None


def test_a_call_with_changed_arguments_is_not_replayed_but_later_equal_ones_are() -> None:
    journal = Journal.resumed([entry(READ, "old", text("old")), entry(READ, "same", text("s"))])

    assert journal.replay(READ, "new") is None
    journal.record(READ, "new", text("fresh"))
    assert journal.replay(READ, "same") == text("s")

    assert journal.to_json() == [entry(READ, "new", text("fresh")), entry(READ, "same", text("s"))]


# --- what a resumed run stores again ------------------------------------------------------


def test_to_json_after_a_resume_holds_replayed_and_new_calls_in_call_order() -> None:
    journal = Journal.resumed(
        [entry(READ, "a", text("A")), entry(READ, "b", text("B")), entry(WRITE, "c", text("C"))]
    )

    assert journal.replay(READ, "a") == text("A")
    journal.record("time:now", "t", {"now": "2030"})
    assert journal.replay(READ, "b") == text("B")
    assert journal.replay(WRITE, "c") == text("C")
    journal.record(WRITE, "d", text("D"))

    assert journal.to_json() == [
        entry(READ, "a", text("A")),
        entry("time:now", "t", {"now": "2030"}),
        entry(READ, "b", text("B")),
        entry(WRITE, "c", text("C")),
        entry(WRITE, "d", text("D")),
    ]


def test_entries_the_resumed_run_never_made_are_not_stored_again() -> None:
    journal = Journal.resumed([entry(READ, "a", text("A")), entry(READ, "gone", text("G"))])

    journal.replay(READ, "a")

    assert journal.to_json() == [entry(READ, "a", text("A"))]


def test_a_second_pause_and_resume_replays_everything_from_both_runs() -> None:
    first = Journal()
    first.record(READ, "a", text("A"))
    second = roundtrip(first.to_json())
    assert second.replay(READ, "a") == text("A")
    second.record(WRITE, "b", text("B"))

    third = roundtrip(second.to_json())

    assert third.replay(READ, "a") == text("A")
    assert third.replay(WRITE, "b") == text("B")
    assert third.replay(WRITE, "b") is None


def test_to_json_returns_a_copy_of_the_list() -> None:
    journal = Journal()
    journal.record(READ, "a", text("A"))

    stored = journal.to_json()
    stored.append(entry(WRITE, "x", {}))
    stored.clear()

    assert journal.to_json() == [entry(READ, "a", text("A"))]


# --- malformed stored entries -------------------------------------------------------------


@pytest.mark.parametrize(
    "stored",
    [None, "", "[]", 0, 3.5, True, {}, {"tool": READ, "digest": "a", "result": {}}, b"[]"],
)
def test_a_stored_journal_that_is_not_a_list_replays_nothing(stored: object) -> None:
    journal = Journal.resumed(stored)

    assert journal.replay(READ, "a") is None
    assert journal.to_json() == []


def test_a_tuple_of_entries_is_not_a_stored_journal() -> None:
    journal = Journal.resumed((entry(READ, "a", {"x": 1}),))

    assert journal.replay(READ, "a") is None


def test_malformed_entries_are_dropped_and_the_good_ones_kept_in_order() -> None:
    good_first = entry(READ, "a", text("1"))
    good_second = entry(READ, "a", text("2"))
    journal = Journal.resumed(
        [
            None,
            "filesystem:read_file",
            ["filesystem:read_file", "a", {}],
            42,
            good_first,
            {"digest": "a", "result": text("no tool")},
            {"tool": READ, "result": text("no digest")},
            {"tool": None, "digest": "a", "result": text("null tool")},
            {"tool": READ, "digest": None, "result": text("null digest")},
            {"tool": 7, "digest": "a", "result": text("int tool")},
            {"tool": READ, "digest": 7, "result": text("int digest")},
            {"tool": [READ], "digest": "a", "result": text("list tool")},
            {"tool": READ, "digest": ["a"], "result": text("list digest")},
            {"tool": READ.encode(), "digest": "a", "result": text("bytes tool")},
            {},
            good_second,
        ]
    )

    assert journal.replay(READ, "a") == text("1")
    assert journal.replay(READ, "a") == text("2")
    assert journal.replay(READ, "a") is None
    assert journal.to_json() == [good_first, good_second]


@pytest.mark.parametrize("result", [None, "text", ["a", "b"], 0, 1.5, True, "{}", b"{}"])
def test_a_result_that_is_not_an_object_replays_as_an_empty_one(result: object) -> None:
    journal = Journal.resumed([entry(READ, "a", result)])

    assert journal.replay(READ, "a") == {}


def test_a_missing_result_replays_as_an_empty_one() -> None:
    journal = Journal.resumed([{"tool": READ, "digest": "a"}])

    assert journal.replay(READ, "a") == {}
    assert journal.replay(READ, "a") is None


# --- the size bound -----------------------------------------------------------------------


def test_the_bound_is_sixteen_megabytes() -> None:
    assert MAX_JOURNAL_BYTES == 16 * 1024 * 1024


def test_results_past_the_real_bound_cannot_be_stored() -> None:
    journal = Journal()
    chunk = "x" * 1_000_000  # 16 of these fit in 16 MiB, 17 do not
    for index in range(16):
        journal.record(READ, f"d{index}", text(chunk))
    assert len(journal.to_json()) == 16

    journal.record(READ, "one-more", text(chunk))
    with pytest.raises(LimitExceeded) as caught:
        journal.to_json()

    error = caught.value
    assert isinstance(error, PmlError)
    assert error.code == "LIMIT_EXCEEDED"
    assert error.data["limit"] == "journal_bytes"
    assert "17 completed tool calls" in error.message
    assert "16 MB" in error.message


def test_the_size_bound_is_inclusive(monkeypatch: pytest.MonkeyPatch) -> None:
    result = text("é" * 100 + "🌍" * 10)
    size = len(json.dumps(result))
    journal = Journal()
    journal.record(READ, "a", result)

    monkeypatch.setattr(journal_module, "MAX_JOURNAL_BYTES", size)
    assert journal.to_json() == [entry(READ, "a", result)]

    monkeypatch.setattr(journal_module, "MAX_JOURNAL_BYTES", size - 1)
    with pytest.raises(LimitExceeded) as caught:
        journal.to_json()
    assert caught.value.data["limit"] == "journal_bytes"
    assert "1 completed tool calls" in caught.value.message


def test_the_size_counts_every_kept_result(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal_module, "MAX_JOURNAL_BYTES", 10_000)
    journal = Journal()
    for index in range(3):
        journal.record(READ, f"d{index}", text("y" * 3000))
    assert len(journal.to_json()) == 3

    journal.record(READ, "d3", text("y" * 3000))

    with pytest.raises(LimitExceeded):
        journal.to_json()


def test_replayed_results_count_towards_the_bound_and_unreplayed_ones_do_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(journal_module, "MAX_JOURNAL_BYTES", 5000)
    big = text("z" * 4000)
    journal = Journal.resumed([entry(READ, "a", big), entry(READ, "b", big)])
    assert journal.to_json() == []  # nothing replayed yet: nothing to keep

    assert journal.replay(READ, "a") == big
    assert len(journal.to_json()) == 1
    assert journal.replay(READ, "b") == big

    with pytest.raises(LimitExceeded):
        journal.to_json()


def test_a_result_that_is_not_json_is_still_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal_module, "MAX_JOURNAL_BYTES", 1000)
    journal = Journal()
    journal.record(READ, "a", {"blob": b"\x00" * 2000, "set": {1, 2}})

    with pytest.raises(LimitExceeded):
        journal.to_json()


# --- JSON round trips ---------------------------------------------------------------------


def test_a_json_round_trip_preserves_replay_behaviour() -> None:
    journal = Journal()
    journal.record(READ, "d1", text("one"))
    journal.record(WRITE, "d2", {"isError": False, "structuredContent": {"n": [1, 2.5, None]}})
    journal.record(READ, "d1", text("two"))

    resumed = roundtrip(journal.to_json())

    assert resumed.replay(READ, "d2") is None
    assert resumed.replay(READ, "d1") == text("one")
    assert resumed.replay(WRITE, "d2") == {
        "isError": False,
        "structuredContent": {"n": [1, 2.5, None]},
    }
    assert resumed.replay(READ, "d1") == text("two")
    assert resumed.replay(READ, "d1") is None
    assert resumed.to_json() == journal.to_json()


@pytest.mark.parametrize(
    "value",
    [
        "héllo wörld",
        "🌍🚀 " * 50,
        "\u202eevil\u202c right-to-left",
        "zero\u200bwidth",
        "'; DROP TABLE workflow_state; --",
        "line\nbreak\ttab\x00nul",
        "日本語のテキスト",
    ],
)
def test_unicode_results_survive_a_round_trip(value: str) -> None:
    journal = Journal()
    journal.record(f"srv:{value}", value, {"text": value, value: [value]})

    resumed = roundtrip(journal.to_json())

    assert resumed.replay(f"srv:{value}", value) == {"text": value, value: [value]}
    assert resumed.replay(f"srv:{value}", value) is None


def test_a_round_trip_with_ensure_ascii_off_is_equivalent() -> None:
    journal = Journal()
    journal.record(READ, "ü", text("🌍"))

    resumed = Journal.resumed(json.loads(json.dumps(journal.to_json(), ensure_ascii=False)))

    assert resumed.replay(READ, "ü") == text("🌍")
