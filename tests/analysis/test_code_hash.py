"""Snippet parsing and the normalised code hash (SPEC §4, §6.1)."""

from __future__ import annotations

import ast
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pml.analysis.code_hash import canonical_dump, normalized_code_hash, parse_snippet
from pml.analysis.snippet import analyze_snippet
from pml.errors import CodeSyntaxError, InvalidInput

SNIPPET = """\
entries = await mcp.filesystem.list_directory(path=args["root"])
names = [line for line in entries.splitlines() if line.endswith(".json")]
return {"count": len(names), "first": names[:3]}
"""

REFORMATTED = """\
# list the JSON files
entries = await mcp.filesystem.list_directory( path = args[ 'root' ] )   # upstream call


names = [
    line
    for line in entries.splitlines()
    if (line.endswith('.json'))  # keep JSON only
]
return ({'count': len(names), 'first': names[:3],})
"""

HEX64 = re.compile(r"[0-9a-f]{64}")


def test_parse_snippet_accepts_top_level_await_and_return() -> None:
    module = parse_snippet(SNIPPET)
    assert isinstance(module, ast.Module)
    assert isinstance(module.body[-1], ast.Return)
    assert any(isinstance(node, ast.Await) for node in ast.walk(module))


def test_parse_snippet_accepts_async_for_and_async_with_at_top_level() -> None:
    module = parse_snippet("async with a as b:\n    async for x in b:\n        print(x)\n")
    assert isinstance(module.body[0], ast.AsyncWith)


def test_a_syntax_error_reports_line_and_column() -> None:
    with pytest.raises(CodeSyntaxError) as info:
        parse_snippet("x = 1\ny = (\n")
    err = info.value
    assert err.code == "SYNTAX_ERROR"
    assert err.data == {"line": 2, "column": 5}
    assert err.message == "Syntax error at line 2, column 5: '(' was never closed"


def test_a_null_byte_is_a_syntax_error_at_its_position() -> None:
    with pytest.raises(CodeSyntaxError) as info:
        parse_snippet("x = 1\nab\x00c = 2\n")
    assert info.value.data == {"line": 2, "column": 3}
    assert info.value.message.startswith("Syntax error at line 2, column 3: ")


def test_a_lone_surrogate_is_a_syntax_error_not_a_unicode_error() -> None:
    with pytest.raises(CodeSyntaxError) as info:
        parse_snippet('x = "\ud800"')
    assert info.value.data == {"line": 1, "column": 6}


@pytest.mark.parametrize("code", ["1+" * 10_000 + "1", "-" * 10_000 + "1", "(" * 300 + ")" * 300])
def test_overly_nested_code_is_a_syntax_error(code: str) -> None:
    with pytest.raises(CodeSyntaxError) as info:
        parse_snippet(code)
    assert info.value.message.startswith("Syntax error at line 1, column ")


@pytest.mark.parametrize(
    "code", ["'; DROP TABLE capability_records; --", "def f(:\n  pass", "x = `1`", "return ="]
)
def test_hostile_or_broken_code_is_a_syntax_error(code: str) -> None:
    with pytest.raises(CodeSyntaxError) as info:
        normalized_code_hash(code)
    assert info.value.message.startswith("Syntax error at line ")
    assert set(info.value.data) == {"line", "column"}


@pytest.mark.parametrize("code", [None, 42, b"return 1", ["return 1"]])
def test_non_string_code_is_invalid_input(code: Any) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_snippet(code)
    assert info.value.message == "code must be a string"
    with pytest.raises(InvalidInput):
        normalized_code_hash(code)


def test_the_hash_is_lowercase_sha256_hex() -> None:
    assert HEX64.fullmatch(normalized_code_hash(SNIPPET)) is not None


def test_comments_whitespace_quotes_and_parentheses_do_not_change_the_hash() -> None:
    assert normalized_code_hash(REFORMATTED) == normalized_code_hash(SNIPPET)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("x = 'a'", 'x = "a"'),
        ("x = 'a'", "x = u'a'"),
        ("x = 'ab'", "x = 'a' 'b'"),
        ("x = 1_000", "x = 1000"),
        ("x = 0x10", "x = 16"),
        ("f(a, b)", "f(a, b,)"),
        ("a; b", "a\nb"),
        ("x = (((1)))", "x = 1"),
        ("if x:\n    y()", "if x:\n\n\n        y()  # hi"),
        ("", "# only a comment\n\n"),
        ("x = 1\r\ny = 2", "x = 1\ny = 2"),
    ],
)
def test_spelling_only_differences_give_the_same_hash(a: str, b: str) -> None:
    assert normalized_code_hash(a) == normalized_code_hash(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("x = 1", "y = 1"),
        ("x = 1", "x = 2"),
        ("x = 1", "x = 1.0"),
        ("x = 1", "x = True"),
        ("x = 0.0", "x = -0.0"),
        ("x = 'a'", "x = b'a'"),
        ("x = 'a'", "x = 'A'"),
        ("x = None", "x = 'None'"),
        ("return 1", "return 1\nreturn 1"),
        ("f(a=1)", "f(b=1)"),
        ("f(1, 2)", "f(2, 1)"),
        ("a + b * c", "(a + b) * c"),
        ("x = [1, 2]", "x = (1, 2)"),
        ('"""doc"""\nreturn 1', "return 1"),
    ],
)
def test_names_literals_and_structure_change_the_hash(a: str, b: str) -> None:
    assert normalized_code_hash(a) != normalized_code_hash(b)


def test_a_deep_but_valid_tree_hashes_without_recursion_errors() -> None:
    code = "x = " + "[" * 190 + "]" * 190 + "\n" + "y = " + "f(" * 190 + ")" * 190
    assert HEX64.fullmatch(normalized_code_hash(code)) is not None


def test_the_canonical_dump_has_no_positions() -> None:
    dump = canonical_dump(parse_snippet("x = 1"))
    assert "lineno" not in dump
    assert "col_offset" not in dump
    assert "Name(" in dump
    assert "int:1" in dump


# A small snippet generator: assignments and returns over names and literals.
identifiers = st.sampled_from(["a", "b", "total", "items", "_x", "args"])
literals = st.one_of(
    st.integers(min_value=-(10**6), max_value=10**6),
    st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\\'\"\n\r\x00"), max_size=8),
    st.booleans(),
    st.none(),
)
programs = st.lists(st.tuples(identifiers, literals), min_size=1, max_size=6)


def _render(program: list[tuple[str, object]], style: int) -> str:
    lines: list[str] = []
    for name, value in program:
        literal = repr(value)
        if style == 0:
            lines.append(f"{name} = {literal}")
        elif style == 1:
            if isinstance(value, str):
                literal = '"' + value + '"'
            lines.append(f"{name}   =   ( {literal} )   # set {name}")
            lines.append("")
        else:
            lines.append(f"# comment\n{name}=({literal});")
    lines.append(f"return {program[-1][0]}")
    return "\n".join(lines)


@given(programs, st.sampled_from([1, 2]))
def test_hash_is_invariant_under_reformatting(
    program: list[tuple[str, object]], style: int
) -> None:
    assert normalized_code_hash(_render(program, style)) == normalized_code_hash(
        _render(program, 0)
    )


@given(programs, programs)
def test_different_programs_have_different_hashes(
    first: list[tuple[str, object]], second: list[tuple[str, object]]
) -> None:
    same = [(n, type(v), v) for n, v in first] == [(n, type(v), v) for n, v in second]
    assert (
        normalized_code_hash(_render(first, 0)) == normalized_code_hash(_render(second, 0))
    ) == (same)


@given(st.text(max_size=200))
def test_any_text_either_hashes_or_raises_a_syntax_error(code: str) -> None:
    try:
        compile(code, "<reference>", "exec", flags=ast.PyCF_ONLY_AST)
    except (SyntaxError, ValueError, UnicodeEncodeError):
        with pytest.raises(CodeSyntaxError, match=r"^Syntax error at line \d+, column \d+: "):
            normalized_code_hash(code)
    else:
        assert HEX64.fullmatch(normalized_code_hash(code)) is not None


@pytest.mark.parametrize(
    "code",
    [
        SNIPPET,
        'token = "sk-live-0123456789abcdef0123"\nreturn await mcp.github.get_me(token=token)',
        'x = await mcp.fs.read_text_file(path="/tmp/a.txt")  # note: key=AKIA0123456789ABCDEF\n'
        "return x.count('ERROR')",
        '"""Docstring with password=hunter2hunter2"""\nreturn f"{1 + 2} é ✓"',
        "async def f(a, *, b=2):\n    return [i async for i in a]\nreturn await f(aiter([]), b=3)",
        "return b'\\x00\\xff' + bytes(3)",
    ],
)
def test_the_analysis_hash_is_the_normalized_hash_of_the_code_as_written(code: str) -> None:
    # The analysis hashes the tree it scanned: the scan and the lifting must leave it as parsed.
    assert analyze_snippet(code).code_hash == normalized_code_hash(code)
