"""``pml.wire_json``: one nesting limit, checked without recursion, however hostile the text."""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any

import pytest

from pml.wire_json import (
    MAX_JSON_DEPTH,
    TooDeep,
    check_value,
    loads,
    outline,
    text_too_deep,
    value_too_deep,
)

DEPTHS = [10, 127, 128, 129, 900, 1_000, 10_000, 100_000]


def nested_text(depth: int, kind: str = "list") -> str:
    """JSON text nested ``depth`` levels: arrays, objects, or both in turn."""
    opens = []
    closes = []
    for level in range(depth):
        as_list = kind == "list" or (kind == "mixed" and level % 2 == 0)
        opens.append("[" if as_list else '{"k":')
        closes.append("]" if as_list else "}")
    return "".join(opens) + "0" + "".join(reversed(closes))


def nested_value(depth: int) -> Any:
    value: Any = 0
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


@pytest.mark.parametrize("kind", ["list", "dict", "mixed"])
@pytest.mark.parametrize("depth", DEPTHS)
def test_text_is_too_deep_exactly_past_the_limit(depth: int, kind: str) -> None:
    text = nested_text(depth, kind)

    assert text_too_deep(text) is (depth > MAX_JSON_DEPTH)
    assert text_too_deep(text.encode()) is (depth > MAX_JSON_DEPTH)


@pytest.mark.parametrize("depth", DEPTHS)
def test_loads_refuses_deep_text_with_a_value_error_never_a_recursion_error(depth: int) -> None:
    text = nested_text(depth, "mixed")
    if depth <= MAX_JSON_DEPTH:
        assert loads(text) == json.loads(text)
        return
    with pytest.raises(TooDeep, match=f"nested more than {MAX_JSON_DEPTH} levels") as raised:
        loads(text)
    assert isinstance(raised.value, ValueError)


def test_a_line_of_opening_brackets_only_is_too_deep_and_cheap() -> None:
    assert text_too_deep(b"[" * 1_000_000)
    assert text_too_deep("{" * 1_000_000)
    assert text_too_deep('{"a":' * 1_000_000)


@pytest.mark.parametrize(
    "text",
    [
        '["' + "[" * 5_000 + '"]',  # brackets inside a string do not count
        '{"k": "' + "{" * 5_000 + '"}',
        '["\\"' + "[" * 5_000 + '"]',  # an escaped quote does not end the string
        '["\\\\\\"' + "[" * 5_000 + '"]',  # an escaped backslash then an escaped quote
        '["\\u005b' + "[" * 5_000 + '"]',  # a unicode escape
        '["日本語 🙂 ' + "[" * 5_000 + '"]',
        "[" + ",".join(["[]"] * 100_000) + "]",  # a huge flat array is not deep
        "[" + ",".join(['{"a": [1, {"b": null}]}'] * 50_000) + "]",
        "[" + ",".join(['"]]]]"'] * 10_000) + "]",  # closing brackets in strings
        '"' + "[" * 1_000 + "",  # an unterminated string: a parser never nests inside it
        "x" + "[" * 1_000,  # not JSON from the first byte: nothing nests
        '"a" ' + "[" * 1_000,  # a string first, then text no parser reads
        "12 " + "{" * 1_000,
    ],
)
def test_brackets_inside_strings_and_wide_values_are_not_depth(text: str) -> None:
    assert not text_too_deep(text)


@pytest.mark.parametrize(
    "text",
    [
        '["\\\\", ' + "[" * 200,  # an escaped backslash ends the string: brackets count
        '["\\"", ' + "[" * 200,
        "[" * 200 + '"\\"' * 1_000,  # deep before an unterminated string
        "[" * 129 + "]" * 200,  # unbalanced: more closing than opening
        "[" * 129 + "}" * 129,  # mismatched pairs still nest as deep
        " \n\t" + "{" * 129,  # whitespace first
    ],
)
def test_brackets_outside_strings_count_even_in_malformed_text(text: str) -> None:
    assert text_too_deep(text)


def test_closing_brackets_hidden_in_strings_do_not_lower_the_depth() -> None:
    text = "[" * 100 + '"' + "]" * 100 + '",' + "[" * 100 + "]" * 200
    assert text_too_deep(text)


def test_a_deep_tooth_among_many_shallow_ones_is_found() -> None:
    shallow = ",".join(["[[[[]]]]"] * 20_000)
    text = "[" + shallow + "," + nested_text(MAX_JSON_DEPTH) + "]"
    assert text_too_deep(text)
    assert not text_too_deep("[" + shallow + "," + nested_text(MAX_JSON_DEPTH - 1) + "]")


def test_loads_keeps_json_errors_and_bad_bytes_as_value_errors() -> None:
    for bad in (b"", b"{", b'{"a": }', b"\xff\xfe", b"nan", "[1, 2"):
        with pytest.raises(ValueError, match=r"Expecting|decode|char"):
            loads(bad)


def test_loads_is_a_value_error_even_when_the_caller_is_deep_in_its_stack() -> None:
    text = nested_text(MAX_JSON_DEPTH)  # within the limit, but the stack is nearly full

    def at_depth(remaining: int) -> object:
        if remaining:
            return at_depth(remaining - 1)
        return loads(text)

    with contextlib.suppress(TooDeep):  # refused as input, never a crash
        at_depth(sys.getrecursionlimit() - 60)


@pytest.mark.parametrize("depth", [1, 64, 128, 129, 1_000, 100_000])
def test_values_are_measured_without_recursion(depth: int) -> None:
    value = nested_value(depth)

    assert value_too_deep(value) is (depth > MAX_JSON_DEPTH)
    if depth > MAX_JSON_DEPTH:
        with pytest.raises(TooDeep, match="the tool result is nested"):
            check_value(value, "the tool result")


def test_scalars_and_wide_values_are_not_deep() -> None:
    assert not value_too_deep(None)
    assert not value_too_deep("[" * 10_000)
    assert not value_too_deep(list(range(100_000)))
    assert not value_too_deep({str(i): {"a": [i]} for i in range(50_000)})
    assert not value_too_deep((1, (2, (3,))), limit=3)
    assert value_too_deep((1, (2, (3, ()))), limit=3)


def test_a_value_that_contains_itself_is_too_deep_not_an_endless_walk() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    mapping: dict[str, Any] = {}
    mapping["self"] = mapping

    assert value_too_deep(cycle)
    assert value_too_deep(mapping)


def test_outline_keeps_the_envelope_of_a_message_too_deep_to_parse() -> None:
    line = '{"jsonrpc":"2.0","result":{"v":' + nested_text(100_000, "mixed") + '},"id":7}'

    assert outline(line, keep=1) == {"jsonrpc": "2.0", "result": None, "id": 7}
    assert outline(line, keep=2) == {"jsonrpc": "2.0", "result": {"v": None}, "id": 7}
    assert outline('{"id": "x", "s": "[[[{"}', keep=1) == {"id": "x", "s": "[[[{"}


@pytest.mark.parametrize("bad", ["[" * 1_000, '{"id": 1, "r": [', "]]]", '{"a": [}'])
def test_outline_of_text_that_is_not_json_is_a_value_error(bad: str) -> None:
    with pytest.raises(ValueError, match=r"Expecting|ends inside|Extra data"):
        outline(bad, keep=1)
