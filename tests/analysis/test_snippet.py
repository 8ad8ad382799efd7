"""Snippet analysis: call sites, parameters from args, lifted literals and secrets (SPEC §4, §6)."""

from __future__ import annotations

from typing import Any

import pytest

from pml.analysis.code_hash import normalized_code_hash
from pml.analysis.snippet import CallSite, Parameter, SnippetAnalysis, analyze_snippet


def sites(code: str) -> list[tuple[str, str, int, int, bool]]:
    return [(c.namespace, c.name, c.line, c.column, c.called) for c in analyze_snippet(code).calls]


def params(code: str) -> list[tuple[str, dict[str, Any], bool, str]]:
    return [(p.name, p.schema, p.required, p.source) for p in analyze_snippet(code).parameters]


# --- call sites ------------------------------------------------------------------------------


def test_the_three_reference_forms_and_bare_references() -> None:
    code = (
        'text = await mcp.filesystem.read_file(path=args["p"])\n'
        'total = await mcp.math["get-sum"](a=1, b=2)\n'
        'cfg = await mcp["acme.web.fs.read_json.ab12"](path="/x")\n'
        "reader = mcp.fs.read_json\n"
    )
    analysis = analyze_snippet(code)
    assert analysis.calls == (
        CallSite("filesystem", "read_file", 1, 14, True),
        CallSite("math", "get-sum", 2, 15, True),
        CallSite("", "acme.web.fs.read_json.ab12", 3, 13, True),
        CallSite("fs", "read_json", 4, 10, False),
    )
    assert analysis.servers_and_tools() == [
        ("filesystem", "read_file"),
        ("math", "get-sum"),
        ("fs", "read_json"),
    ]
    assert analysis.code == code
    assert analysis.code_hash == normalized_code_hash(code)


def test_nested_references_are_found_in_source_order() -> None:
    code = (
        "import asyncio\n"
        "async def fetch(n):\n"
        "    return await mcp.web.get(url=n)\n"
        "class Box:\n"
        "    tool = mcp.box.put\n"
        "rows = [await mcp.db.query(sql=s) for s in args['queries'] if mcp.db.ok]\n"
        "note = f\"{await mcp.fs.read(path='a')} and {mcp.fs.stat}\"\n"
        "later = lambda: mcp.fs.write(path=args.get('out'))\n"
        "both = await asyncio.gather(mcp.a.one(), mcp.b['two'](x=await mcp.c.three()))\n"
        "return {mcp.k.v: [x async for x in mcp.s.stream()]}\n"
    )
    assert sites(code) == [
        ("web", "get", 3, 18, True),
        ("box", "put", 5, 12, False),
        ("db", "query", 6, 15, True),
        ("db", "ok", 6, 63, False),
        ("fs", "read", 7, 17, True),
        ("fs", "stat", 7, 45, False),
        ("fs", "write", 8, 17, True),
        ("a", "one", 9, 29, True),
        ("b", "two", 9, 42, True),
        ("c", "three", 9, 63, True),
        ("k", "v", 10, 9, False),
        ("s", "stream", 10, 36, True),
    ]


def test_servers_and_tools_are_distinct_in_first_seen_order_without_fqdn_references() -> None:
    code = 'mcp.b.x()\nmcp.a.y()\nmcp.b.x()\nmcp["o.p.q.r.s"]()\nmcp.a["y"]()\nmcp.b.z\n'
    assert analyze_snippet(code).servers_and_tools() == [("b", "x"), ("a", "y"), ("b", "z")]


def test_columns_count_characters_not_utf8_bytes() -> None:
    code = 'x = "日本語 ✓"; y = await mcp.fs.read()\nz = 1 if "é" else\tmcp.ünï.cödé\n'
    assert sites(code) == [("fs", "read", 1, 24, True), ("ünï", "cödé", 2, 19, False)]
    for line, site in zip(code.splitlines(), analyze_snippet(code).calls, strict=True):
        assert line.index("mcp") + 1 == site.column


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_lines_are_counted_like_the_parser(newline: str) -> None:
    code = newline.join(["x = 1", 's = "a\u2028b\x0c"; mcp.a.b()', "mcp.c.d()"])
    assert sites(code) == [("a", "b", 2, 13, True), ("c", "d", 3, 1, True)]


def test_a_snippet_without_mcp_has_no_calls_and_an_empty_schema() -> None:
    analysis = analyze_snippet("return 1 + 1")
    assert analysis.calls == ()
    assert analysis.servers_and_tools() == []
    assert analysis.parameters_schema == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": True,
    }


def test_analyses_are_frozen_slotted_values() -> None:
    analysis = analyze_snippet("return mcp.a.b()")
    assert analysis == analyze_snippet("return mcp.a.b()")
    with pytest.raises(AttributeError):
        analysis.code = "x"  # type: ignore[misc]
    for cls in (SnippetAnalysis, CallSite, Parameter):
        assert "__slots__" in vars(cls)
        assert cls.__dataclass_params__.frozen  # type: ignore[attr-defined]


# --- parameters from args --------------------------------------------------------------------


def test_args_uses_become_parameters() -> None:
    code = (
        'a = args["root"]\n'
        'b = args.get("limit")\n'
        'c = args.get("depth", 3)\n'
        'd = args.get("mode", mode_default)\n'
        "e = args[key]\n"
        'args["written"] = 1\n'
        'f = args.get("x", 1, 2)\n'
        'g = args.get(key="k")\n'
        'h = args["nested"]["deep"]\n'
    )
    assert params(code) == [
        ("root", {}, True, "args"),
        ("limit", {}, False, "args"),
        ("depth", {"type": "integer", "default": 3}, False, "args"),
        ("mode", {}, False, "args"),
        ("nested", {}, True, "args"),
    ]
    assert analyze_snippet(code).parameters_schema == {
        "type": "object",
        "properties": {
            "root": {},
            "limit": {},
            "depth": {"type": "integer", "default": 3},
            "mode": {},
            "nested": {},
        },
        "required": ["nested", "root"],
        "additionalProperties": True,
    }


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ('args["x"]\nargs.get("x", 1)', ("x", {"type": "integer", "default": 1}, False, "args")),
        (
            'args.get("x", 1)\nargs.get("x", 1)',
            ("x", {"type": "integer", "default": 1}, False, "args"),
        ),
        ('args.get("x", 1)\nargs.get("x", 2)', ("x", {}, False, "args")),
        ('args.get("x", 1)\nargs.get("x", 1.0)', ("x", {}, False, "args")),
        ('args.get("x")\nargs.get("x", 1)', ("x", {}, False, "args")),
        ('args["x"]\nargs.get("x")', ("x", {}, True, "args")),
        (
            'args.get("x", [1, {"a": None}])',
            ("x", {"type": "array", "default": [1, {"a": None}]}, False, "args"),
        ),
    ],
)
def test_uses_of_one_key_combine(code: str, expected: tuple[Any, ...]) -> None:
    assert params(code) == [expected]


def test_schemas_are_copies() -> None:
    analysis = analyze_snippet("mcp.a.b(xs=[1, 2])")
    analysis.parameters_schema["properties"]["xs"]["default"].append(3)
    assert analysis.parameters_schema["properties"]["xs"] == {"type": "array", "default": [1, 2]}


# --- lifted literals -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("literal", "schema"),
    [
        ('"docs/a.md"', {"type": "string", "default": "docs/a.md"}),
        ("'single'", {"type": "string", "default": "single"}),
        ('"a" "b"', {"type": "string", "default": "ab"}),
        ("42", {"type": "integer", "default": 42}),
        ("-7", {"type": "integer", "default": -7}),
        ("0x10", {"type": "integer", "default": 16}),
        ("2.5", {"type": "number", "default": 2.5}),
        ("-0.5", {"type": "number", "default": -0.5}),
        ("True", {"type": "boolean", "default": True}),
        ("None", {"type": "null", "default": None}),
        ('[1, "a", None]', {"type": "array", "default": [1, "a", None]}),
        ("(1, (2, 3))", {"type": "array", "default": [1, [2, 3]]}),
        ('{"a": [1, {"b": False}]}', {"type": "object", "default": {"a": [1, {"b": False}]}}),
        ("[]", {"type": "array", "default": []}),
        ("{}", {"type": "object", "default": {}}),
    ],
)
def test_literal_keyword_arguments_are_lifted_with_their_type(
    literal: str, schema: dict[str, Any]
) -> None:
    assert params(f"await mcp.fs.call(value={literal})") == [("value", schema, False, "literal")]


@pytest.mark.parametrize(
    "value",
    [
        "{1, 2}",
        'b"bytes"',
        "1j",
        "1e999",
        "-True",
        "+-1",
        'f"x{y}"',
        '"a" + "b"',
        "{1: 'a'}",
        "[x]",
        "{**d}",
        "...",
        "x",
        "len('abc')",
        "[" * 150 + "]" * 150,
        "0x" + "f" * 1100,
    ],
)
def test_other_values_are_not_lifted(value: str) -> None:
    assert params(f"await mcp.fs.call(value={value})") == []


def test_splats_and_non_mcp_calls_are_not_lifted() -> None:
    code = 'await mcp.fs.call(**opts)\nawait mcp.fs.call(**{"path": "x"})\nprint(sep="-")\n'
    assert params(code) == []


def test_a_recurring_keyword_gets_suffixes_and_the_same_literal_reuses_its_parameter() -> None:
    code = (
        'await mcp.fs.read(path="a.txt")\n'
        'await mcp.fs.read(path="b.txt")\n'
        'await mcp.fs.stat(path="a.txt")\n'
        'await mcp.fs.read(path="c.txt", limit=10)\n'
        "await mcp.fs.read(path=1)\n"
        "await mcp.fs.read(limit=10.0)\n"
    )
    assert params(code) == [
        ("path", {"type": "string", "default": "a.txt"}, False, "literal"),
        ("path_2", {"type": "string", "default": "b.txt"}, False, "literal"),
        ("path_3", {"type": "string", "default": "c.txt"}, False, "literal"),
        ("limit", {"type": "integer", "default": 10}, False, "literal"),
        ("path_4", {"type": "integer", "default": 1}, False, "literal"),
        ("limit_2", {"type": "number", "default": 10.0}, False, "literal"),
    ]


def test_a_lifted_keyword_never_takes_an_args_parameter_name_of_another_meaning() -> None:
    code = (
        'await mcp.fs.read(path="a.txt")\n'
        'await mcp.fs.read(path_2="z")\n'
        'await mcp.fs.read(path="b.txt")\n'
        'x = args["path"]\n'
    )
    assert params(code) == [
        ("path_2", {"type": "string", "default": "a.txt"}, False, "literal"),
        ("path_2_2", {"type": "string", "default": "z"}, False, "literal"),
        ("path_3", {"type": "string", "default": "b.txt"}, False, "literal"),
        ("path", {}, True, "args"),
    ]


def test_a_literal_equal_to_the_args_default_of_its_keyword_shares_that_parameter() -> None:
    code = 'p = args.get("path", "a.txt")\nawait mcp.fs.read(path="a.txt")\n'
    assert params(code) == [("path", {"type": "string", "default": "a.txt"}, False, "args")]


# --- secrets ---------------------------------------------------------------------------------

GHP = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"


def test_secret_literals_become_required_parameters_without_default() -> None:
    code = (
        f'await mcp.gh.issues(token="{GHP}", repo="octo/hello")\n'
        'await mcp.db.query(password="hunter2", sql="select 1")\n'
        'await mcp.web.get(headers={"Authorization": "Bearer 3f9a1c7e5b2d8f40a6c1"})\n'
        f'await mcp.gh.pulls(token="{GHP}")\n'
    )
    analysis = analyze_snippet(code)
    assert params(code) == [
        ("token", {"type": "string"}, True, "secret"),
        ("repo", {"type": "string", "default": "octo/hello"}, False, "literal"),
        ("password", {"type": "string"}, True, "secret"),
        ("sql", {"type": "string", "default": "select 1"}, False, "literal"),
        ("headers", {"type": "object"}, True, "secret"),
    ]
    assert analysis.parameters_schema["required"] == ["headers", "password", "token"]
    assert GHP not in repr(analysis.parameters_schema)
    assert "hunter2" not in repr(analysis.parameters_schema)


def test_secrets_elsewhere_in_the_code_become_parameters_too() -> None:
    code = (
        f'GITHUB_TOKEN = "{GHP}"\n'
        'conn = connect(dsn="postgresql://app:s3cr3t@db:5432/app")\n'
        'h = {"X-Api-Key": "abc123"}\n'
        'k = args.get("api_key", "sk-proj-Abc123def456ghi789jkl012")\n'
        'note = "just text"\n'
    )
    assert params(code) == [
        ("github_token", {"type": "string"}, True, "secret"),
        ("dsn", {"type": "string"}, True, "secret"),
        ("x_api_key", {"type": "string"}, True, "secret"),
        ("api_key", {"type": "string"}, True, "secret"),
    ]
