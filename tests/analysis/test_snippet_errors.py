"""Snippet analysis errors and hostile input: exact messages, limits, deep trees (SPEC §4)."""

from __future__ import annotations

from typing import Any

import pytest

from pml.analysis.snippet import analyze_snippet
from pml.errors import CodeSyntaxError, CodeTooLarge, InvalidInput

# --- errors ----------------------------------------------------------------------------------


def invalid(code: str) -> InvalidInput:
    with pytest.raises(InvalidInput) as info:
        analyze_snippet(code)
    assert info.value.code == "INVALID_INPUT"
    assert info.value.data["field"] == "code"
    return info.value


def test_code_too_large_has_the_exact_message_and_is_checked_before_parsing() -> None:
    with pytest.raises(CodeTooLarge) as info:
        analyze_snippet("x = (" * 30, max_code_bytes=100)
    assert info.value.code == "CODE_TOO_LARGE"
    assert info.value.message == "Code size exceeds maximum: 150 bytes (max: 100)"
    with pytest.raises(CodeTooLarge) as info:
        analyze_snippet("é" * 6, max_code_bytes=11)
    assert info.value.message == "Code size exceeds maximum: 12 bytes (max: 11)"
    assert analyze_snippet("é" * 6, max_code_bytes=12).calls == ()


def test_100_kb_of_code_at_the_limit_passes_and_one_byte_more_fails() -> None:
    line = 'r = await mcp.fs.read_file(path="/data/f.txt")  # comment\n'
    body = line * (100_000 // len(line))
    code = body + "#" * (100_000 - len(body) - 1) + "\n"
    assert len(code.encode()) == 100_000
    analysis = analyze_snippet(code)
    assert len(analysis.calls) == 100_000 // len(line)
    assert [p.name for p in analysis.parameters] == ["path"]
    with pytest.raises(CodeTooLarge) as info:
        analyze_snippet(code + " ")
    assert info.value.message == "Code size exceeds maximum: 100001 bytes (max: 100000)"


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ('await mcp.a.b("x")', "mcp.a.b takes keyword arguments only (line 1)"),
        (
            '\n\nmcp.fs["get-sum"](1, b=2)',
            'mcp.fs["get-sum"] takes keyword arguments only (line 3)',
        ),
        (
            'mcp["acme.web.x.y.ab12"](*xs)',
            'mcp["acme.web.x.y.ab12"] takes keyword arguments only (line 1)',
        ),
        (
            "x = 1\nmcp[name]()",
            "dynamic names cannot be checked: mcp[...] needs a string literal (line 2)",
        ),
        (
            'mcp["a" + b]()',
            "dynamic names cannot be checked: mcp[...] needs a string literal (line 1)",
        ),
        (
            "mcp.fs[tool](p=1)",
            "dynamic names cannot be checked: mcp.fs[...] needs a string literal (line 1)",
        ),
        (
            "mcp.fs[0]",
            "dynamic names cannot be checked: mcp.fs[...] needs a string literal (line 1)",
        ),
        ("tools = mcp.fs", "mcp.fs must name a tool: mcp.fs.<tool>(...) (line 1)"),
        ("getattr(mcp.fs, 'read')()", "mcp.fs must name a tool: mcp.fs.<tool>(...) (line 1)"),
        ("mcp.fs(path=1)", "mcp.fs must name a tool: mcp.fs.<tool>(...) (line 1)"),
        (
            "m = mcp",
            'mcp can only be used as mcp.<server>.<tool>(...) or mcp["<fqdn>"](...) (line 1)',
        ),
        (
            "print(f'{mcp}')",
            'mcp can only be used as mcp.<server>.<tool>(...) or mcp["<fqdn>"](...) (line 1)',
        ),
    ],
)
def test_calls_that_cannot_be_checked_are_invalid(code: str, message: str) -> None:
    assert invalid(code).message == message


@pytest.mark.parametrize(
    ("code", "line"),
    [
        ("mcp = make_client()", 1),
        ("x = 1\nmcp: object = None", 2),
        ("mcp += 1", 1),
        ("del mcp", 1),
        ("def f(mcp):\n    return mcp.a.b()", 1),
        ("def f(*, mcp=None): pass", 1),
        ("async def f(*mcp): pass", 1),
        ("f = lambda **mcp: 1", 1),
        ("def mcp(): pass", 1),
        ("class mcp: pass", 1),
        ("import os as mcp", 1),
        ("import mcp", 1),
        ("import mcp.server", 1),
        ("from client import mcp", 1),
        ("from client import x as mcp", 1),
        ("for mcp in []: pass", 1),
        ("[1 for mcp in []]", 1),
        ("if (mcp := 1): pass", 1),
        ("with open('f') as mcp: pass", 1),
        ("try:\n    pass\nexcept OSError as mcp:\n    pass", 3),
        ("match x:\n    case [mcp]: pass", 2),
        ("match x:\n    case {'a': 1, **mcp}: pass", 2),
        ("match x:\n    case [*mcp]: pass", 2),
        ("mcp.fs.read = None", 1),
        ("mcp['x.y'] = None", 1),
        ("del mcp.fs", 1),
        ("x = 1\n\ndef f():\n    global mcp\n    mcp = 2", 5),
    ],
)
def test_rebinding_mcp_is_invalid(code: str, line: int) -> None:
    assert invalid(code).message == f"mcp cannot be reassigned or shadowed (line {line})"


def test_the_first_problem_in_source_order_is_reported() -> None:
    error = invalid('x = 1\nmcp.a.b("late")\nmcp.a.b(1)\n\n\n\nmcp = 2\n'.replace("late", "l"))
    assert error.message == "mcp.a.b takes keyword arguments only (line 2)"
    assert error.data == {"field": "code", "line": 2}


# --- hostile input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        "x = " + "(" * 10_000 + ")" * 10_000,
        "x = " + "-" * 10_000 + "1",
        "x = " + "1+" * 10_000 + "1",
    ],
)
def test_ten_thousand_deep_nesting_is_a_syntax_error(code: str) -> None:
    with pytest.raises(CodeSyntaxError) as info:
        analyze_snippet(code)
    assert info.value.code == "SYNTAX_ERROR"


@pytest.mark.parametrize(
    "code",
    [
        "x = " + "not " * 900 + "mcp.a.b(p=1)",
        "x = " + "lambda: " * 900 + "mcp.a.b(p=1)",
        "x = " + "f(" * 180 + "mcp.a.b(p=1)" + ")" * 180,
        "x = " + "a." * 1500 + "b\nmcp.a.b(p=1)",
        "mcp.a.b(p=" + "[" * 95 + "1" + "]" * 95 + ")",
    ],
)
def test_deep_but_valid_trees_are_analysed_without_recursion_errors(code: str) -> None:
    analysis = analyze_snippet(code)
    assert [(c.namespace, c.name) for c in analysis.calls] == [("a", "b")]
    assert [p.name for p in analysis.parameters] == ["p"]


def test_null_bytes_are_a_syntax_error_at_their_position() -> None:
    with pytest.raises(CodeSyntaxError) as info:
        analyze_snippet("mcp.a.b()\nx = 'a\x00b'")
    assert info.value.data == {"line": 2, "column": 7}


@pytest.mark.parametrize("code", [None, 42, b"return 1", ["mcp.a.b()"], {"code": "x"}])
def test_code_that_is_not_a_string_is_invalid_input(code: Any) -> None:
    assert invalid(code).message == "code must be a string"


def test_a_lone_surrogate_is_a_syntax_error() -> None:
    with pytest.raises(CodeSyntaxError):
        analyze_snippet('mcp.a.b(p="\ud800")')
