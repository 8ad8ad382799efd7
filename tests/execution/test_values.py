"""What a snippet sees of a tool result, argument defaults and validation."""

from __future__ import annotations

from typing import Any

import pytest

from pml.errors import InvalidArgs
from pml.execution.values import (
    args_digest,
    check_args,
    merged_args,
    raise_for_error,
    snippet_value,
)
from pml.sandbox.base import SnippetToolError

IMAGE = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}


@pytest.mark.parametrize(
    ("result", "seen"),
    [
        ({"structuredContent": {"n": 1}, "content": [{"type": "text", "text": "x"}]}, {"n": 1}),
        ({"content": [{"type": "text", "text": '{"n": [1, 2]}'}]}, {"n": [1, 2]}),
        ({"content": [{"type": "text", "text": "42"}]}, 42),
        ({"content": [{"type": "text", "text": "plain words"}]}, "plain words"),
        ({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}, "a\nb"),
        ({"content": [{"type": "text", "text": "héllo 🙂"}]}, "héllo 🙂"),
        ({"content": [IMAGE]}, [IMAGE]),
        (
            {"content": [{"type": "text", "text": "t"}, IMAGE]},
            [{"type": "text", "text": "t"}, IMAGE],
        ),
        ({"content": []}, []),
        ({}, []),
        ({"content": "not a list"}, []),
        ({"structuredContent": None, "content": [{"type": "text", "text": "null"}]}, None),
    ],
)
def test_the_value_a_snippet_sees(result: dict[str, Any], seen: Any) -> None:
    assert snippet_value(result) == seen


def test_an_error_result_raises_the_tool_s_message() -> None:
    with pytest.raises(SnippetToolError) as raised:
        raise_for_error("fs:read", {"isError": True, "content": [{"type": "text", "text": "no"}]})
    assert (raised.value.tool, raised.value.message) == ("fs:read", "no")
    structured = {"isError": True, "structuredContent": {"error": {"message": "denied"}}}
    with pytest.raises(SnippetToolError, match="denied"):
        raise_for_error("x:y", structured)
    with pytest.raises(SnippetToolError, match="reported an error"):
        raise_for_error("x:y", {"isError": True})
    raise_for_error("x:y", {"isError": False, "content": []})  # not an error: no raise


def test_given_args_win_over_schema_defaults() -> None:
    schema = {"properties": {"a": {"default": 1}, "b": {"default": [1]}, "c": {"type": "string"}}}
    assert merged_args(schema, {"a": 5}) == {"a": 5, "b": [1]}
    assert merged_args({"properties": "broken"}, None) == {}


def test_args_failing_the_schema_are_all_listed() -> None:
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}, "s": {"type": "string"}},
        "required": ["n", "s"],
    }
    with pytest.raises(InvalidArgs) as raised:
        check_args(schema, {"n": "x"}, capability="math:add")
    message = raised.value.message
    assert message.startswith("Invalid arguments for math:add: ")
    assert "'s' is a required property" in message
    assert "n: 'x' is not of type 'integer'" in message
    check_args(schema, {"n": 1, "s": "ok"}, capability="math:add")  # valid: no raise
    check_args({"type": "no-such-type"}, {}, capability="odd")  # a broken schema: no check


def test_args_digests_are_stable_and_reveal_nothing() -> None:
    first = args_digest({"b": 1, "a": "s3cret"})
    assert first == args_digest({"a": "s3cret", "b": 1})
    assert first != args_digest({"a": "other", "b": 1})
    assert "s3cret" not in first
    assert len(first) == 16
