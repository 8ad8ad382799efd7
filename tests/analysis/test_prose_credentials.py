"""Passwords written in prose as a user and a password, or as whose password it is, are
found in comments, docstrings, strings and audit text (``pml.analysis.prose_credentials``)."""

from __future__ import annotations

import pytest

from pml.analysis.prose_credentials import prose_credential_spans
from pml.analysis.secret_check import find_secret
from pml.analysis.secret_text import REDACTED, secret_spans
from pml.analysis.snippet import analyze_snippet
from pml.policy.scrub import scrub_text

SECRET = "Zq8kLm2p&Xr5v"


def found(text: str) -> list[str]:
    return [text[start:end] for start, end in secret_spans(text)]


@pytest.mark.parametrize(
    "text",
    [
        f"login with ada / {SECRET} if asked",
        f"creds ada/{SECRET}",
        f"Credentials: ada:{SECRET}",
        f"sign-in as ada@example.com/{SECRET}",
        f"log in: ada {SECRET}".replace("ada ", "ada/"),
        f"user: ada pass: {SECRET}",
        f"Username ada, pass {SECRET}",
        f"login ada; pass={SECRET}",
        f"password for ada is {SECRET}",
        f"the passcode of the vault was {SECRET}.",
        f"PASSWORD FOR THE DB: {SECRET}",
        f"Connexion (login) : ada/{SECRET}",
        f"login avec ada / {SECRET} — mot de passe",
    ],
)
def test_a_password_in_prose_is_found_whole(text: str) -> None:
    spans = [text[start:end] for start, end in prose_credential_spans(text)]
    assert spans, text
    assert any(SECRET in span for span in found(text))
    assert SECRET not in scrub_text(text)  # the audit hides it too


@pytest.mark.parametrize(
    "text",
    [
        "log in at 10:30",
        "login page /static/app.js",
        "sign in as ada: see the wiki",
        "the login timestamp 2024-01-01T10:30:00Z",
        "login count: 123456",
        "login attempts/day: 5000000",
        "credentials file: ~/.aws/credentials",
        "login shell: /bin/bash",
        "login endpoint: v2-auth",
        "login with user:pass",
        "first pass: the names, second pass: the types",
        "creds rotated on 2024-01-01",
        "password for ada is {password}",
        "password for ada is ${DB_PASSWORD}",
        "password for ada is stored in the vault",
        "sign in with SSO / SAML",
        "the user must pass all 12 checks",
    ],
)
def test_prose_about_signing_in_without_a_password_finds_nothing(text: str) -> None:
    assert prose_credential_spans(text) == []


def test_a_comment_a_docstring_and_a_string_with_a_pair_are_never_stored() -> None:
    code = (
        f"# login with ada / {SECRET} if asked\n"
        f'def f():\n    """creds ada/{SECRET}"""\n    return 1\n'
        f'note = "password for ada is {SECRET}"\n'
        "return f()"
    )
    analysis = analyze_snippet(code)
    stored = analysis.lifted_code or code
    assert SECRET not in stored
    assert REDACTED in stored or analysis.parameters
    assert find_secret(stored) is None


@pytest.mark.parametrize(
    "text",
    [
        "login " * 20_000,
        "login ada/" * 10_000,
        ("creds " + "a" * 70 + "/") * 2_000 + SECRET,
        "password for " * 10_000,
        "user pass " * 10_000,
        "ログイン ada / パスワード123!",
        "login\x00ada/\x00" + SECRET,
    ],
)
def test_hostile_text_is_read_in_linear_time_without_error(text: str) -> None:
    spans = prose_credential_spans(text)
    assert all(0 <= start < end <= len(text) for start, end in spans)
