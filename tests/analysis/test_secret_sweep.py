"""Secrets anywhere in a snippet never reach the stored code (SPEC §6.1, issue 19 item 4).

Each case is run twice in plain Python: the code as the agent wrote it, and the stored code
with the lifted secrets passed as ``args``; both must compute the same ``result``.
"""

from __future__ import annotations

import ast
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pml.analysis.code_hash import parse_snippet
from pml.analysis.secret_check import find_secret
from pml.analysis.snippet import SnippetAnalysis, analyze_snippet, code_to_store
from pml.errors import InvalidInput

GHP = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
SK = "sk-abcdefghijklmnop1234"
RANDOM = "q8Zt1LmX4vR7yN2kP9sJ3wB6"
AKIA = "AKIAIOSFODNN7EXAMPLE"


def stored(code: str) -> str:
    return code_to_store(analyze_snippet(code))


def required(analysis: SnippetAnalysis) -> list[str]:
    return analysis.parameters_schema["required"]


def run(code: str, args: dict[str, Any]) -> object:
    """``result`` after running ``code`` as plain Python with ``args``."""
    namespace: dict[str, Any] = {"args": args}
    exec(compile(code, "<snippet>", "exec"), namespace)
    return namespace["result"]


def same_result(code: str, secrets: dict[str, str], args: dict[str, Any] | None = None) -> str:
    """Stored code, after checking it computes what ``code`` does given ``secrets`` as args."""
    given_args = dict(args or {})
    analysis = analyze_snippet(code)
    kept = code_to_store(analysis)
    parse_snippet(kept)
    assert run(kept, given_args | secrets) == run(code, given_args)
    assert set(secrets) <= set(required(analysis))
    for value in secrets.values():
        assert value not in kept
    assert find_secret(kept) is None
    return kept


CASES: list[tuple[str, str, dict[str, str], str]] = [
    (
        "f-string text",
        f'user = "ada"\nresult = f"Bearer {SK} for {{user}}"\n',
        {"result": SK},
        'user = "ada"\nresult = f"Bearer {args[\'result\']} for {user}"\n',
    ),
    (
        "bytes",
        f'result = b"{SK}"\n',
        {"result": SK},
        'result = args["result"].encode()\n',
    ),
    (
        "raw bytes",
        f'result = rb"{SK}"\n',
        {"result": SK},
        'result = args["result"].encode()\n',
    ),
    (
        "implicit concatenation",
        f'result = ("sk-"\n    "{SK[3:]}")\n',
        {"result": SK},
        'result = (args["result"])\n',
    ),
    (
        "plus",
        f'result = "sk-" + "{SK[3:10]}" + "{SK[10:]}"\n',
        {"result": SK},
        'result = args["result"]\n',
    ),
    (
        "join",
        f'result = "".join(["sk-", "{SK[3:]}"])\n',
        {"result": SK},
        'result = args["result"]\n',
    ),
    (
        "percent",
        f'result = "%s%s" % ("sk-", "{SK[3:]}")\n',
        {"result": SK},
        'result = args["result"]\n',
    ),
    (
        "format",
        f'result = "{{}}{{}}".format("sk-", "{SK[3:]}")\n',
        {"result": SK},
        'result = args["result"]\n',
    ),
    (
        "fromhex",
        f'result = bytes.fromhex("{SK.encode().hex()}")\n',
        {"result": SK},
        'result = args["result"].encode()\n',
    ),
    (
        "dict key",
        f'result = {{"{GHP}": "github"}}\n',
        {"secret": GHP},
        'result = {args["secret"]: "github"}\n',
    ),
    (
        "format spec",
        f'import datetime\nd = datetime.date(2024, 1, 2)\nresult = f"{{d:%Y {SK}}}"\n',
        {"result": SK},
        "import datetime\nd = datetime.date(2024, 1, 2)\nresult = f\"{d:%Y {args['result']}}\"\n",
    ),
    (
        "nested f-string",
        f"result = f\"<{{f'{SK}'}}>\"\n",
        {"result": SK},
        'result = f"<{f\'{args[\\"result\\"]}\'}>"\n',
    ),
    (
        "f-string split over implicit concatenation",
        f'n = 1\nresult = f"sk-" f"{SK[3:]} {{n}}"\n',
        {"result": SK},
        "n = 1\nresult = f\"{args['result']} {n}\"\n",
    ),
    (
        "f-string field of glued constants",
        f"result = f\"{{'sk-' + '{SK[3:]}'}}\"\n",
        {"secret": SK},
        "result = f\"{args['secret']}\"\n",
    ),
    (
        "credential name binds f-string text",
        'n = 4\npassword = f"hunter{n}x"\nresult = password\n',
        {"password": "hunter"},
        "n = 4\npassword = f\"{args['password']}{n}x\"\nresult = password\n",
    ),
    (
        "a sentence holding a token",
        f'result = "use {RANDOM} in prod"\n',
        {"result": f"use {RANDOM} in prod"},
        'result = args["result"]\n',
    ),
    (
        "unicode around",
        f'result = f"été — {GHP} — 日本 {{1}}"\n',
        {"result": GHP},
        "result = f\"été — {args['result']} — 日本 {1}\"\n",
    ),
]


@pytest.mark.parametrize(
    ("code", "secrets", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_secrets_are_lifted_and_the_stored_code_computes_the_same(
    code: str, secrets: dict[str, str], expected: str
) -> None:
    kept = same_result(code, secrets)
    if '\\"' not in expected:
        assert kept == expected
    else:  # nested quotes: only the shape matters
        assert "args[" in kept


def test_the_same_secret_everywhere_is_one_parameter() -> None:
    code = (
        f'token = "{GHP}"\n'
        f'header = f"token {GHP}"\n'
        f'raw = b"{GHP}"\n'
        f'keys = {{"{GHP}": 1}}\n'
        "result = [token, header, raw, keys]\n"
    )
    analysis = analyze_snippet(code)
    assert required(analysis) == ["token"]
    assert same_result(code, {"token": GHP}) == (
        'token = args["token"]\n'
        "header = f\"token {args['token']}\"\n"
        'raw = args["token"].encode()\n'
        'keys = {args["token"]: 1}\n'
        "result = [token, header, raw, keys]\n"
    )


def test_comments_are_redacted_and_the_rest_kept() -> None:
    code = (
        f"# deploy key: {GHP} (rotate)\r\n"
        "x = 1  # an ordinary comment about sha256 and report_2024_final.csv\r\n"
        f"\tif x:  # password=hunter22 and {AKIA}\r\n"
        "result = x # ünïcode ✓\r\n"
    ).replace("\tif x:", "if x:\n    pass")
    kept = same_result(code, {})
    assert kept == code.replace(GHP, "[REDACTED]").replace("hunter22", "[REDACTED]").replace(
        AKIA, "[REDACTED]"
    )
    assert analyze_snippet(code).parameters == ()


def test_a_private_key_over_comment_lines_is_redacted_to_its_end() -> None:
    code = (
        "# -----BEGIN RSA PRIVATE KEY-----\n"
        "# MIIEabc\n"
        "    # def\n"
        "# -----END RSA PRIVATE KEY----- kept\n"
        "result = 1  # kept too\n"
    )
    assert same_result(code, {}) == (
        "# [REDACTED]\n# [REDACTED]\n    # [REDACTED]\n# [REDACTED] kept\nresult = 1  # kept too\n"
    )


def test_docstrings_and_bare_strings_are_redacted_not_lifted() -> None:
    code = (
        f'"""Module doc: token {GHP}."""\n'
        "def f():\n"
        f"    '''Uses {SK}\n    and Bearer {RANDOM}.'''\n"
        "    return 2\n"
        f'b"{AKIA}"\n'
        "result = f()\n"
    )
    analysis = analyze_snippet(code)
    assert analysis.parameters == ()
    kept = same_result(code, {})
    assert kept == (
        '"""Module doc: token [REDACTED]."""\n'
        "def f():\n"
        "    '''Uses [REDACTED]\n    and Bearer [REDACTED].'''\n"
        "    return 2\n"
        'b"[REDACTED]"\n'
        "result = f()\n"
    )


def test_a_docstring_secret_written_with_escapes_is_spelled_anew() -> None:
    code = f'"""token \\x67hp_{GHP[4:]}"""\nresult = 1\n'
    kept = same_result(code, {})
    assert kept == "'token [REDACTED]'\nresult = 1\n"


def test_the_lifted_secret_is_not_in_the_schema_and_is_required() -> None:
    analysis = analyze_snippet(f'result = f"key {SK}"\n')
    assert analysis.parameters_schema["properties"] == {"result": {"type": "string"}}
    assert required(analysis) == ["result"]
    assert SK not in repr(analysis.parameters_schema)


def test_a_dict_key_inside_a_tool_argument_makes_the_argument_secret() -> None:
    code = f'r = await mcp.fs.write(data={{"{GHP}": 1, "n": 2}})\n'
    analysis = analyze_snippet(code)
    assert required(analysis) == ["data"]
    assert "default" not in analysis.parameters_schema["properties"]["data"]
    assert stored(code) == 'r = await mcp.fs.write(data=args["data"])\n'


def test_a_secret_named_dict_key_never_names_the_parameter() -> None:
    code = f'result = {{"{GHP}": "{SK}"}}\n'
    analysis = analyze_snippet(code)
    assert all(GHP not in p.name for p in analysis.parameters)
    assert same_result(code, {"secret": SK, "secret_2": GHP}) == (
        'result = {args["secret_2"]: args["secret"]}\n'
    )


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (
            f'match args["k"]:\n    case "{GHP}":\n        pass\n',
            "a secret-looking text in a match pattern cannot be moved out of the code: "
            "pass it in args instead (line 2)",
        ),
        (
            f'x = args["{GHP}"]\n',
            "a secret-looking text in a name the code is checked against (args key or tool "
            "name) cannot be moved out of the code: pass it in args instead (line 1)",
        ),
        (
            f'x = await mcp["{GHP}"]()\n',
            "a secret-looking text in a name the code is checked against (args key or tool "
            "name) cannot be moved out of the code: pass it in args instead (line 1)",
        ),
        (
            f"{GHP} = 1\n",
            "a secret-looking text in a name cannot be moved out of the code: "
            "pass it in args instead (line 1)",
        ),
        (
            f"def f({GHP}):\n    pass\n",
            "a secret-looking text in a name cannot be moved out of the code: "
            "pass it in args instead (line 1)",
        ),
        (
            'x = b"sk-abcdefghijklmnop1234\\xff"\n',
            "a secret in bytes that are not UTF-8 text cannot be moved out of the code here: "
            "pass it in args instead (line 1)",
        ),
        (
            f"x = f\"{{'{SK}'=}}\"\n",
            "a secret-looking literal cannot be moved out of the code here: "
            "pass it in args instead (line 1)",
        ),
    ],
    ids=["match", "args-key", "tool-name", "name", "parameter-name", "binary-bytes", "debug"],
)
def test_secrets_that_cannot_move_refuse_the_code_without_quoting_it(
    code: str, message: str
) -> None:
    with pytest.raises(InvalidInput) as info:
        analyze_snippet(code)
    assert info.value.message == message
    for secret in (GHP, SK):
        assert secret not in info.value.message


@pytest.mark.parametrize(
    "code",
    [
        'x = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"  # sha256\n',
        'x = "0b1f6a3e-9c4d-4e2a-8f1b-7c3d2e1a0f9b"  # a request id\n',
        "use_the_very_long_descriptive_identifier_name_please = 1\n",
        "getUserAccountByIdentifierV2Handler = 2\n",
        '"""Return the token count of the tokenizer path /models/tok.json."""\n',
        "# the password must be at least 12 characters; see docs/auth.md\n",
        'x = f"{n} tokens at https://api.example.com/v1/items?page=2"\n',
        'x = "%s/%s" % ("reports", "2024-06-01")\n',
        'x = "".join(["path/to/", "report_final_v2.csv"])\n',
        'x = bytes.fromhex("deadbeef")\n',
        "token = f\"Bearer {args['t']}\"\n",
        'x = b"\\x89PNG\\r\\n\\x1a\\n"\n',
    ],
)
def test_ordinary_code_is_stored_as_written(code: str) -> None:
    analysis = analyze_snippet(code)
    assert [p.source for p in analysis.parameters if p.source == "secret"] == []
    assert code_to_store(analysis) == code


def test_stored_code_analyses_again_to_itself() -> None:
    code = (
        f"# {GHP}\n"
        f'"""{SK}"""\n'
        f'h = f"Bearer {SK} {{1}}"\n'
        f'k = b"{AKIA}" + b"x"\n'
        f'r = await mcp.fs.read(path="/a", token="{GHP}")\n'
    )
    kept = stored(code)
    again = analyze_snippet(kept)
    assert code_to_store(again) == kept
    assert [p for p in again.parameters if p.source == "secret"] == []


def test_many_secrets_on_long_crlf_lines_with_tabs() -> None:
    lines = [
        f'\tk{i} = f"id {i} key {GHP[:-2]}{i:02d}" + "{"x" * 1000}"  # {SK}{i:02d}'
        for i in range(60)
    ]
    code = "if True:\r\n" + "\r\n".join(lines) + "\r\nresult = 1\r\n"
    analysis = analyze_snippet(code)
    kept = code_to_store(analysis)
    assert GHP[:-2] not in kept
    assert SK not in kept
    assert len([p for p in analysis.parameters if p.source == "secret"]) == 60
    assert kept.count("\r\n") == code.count("\r\n")
    parse_snippet(kept)


_TOKEN_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnpqrstuvwxyz23456789"
_PLACES = [
    "# note {s}\nresult = 1\n",
    '"""doc {s}"""\nresult = 1\n',
    'result = f"a {s} {{1}}"\n',
    'result = b"{s}"\n',
    'result = "{head}" "{tail}"\n',
    'result = "{head}" + "{tail}"\n',
    'result = {{"{s}": 1}}\n',
    'result = "".join(["{head}", "{tail}"])\n',
    "result = f\"{{'{head}' + '{tail}'}}\"\n",
    'x = 1\nresult = f"{{x:>{{3}}}} {s}"\n',
]


@settings(max_examples=150, deadline=None)
@given(
    place=st.sampled_from(_PLACES),
    body=st.text(alphabet=_TOKEN_ALPHABET, min_size=36, max_size=40),
    cut=st.integers(min_value=1, max_value=30),
)
def test_a_github_token_anywhere_is_never_stored(place: str, body: str, cut: int) -> None:
    secret = f"ghp_{body}"
    code = place.format(s=secret, head=secret[:cut], tail=secret[cut:])
    kept = stored(code)
    assert secret not in kept
    assert body not in kept
    tree = ast.parse(kept)
    assert tree.body


def test_an_args_get_default_of_bytes_is_lifted_and_its_key_stays() -> None:
    code = f'result = args.get("k", b"{SK}")\n'
    assert same_result(code, {"secret": SK}) == (
        'result = args.get("k", args["secret"].encode())\n'
    )
    nested = f"result = f\"{{args.get('k', b'{SK}')}}\"\n"
    assert same_result(nested, {"secret": SK}) == (
        "result = f\"{args.get('k', args['secret'].encode())}\"\n"
    )


_GLUED = [
    'result = "{a}" + "{b}{c}"\n',
    'result = "{a}" + "{b}" + "{c}"\n',
    'result = ("{a}" + "{b}") + "{c}"\n',
    'result = "".join(["{a}", "{b}", "{c}"])\n',
    'result = "{a}{{}}{{}}".format("{b}", "{c}")\n',
    'result = "{a}%s" % "{b}{c}"\n',
    "result = f\"{a}{{'{b}'}}{c}\"\n",
    'result = (b"{a}" + b"{b}{c}").decode()\n',
    'result = ("{a}" + "{b}{c}").strip()\n',
    'token = "{a}" + "{b}"\nresult = await mcp.gh.get(token=token + "{c}")\n',
    'result = await mcp.gh.get(auth="{a}" + "{b}{c}")\n',
]


@settings(max_examples=200, deadline=None)
@given(
    place=st.sampled_from(_GLUED),
    seed=st.integers(0, 2**32),
    cuts=st.tuples(st.integers(4, 20), st.integers(21, 35)),
)
def test_no_piece_of_a_token_cut_in_pieces_is_stored(
    place: str, seed: int, cuts: tuple[int, int]
) -> None:
    """Lifting one piece of a glued credential used to leave the others in the code."""
    rng = random.Random(seed)
    body = "".join(rng.choice(_TOKEN_ALPHABET) for _ in range(36))  # the shape of a real one
    secret = f"ghp_{body}"
    first, second = cuts
    code = place.format(a=secret[:first], b=secret[first:second], c=secret[second:])
    kept = stored(code)
    pieces = {body[i : i + 8] for i in range(len(body) - 7)}  # 8 characters: ~40 bits
    assert not [piece for piece in pieces if piece in kept], kept
    assert find_secret(kept) is None


def test_a_part_that_holds_a_whole_secret_is_lifted_alone_and_its_template_stays() -> None:
    assert same_result(f'result = "token=%s" % "{SK}"\n', {"secret": SK}) == (
        'result = "token=%s" % args["secret"]\n'
    )
    glued = f'result = "Bearer " + "{SK[:5]}" + "{SK[5:]}"\n'
    assert same_result(glued, {"result": f"Bearer {SK}"}) == 'result = args["result"]\n'
    field = f"result = f\"{{'{SK[:6]}' + '{SK[6:]}'}} ok\"\n"
    assert same_result(field, {"secret": SK}) == "result = f\"{args['secret']} ok\"\n"
