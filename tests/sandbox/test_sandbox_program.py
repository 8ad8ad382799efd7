"""Host-side pieces of the sandbox: preparing a snippet's source, checking JSON values."""

from __future__ import annotations

from typing import Any

import pytest

from pml.errors import CodeSyntaxError, CodeTooLarge, ExecutionFailed
from pml.sandbox.jsonvalue import MAX_JSON_DEPTH, NotJsonError, json_size, json_value
from pml.sandbox.program import prepare


def test_a_snippet_without_mcp_gets_no_prelude() -> None:
    # Without ``return``/``raise``/``assert`` there is no size guard either (test_bounds_*).
    program = prepare("x = 1\ny = [x]", max_code_bytes=1000)
    assert program.offset == 0
    assert program.source == "x = 1\ny = [x]\nreturn None\n"
    assert (program.user_line(1), program.user_line(2), program.user_line(3)) == (1, 2, None)


def test_mcp_gets_a_method_per_attribute_name_of_the_snippet() -> None:
    code = "r = await mcp.fs.read_file(path=p)\nreturn r.__class__ if r._pml_x else r.strip()"
    program = prepare(code, max_code_bytes=1000)
    prelude = program.source.splitlines()[: program.offset]
    methods = sorted(line.split("(")[0].split()[-1] for line in prelude if "(self, *args" in line)
    assert methods == ["__call__", "fs", "read_file", "strip"]  # __call__: of _PmlTool
    assert "mcp = _PmlMcp(('fs', 'read_file', 'strip'))" in prelude
    assert program.source.splitlines()[program.offset] == code.splitlines()[0]
    assert program.user_line(program.offset + 2) == 2


def test_tool_error_and_shadowed_builtins_only_when_named() -> None:
    assert "ToolError" not in prepare("return 1", max_code_bytes=1000).source
    source = prepare("try:\n    eval('1')\nexcept ToolError:\n    pass", max_code_bytes=1000).source
    assert "import Incomplete as ToolError" in source
    assert "def eval(" in source
    assert "def exec(" not in source


def test_windows_and_old_mac_newlines_count_as_lines() -> None:
    program = prepare("a = 1\r\nb = 2\rc = a + b", max_code_bytes=1000)
    assert program.source == "a = 1\nb = 2\nc = a + b\nreturn None\n"
    assert program.user_lines == 3


def test_code_size_is_checked_in_utf8_bytes() -> None:
    prepare("return 'é'", max_code_bytes=11)
    with pytest.raises(CodeTooLarge, match=r"^Code size exceeds maximum: 11 bytes \(max: 10\)$"):
        prepare("return 'é'", max_code_bytes=10)


def test_syntax_errors_are_found_on_the_host() -> None:
    with pytest.raises(CodeSyntaxError) as caught:
        prepare("x = 1\nif x\n    pass", max_code_bytes=1000)
    assert caught.value.data == {"line": 2, "column": 5}


@pytest.mark.parametrize(
    ("code", "line"),
    [
        ("import os", 1),
        ("import json, os.path", 1),
        ("from os import path", 1),
        ("from subprocess import run", 1),
        ("x = 1\ndef f():\n    import sys\n    return sys", 3),
        ("import importlib.util", 1),
    ],
)
def test_imports_that_reach_the_host_are_refused(code: str, line: int) -> None:
    with pytest.raises(ExecutionFailed) as caught:
        prepare(code, max_code_bytes=1000)
    assert caught.value.data == {"exception_type": "ModuleNotFoundError", "line": line}
    assert "is not available in snippets" in caught.value.message


@pytest.mark.parametrize("code", ["import json", "from collections import Counter", "import re"])
def test_ordinary_imports_are_left_to_the_sandbox(code: str) -> None:
    assert code in prepare(code, max_code_bytes=1000).source


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("s", "s"),
        ((1, (2, [3])), [1, [2, [3]]]),
        ({"a": {"b": (True, 1.5)}}, {"a": {"b": [True, 1.5]}}),
    ],
)
def test_json_values_are_normalised(value: Any, expected: Any) -> None:
    assert json_value(value, "result") == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({1, 2}, "result is a set"),
        (b"x", "result is bytes"),
        ({"a": [0, float("nan")]}, "result['a'][1] is a non-finite float (nan)"),
        ({1: "a"}, "result has a key that is not a string: an int 1"),
        (object(), "result is an object"),
        (10**5000, "result is an integer too large for JSON"),
    ],
    ids=["set", "bytes", "nan", "int-key", "object", "huge-int"],
)
def test_values_that_are_not_json_say_where(value: Any, message: str) -> None:
    with pytest.raises(NotJsonError) as caught:
        json_value(value, "result")
    assert str(caught.value) == message


def test_deep_values_are_refused_not_walked_forever() -> None:
    value: Any = []
    for _ in range(MAX_JSON_DEPTH + 5):
        value = [value]
    with pytest.raises(NotJsonError, match="nested more than"):
        json_value(value, "result")
    shallow: Any = []
    for _ in range(MAX_JSON_DEPTH - 1):
        shallow = [shallow]
    assert json_value(shallow, "result") == shallow


def test_json_size_is_compact_utf8() -> None:
    assert json_size({"a": [1, 2], "b": "é"}) == len('{"a":[1,2],"b":"é"}'.encode())
