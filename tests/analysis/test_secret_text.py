"""Finding credentials inside free text, folding glued constants, and the last check."""

from __future__ import annotations

import ast
import tokenize
from collections.abc import Iterator

import pytest

from pml.analysis import secret_comments
from pml.analysis.folding import MAX_FOLDED, folded_text
from pml.analysis.lifting import Parameter
from pml.analysis.secret_check import Finding, find_secret, schema_secret
from pml.analysis.secret_comments import UnreadableComments, comments
from pml.analysis.secret_text import REDACTED, holds_secret, redact_spans, secret_spans
from pml.analysis.snippet import analyze_snippet
from pml.errors import InvalidInput
from pml.policy.scrub import scrub_text

GHP = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"

FOUND = [
    (f"# token: {GHP}", GHP),
    ("# password=hunter22", "hunter22"),
    ("# api_key: abc123def456", "abc123def456"),
    ("# connect https://ada:s3cr3tpw@db.example.com/x", "s3cr3tpw"),
    ("# use q8Zt1LmX4vR7yN2kP9sJ3wB6 here", "q8Zt1LmX4vR7yN2kP9sJ3wB6"),
    ("# Authorization: Bearer abcdefgh12345678", "abcdefgh12345678"),
    ("# AKIAIOSFODNN7EXAMPLE is the key id", "AKIAIOSFODNN7EXAMPLE"),
    ('# secret = "hunter22"', "hunter22"),
    ("# pk_live_abcdefghijklmnopqrstu", "pk_live_abcdefghijklmnopqrstu"),
    ("# Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="),
    (
        "# jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln",
    ),
    (f"# the token is {GHP}.", GHP),
    ("# files at /srv/q8Zt1LmX4vR7yN2kP9sJ3wB6/out.json", "q8Zt1LmX4vR7yN2kP9sJ3wB6"),
    ("# client_secret: 8f3kd93kd0s", "8f3kd93kd0s"),
]

NOT_FOUND = [
    "# compute the sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "# request 0b1f6a3e-9c4d-4e2a-8f1b-7c3d2e1a0f9b failed",
    "# the token expired yesterday; refresh it with the password reset flow",
    "# see /home/ada/reports/2024-06-01/summary_final_v2.json",
    "# getUserAccountByIdentifierV2Handler handles it",
    "# password: ${DB_PASSWORD} (from the environment)",
    "# api_key=<your key here>",
    f"# already {REDACTED} and password={REDACTED}",
    "# ünïcode ✓ 日本語のコメント",
    "# " + "x" * 5000,
    "# " + "A1b2" * 100,  # a 400-character run: data, not a token
]


@pytest.mark.parametrize(("text", "secret"), FOUND)
def test_the_credential_part_of_the_text_is_found(text: str, secret: str) -> None:
    assert [text[a:b] for a, b in secret_spans(text)] == [secret]
    assert redact_spans(text, secret_spans(text)) == text.replace(secret, REDACTED)


@pytest.mark.parametrize("text", NOT_FOUND)
def test_ordinary_text_holds_no_credential(text: str) -> None:
    assert secret_spans(text) == []


@pytest.mark.parametrize(("text", "secret"), FOUND)
def test_the_audit_redacts_what_capture_redacts(text: str, secret: str) -> None:
    # ``pml.policy.scrub`` cleans audit events: the same text must lose the same credential.
    assert secret not in scrub_text(text)


def test_a_private_key_is_found_to_its_end_marker() -> None:
    text = "a\n-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----\nb"
    assert redact_spans(text, secret_spans(text)) == f"a\n{REDACTED}\nb"
    unterminated = "x -----BEGIN PRIVATE KEY-----\nMHcCAQEE"
    assert redact_spans(unterminated, secret_spans(unterminated)) == f"x {REDACTED}"


def test_a_whole_value_that_looks_secret_is_its_own_span() -> None:
    text = "q8Zt1LmX4vR7yN2k!P9sJ3wB6"  # the ``!`` keeps it from being one token run
    assert [text[a:b] for a, b in secret_spans(text)] == [text]


def test_many_secrets_and_hostile_sizes() -> None:
    text = " ".join(f"{GHP[:-2]}{i:02d}" for i in range(100))
    assert len(secret_spans(text)) == 100
    huge = "password=" + "a" * 100_000
    assert secret_spans(huge) == [(9, 100_009)]
    assert secret_spans("=" * 100_000 + ":" * 100_000) == []


def test_holds_secret_searches_nested_values_and_keys() -> None:
    assert holds_secret("", {"note": ["fine", {GHP: 1}]})
    assert holds_secret("", ("a", "token ghp_16C7e42F292c6912E7710c838347Ae178B4a"))
    assert not holds_secret("path", ["/a", {"n": 1, "mode": "fast"}])


def test_folding_follows_the_listed_forms_only() -> None:
    def fold(code: str) -> object:
        return folded_text(ast.parse(code, mode="eval").body)

    assert fold('"a" + "b" + "c"') == "abc"
    assert fold('b"a" + b"b"') == b"ab"
    assert fold('"-".join(("a", "b"))') == "a-b"
    assert fold('"%s=%d" % ("n", 3)') == "n=3"
    assert fold('"{}{k}".format("a", k="b")') == "ab"
    assert fold('"AB".lower()') == "ab"
    assert fold('"6162".encode().decode()') == "6162"
    assert fold("f\"{'a'}b\"") == "ab"
    for opaque in (
        '"a" + x',
        '"a" * 3',
        '"%9999999d" % 1',
        '"{:>99999999}".format(1)',
        '"{0.real}".format(1)',
        '"%d" % "x"',
        '"a".join(x)',
        'b"a" + "b"',
        'bytes.fromhex("zz")',
        'base64.b64decode("c2stYWJj")',
    ):
        assert fold(opaque) is None, opaque


def test_folding_cannot_be_made_to_build_a_huge_value() -> None:
    def fold(code: str) -> object:
        return folded_text(ast.parse(code, mode="eval").body)

    long = "x" * 40_000
    assert fold(f'"{long}" + "{long}"') is None
    assert fold(f'"{long}".join(["", "", ""])') is None
    assert fold('"' + "{0}" * 1000 + f'".format("{long}")') is None
    deep = '"a"' + ' + "a"' * 500
    assert fold(deep) is None  # deeper than MAX_DEPTH: not followed
    assert len(str(fold('"a"' + ' + "a"' * 50))) == 51
    assert MAX_FOLDED >= 65_536


def test_comments_are_read_with_lone_cr_and_crlf() -> None:
    code = "a = 1 # one\rb = '#no' # two\r\nc = 3 # three\n"
    assert [(c.text, c.line) for c in comments(code)] == [
        ("# one", 1),
        ("# two", 2),
        ("# three", 3),
    ]
    assert all(code[c.start : c.start + len(c.text)] == c.text for c in comments(code))


def test_unreadable_comments_count_as_a_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(readline: object) -> Iterator[tokenize.TokenInfo]:
        raise tokenize.TokenError("EOF in multi-line statement", (1, 0))

    monkeypatch.setattr(secret_comments.tokenize, "generate_tokens", fail)
    with pytest.raises(UnreadableComments):
        comments("x = 1  # note")
    assert comments("x = 1") == []  # no ``#``: nothing to read
    assert find_secret("x = 1  # note") == Finding(1, "comments that could not be read")
    with pytest.raises(InvalidInput) as info:
        analyze_snippet("x = 1  # note")
    assert "comments of this code could not be read" in info.value.message


def test_the_last_check_names_the_kind_and_line_never_the_secret() -> None:
    assert find_secret(f"x = 1\n# {GHP}") == Finding(2, "a comment")
    assert find_secret(f'x = 1\n\ny = f"{{x}} {GHP}"') == Finding(3, "a string")
    assert find_secret(f'x = b"{GHP}"') == Finding(1, "a bytes literal")
    assert find_secret(f'x = "ghp_" + "{GHP[4:]}"') == Finding(1, "an expression of constants")
    assert find_secret("x = 1") is None


def test_parameters_with_secret_defaults_or_names_are_found() -> None:
    fine = Parameter("path", {"type": "string", "default": "/a"}, False, "literal")
    leaked = Parameter("data", {"type": "object", "default": {GHP: 1}}, False, "literal")
    named = Parameter(GHP, {}, True, "args")
    assert schema_secret([fine]) is None
    assert schema_secret([fine, leaked]) == "data"
    assert schema_secret([named]) == GHP
