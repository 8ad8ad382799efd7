"""One analysis per distinct snippet, whatever limit it is checked against: a hand-off
(``[sandbox] max_code_bytes``) and the trace that ends it (the stored code's own size) share
it, and the limit of each call still holds on a cached one."""

from __future__ import annotations

from typing import Any, cast

import pytest

from pml.errors import CodeTooLarge, InvalidInput
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
