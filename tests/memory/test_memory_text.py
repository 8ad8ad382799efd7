"""``memory_text``: what a memory write's arguments would store, flattened and bounded."""

from __future__ import annotations

import time
from typing import Any

import pytest

from pml.memory.flatten import MAX_CHARS, MAX_NODES
from pml.memory.sensitivity import classify_text, memory_text


def test_a_memory_servers_create_entities_gives_the_observations_text() -> None:
    arguments = {
        "entities": [
            {
                "name": "card",
                "entityType": "fact",
                "observations": ["my card number is 4111 1111 1111 1111"],
            }
        ]
    }
    text = memory_text(arguments)
    assert text == "card\nfact\nmy card number is 4111 1111 1111 1111"
    assert classify_text(text).level == "high"


def test_add_observations_and_relations_keep_their_order() -> None:
    arguments = {
        "observations": [
            {"entityName": "erwan", "contents": ["prefers metric units", "uses tabs"]},
        ],
        "relations": [{"from": "erwan", "to": "pml", "relationType": "works_on"}],
    }
    assert memory_text(arguments).splitlines() == [
        "erwan",
        "prefers metric units",
        "uses tabs",
        "erwan",
        "pml",
        "works_on",
    ]


def test_keys_that_say_what_a_value_is_are_kept() -> None:
    text = memory_text({"password": "hunter2", "note": "for the router"})
    assert text == "password: hunter2\nfor the router"
    assert classify_text(text).level == "credential"
    assert memory_text({"home_address": {"line": "12 Rue de la Paix"}}) == (
        "home_address:\nline: 12 Rue de la Paix"
    )


def test_numbers_are_text_too_and_booleans_and_null_are_skipped() -> None:
    text = memory_text({"card": 4111111111111111, "ok": True, "gone": None, "ratio": 0.5})
    assert text == "card: 4111111111111111\nratio: 0.5"
    assert classify_text(text).level == "high"


@pytest.mark.parametrize("value", [None, 3, "plain", [], {}, ["a", ["b", ["c"]]]])
def test_any_value_gives_text_without_raising(value: Any) -> None:
    assert isinstance(memory_text(value), str)


def test_values_json_cannot_hold_and_odd_keys_are_handled() -> None:
    arguments: dict[Any, Any] = {
        1: "one",
        ("a", "b"): "tuple key",
        "set": {"x"},
        "bytes": b"my password is hunter2",
        "huge": 10**5000,
        "nan": float("nan"),
        "obj": object(),
    }
    assert memory_text(arguments).splitlines() == ["one", "tuple key", "nan: nan"]


def test_a_deeply_nested_value_never_overflows_the_stack() -> None:
    value: Any = "deep secret"
    for _ in range(100_000):
        value = {"a": [value]}
    started = time.perf_counter()
    text = memory_text(value)
    assert "deep secret" not in text  # beyond MAX_DEPTH: skipped
    assert time.perf_counter() - started < 2.0


def test_a_value_that_contains_itself_is_bounded() -> None:
    loop: list[Any] = ["again"]
    loop.append(loop)
    text = memory_text({"loop": loop})
    assert text.count("again") <= MAX_NODES


def test_huge_values_are_cut_to_the_character_and_node_bounds() -> None:
    many = memory_text({"items": ["fact"] * (MAX_NODES * 3)})
    assert many.count("fact") < MAX_NODES
    big = memory_text({"a": "x" * (MAX_CHARS * 2), "b": "after"})
    assert len(big) <= MAX_CHARS + 1
    assert "after" not in big


def test_a_credential_late_in_many_observations_is_still_seen() -> None:
    observations = [f"fact number {index}" for index in range(5000)]
    observations.append("the api key is sk-live-4f9a8b7c6d5e4f3a2b1c")
    text = memory_text({"observations": observations})
    assert classify_text(text).level == "credential"


def test_a_str_subclass_is_read_as_plain_text() -> None:
    class Loud(str):
        def __str__(self) -> str:
            return "LOUD"

    assert memory_text({"note": Loud("quiet")}) == "quiet"
