"""The code stored for a capability: lifted literals, secrets removed, FQDN references."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pml.analysis.code_hash import normalized_code_hash, parse_snippet
from pml.analysis.snippet import SnippetAnalysis, analyze_snippet, code_to_store
from pml.errors import InvalidInput

FQDNS = {
    ("fs", "read_json"): "acme.web.fs.read_json.ab12",
    ("math", "get-sum"): "acme.web.m.s.cd34",
}
GHP = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"


def names(code: str) -> list[str]:
    return [p.name for p in analyze_snippet(code).parameters]


def stored(code: str, fqdns: dict[tuple[str, str], str] | None = None) -> str:
    return code_to_store(analyze_snippet(code), fqdns)


def test_lifting_keeps_formatting_and_comments() -> None:
    code = """\
# Collect the JSON files under a directory.
entries = await mcp.filesystem.list_directory(
    path = 'docs/guides',   # where the guides live
    depth=-1,
)
cfg = await mcp.fs.read_json(path="docs/config.json")  # the config

return {"n": len(entries), "cfg": cfg, "mode": args.get("mode", "fast")}
"""
    assert (
        stored(code)
        == """\
# Collect the JSON files under a directory.
entries = await mcp.filesystem.list_directory(
    path = args["path"],   # where the guides live
    depth=args["depth"],
)
cfg = await mcp.fs.read_json(path=args["path_2"])  # the config

return {"n": len(entries), "cfg": cfg, "mode": args.get("mode", "fast")}
"""
    )


def test_capabilities_are_rewritten_to_fqdn_references() -> None:
    code = (
        'a = await mcp.fs.read_json(path=args["p"])  # a capability\n'
        "b = await mcp.math['get-sum'](a=args['a'], b=args['b'])\n"
        "c = await mcp.fs.list(path=args['p'])  # an upstream tool: unchanged\n"
        "reader = mcp.fs.read_json\n"
        "d = await mcp['acme.web.other.thing.ef56']()\n"
    )
    assert stored(code, FQDNS) == (
        'a = await mcp["acme.web.fs.read_json.ab12"](path=args["p"])  # a capability\n'
        "b = await mcp[\"acme.web.m.s.cd34\"](a=args['a'], b=args['b'])\n"
        "c = await mcp.fs.list(path=args['p'])  # an upstream tool: unchanged\n"
        'reader = mcp["acme.web.fs.read_json.ab12"]\n'
        "d = await mcp['acme.web.other.thing.ef56']()\n"
    )
    assert analyze_snippet(stored(code, FQDNS)).servers_and_tools() == [("fs", "list")]


def test_without_literals_or_capabilities_the_code_is_unchanged() -> None:
    code = "x = await mcp.fs.list(path=args['p'])  # keep\nreturn x\n"
    assert stored(code) == code
    assert stored(code, {}) == code
    assert stored(code, {("fs", "other"): "a.b.c.d.e"}) == code


def test_secrets_never_reach_the_stored_code() -> None:
    code = (
        f'token = "{GHP}"\n'
        'await mcp.gh.issues(token=token, auth={"user": "ada", "password": "hunter2"})\n'
        'await mcp.db.query(dsn="postgresql://app:s3cr3t@db/app", sql="select 1")\n'
        'key = args.get("api_key", "sk-proj-Abc123def456ghi789jkl012")\n'
    )
    result = stored(code)
    for secret in (GHP, "hunter2", "s3cr3t", "sk-proj"):
        assert secret not in result
    assert result == (
        'token = args["token"]\n'
        'await mcp.gh.issues(token=token, auth=args["auth"])\n'
        'await mcp.db.query(dsn=args["dsn"], sql=args["sql"])\n'
        'key = args["api_key"]\n'
    )
    assert names(result) == names(code) == ["token", "auth", "dsn", "sql", "api_key"]
    assert analyze_snippet(result).parameters_schema["required"] == [
        "api_key",
        "auth",
        "dsn",
        "sql",
        "token",
    ]


def test_recurring_literals_are_replaced_by_their_shared_parameter() -> None:
    code = (
        'await mcp.fs.read(path="a")\n'
        'await mcp.fs.read(path="b")\n'
        'await mcp.fs.read(path="a")\n'
        'x = args.get("path")\n'
    )
    assert stored(code) == (
        'await mcp.fs.read(path=args["path_2"])\n'
        'await mcp.fs.read(path=args["path_3"])\n'
        'await mcp.fs.read(path=args["path_2"])\n'
        'x = args.get("path")\n'
    )


def test_multi_line_and_unicode_literals_are_replaced_whole() -> None:
    code = 'r = await mcp.fs.write(text=("héllo "\n    "wörld"), tags=["ü",\n 2])  # ✓\n'
    assert stored(code) == 'r = await mcp.fs.write(text=(args["text"]), tags=args["tags"])  # ✓\n'
    assert analyze_snippet(code).parameters_schema["properties"]["text"]["default"] == "héllo wörld"


def test_edits_inside_f_strings_pick_a_quote_the_f_string_allows() -> None:
    code = "msg = f\"got {await mcp.fs.read_json(path='a.json')}!\"\n"
    assert stored(code, FQDNS) == (
        "msg = f\"got {await mcp['acme.web.fs.read_json.ab12'](path=args['path'])}!\"\n"
    )
    triple = 'msg = f"""{await mcp.fs.read_json(path="a")}"""\n'
    assert stored(triple, FQDNS) == (
        'msg = f"""{await mcp["acme.web.fs.read_json.ab12"](path=args["path"])}"""\n'
    )


def test_f_string_debug_expressions_and_exhausted_quotes_are_left_alone() -> None:
    debug = "msg = f\"{await mcp.fs.read_json(path='a')=}\"\n"
    assert names(debug) == []
    assert stored(debug, FQDNS) == debug
    nested = "msg = f\"{f'{await mcp.fs.read_json(path=1)}'}\"\n"
    assert names(nested) == []
    assert stored(nested, FQDNS) == nested


def test_a_secret_that_cannot_be_lifted_is_an_error() -> None:
    with pytest.raises(InvalidInput) as info:
        analyze_snippet(f"msg = f\"{{await mcp.gh.x(token='{GHP}')=}}\"")
    assert info.value.message == (
        "a secret-looking literal cannot be moved out of the code here: "
        "pass it in args instead (line 1)"
    )


def test_the_stored_code_parses_reanalyses_and_hashes_stably() -> None:
    code = 'r = await mcp.fs.read_json(path="x.json", n=2)\nreturn r[args["k"]]\n'
    analysis = analyze_snippet(code)
    first = code_to_store(analysis, FQDNS)
    assert first == code_to_store(analysis, FQDNS)
    parse_snippet(first)
    again = analyze_snippet(first)
    assert [p.name for p in again.parameters] == ["path", "n", "k"]
    assert [(c.namespace, c.name) for c in again.calls] == [("", "acme.web.fs.read_json.ab12")]
    assert again.code_hash == normalized_code_hash(first) != analysis.code_hash
    assert code_to_store(again, FQDNS) == first  # storing is idempotent


# --- property: any literal keyword arguments -------------------------------------------------

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**12), max_value=10**12),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(st.characters(codec="utf-8"), max_size=12),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(st.characters(codec="utf-8"), max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
keywords = st.sampled_from(["path", "path_2", "query", "n", "token", "k", "ünï"])
calls = st.lists(
    st.tuples(
        st.sampled_from(["fs.read", "fs.read_json", "web.get", 'math["get-sum"]']),
        st.lists(st.tuples(keywords, json_values), max_size=3, unique_by=lambda kv: kv[0]),
        st.sampled_from(["plain", "await", "fstring"]),
    ),
    min_size=1,
    max_size=5,
)
args_keys = st.lists(
    st.tuples(keywords, st.sampled_from(["item", "get", "get_default"])), max_size=3
)


def _spell(value: Any) -> str:
    """A Python spelling of a JSON value (``repr`` for scalars, recursing into containers)."""
    if isinstance(value, list):
        return "[" + ", ".join(_spell(item) for item in value) + "]"  # pyright: ignore
    if isinstance(value, dict):
        items = value.items()  # pyright: ignore
        return "{" + ", ".join(f"{k!r}: {_spell(v)}" for k, v in items) + "}"  # pyright: ignore
    return repr(value)


def _render(program: list[Any], uses: list[tuple[str, str]]) -> str:
    lines: list[str] = []
    for key, kind in uses:
        spelled = {"item": f"args[{key!r}]", "get": f"args.get({key!r})"}
        lines.append(spelled.get(kind, f"args.get({key!r}, 1)"))
    for tool, kwargs, style in program:
        arguments = ", ".join(f"{k}={_spell(v)}" for k, v in kwargs)
        call = f"mcp.{tool}({arguments})"
        if style == "await":
            call = f"x = await {call}  # comment"
        elif style == "fstring" and not any(bad in call for bad in ("\\", "'''", "{", "}")):
            call = f"x = f'''{{ {call} }}'''"  # 3.11: no backslash in f-string expressions
        lines.append(call)
    return "\n".join(lines) + "\n"


@settings(max_examples=150, deadline=None)
@given(calls, args_keys)
def test_storing_always_parses_and_keeps_the_parameter_names(
    program: list[Any], uses: list[tuple[str, str]]
) -> None:
    code = _render(program, uses)
    outcome: SnippetAnalysis | InvalidInput
    try:
        outcome = analyze_snippet(code)
    except InvalidInput as exc:
        outcome = exc
    if isinstance(outcome, InvalidInput):  # only a secret that cannot leave its f-string
        assert "secret-looking literal" in outcome.message
        return
    analysis = outcome
    result = code_to_store(analysis, {("fs", "read_json"): "acme.web.fs.read_json.ab12"})
    parse_snippet(result)
    again = analyze_snippet(result)
    assert [p.name for p in again.parameters] == [p.name for p in analysis.parameters]
    lifted = [p for p in analysis.parameters if p.source != "args"]
    assert all(p.source == "args" for p in again.parameters)
    for parameter in lifted:
        assert (
            f"[{json.dumps(parameter.name, ensure_ascii=False)}]" in result
            or f"['{parameter.name}']" in result
        )
    assert ("fs", "read_json") not in again.servers_and_tools()


def test_edits_in_format_specs_and_implicit_concatenation() -> None:
    code = 'x = ("a: "\n     f"{await mcp.fs.read_json(path=1):>{await mcp.fs.width(n=2)}}")\n'
    assert stored(code, FQDNS) == (
        'x = ("a: "\n'
        "     f\"{await mcp['acme.web.fs.read_json.ab12'](path=args['path']):"
        ">{await mcp.fs.width(n=args['n'])}}\")\n"
    )


def test_secrets_in_docstrings_dict_keys_and_f_strings_never_stay() -> None:
    # Issue 19: these used to be stored as written. A docstring never runs: redacted. A dict
    # key and f-string text become a (shared) required parameter. A match pattern cannot be
    # an expression: the code is refused before it runs.
    code = (
        f'"""Docstring mentioning {GHP}."""\n'
        f'headers = {{"{GHP}": 1}}\n'
        f'note = f"token {GHP} {{x}}"\n'
    )
    assert names(code) == ["secret"]
    assert stored(code) == (
        '"""Docstring mentioning [REDACTED]."""\n'
        'headers = {args["secret"]: 1}\n'
        "note = f\"token {args['secret']} {x}\"\n"
    )
    pattern = f'match event:\n    case {{"token": "{GHP}"}}:\n        pass\n'
    with pytest.raises(InvalidInput) as info:
        analyze_snippet(pattern)
    assert info.value.message == (
        "a secret-looking text in a match pattern cannot be moved out of the code: "
        "pass it in args instead (line 2)"
    )


def test_secrets_in_expression_statements_are_lifted() -> None:
    code = 'print(connect(password="hunter2"))\nawait client.login(f"{user}", "hunter2")\n'
    assert stored(code) == (
        'print(connect(password=args["password"]))\n'
        'await client.login(f"{user}", args["password"])\n'
    )
