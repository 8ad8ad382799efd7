"""The text copy of a tool answer is the same JSON as ``structuredContent``, compact (the
model reads it: no spaces after separators), unicode kept as written."""

from __future__ import annotations

import json
from typing import Any

import mcp_types
import pytest

from pml.errors import NotFound
from pml.gateway.results import capability_result, error_result, json_result


def _text(result: mcp_types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, mcp_types.TextContent)
    return block.text


@pytest.mark.parametrize(
    "data",
    [
        {"items": [{"name": "fs:read", "score": 0.5}], "total": 1},
        {"intent": "lire « été » 📄", "nested": {"a": [1, 2, {"b": None}]}},
        {"quote": 'say "hi", then: leave', "empty": {}},
    ],
)
def test_answers_are_compact_json_equal_to_the_structured_copy(data: dict[str, Any]) -> None:
    result = json_result(data)
    text = _text(result)
    assert json.loads(text) == result.structured_content == data
    assert text == json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    assert "\\u" not in text  # unicode as written, not escaped


def test_an_error_answer_is_compact_too() -> None:
    text = _text(error_result(NotFound("Capability not found: x")))
    assert json.loads(text)["error"]["code"] == "NOT_FOUND"
    assert '", "' not in text
    assert '": ' not in text


def test_a_capability_runs_value_is_compact_and_a_string_stays_as_it_is() -> None:
    value = {"count": 3, "names": ["a", "b"]}
    assert _text(capability_result({"result": value})) == '{"count":3,"names":["a","b"]}'
    assert _text(capability_result({"result": "plain, text: kept"})) == "plain, text: kept"
