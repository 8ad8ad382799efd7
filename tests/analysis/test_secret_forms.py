"""Credentials in the less common forms are found; ordinary text and code are left alone.

Token formats known by their prefix, credential names written as one word or with a
qualifier, PIN-like numbers, command lines, prose, quoted values with spaces, passphrases,
and credentials glued together at run time from a known start and a token-like rest.
"""

from __future__ import annotations

import ast
import time

import pytest

from pml.analysis.credentials import is_secret_keyword, looks_secret
from pml.analysis.glued_secrets import glued_prefix
from pml.analysis.secret_check import find_secret
from pml.analysis.secret_text import REDACTED, redact_spans, secret_spans
from pml.policy.scrub import scrub, scrub_text

HEX = "4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c"
GLUED = "16C7e42F292c6912E7710c838347Ae178B4a"
TOKENS = [
    "hf_" + "ujzPdeIgxLdGncfBAepfJBdKhoOOLdKLzd",
    "shpat_" + "16947ccf25ec84d8dbc74254770f5890",
    "dapi" + "0123456789abcdef0123456789abcdef",
    "PMAK-" + "64a1b2c3d4e5f60718293a4b-0123456789abcdef0123456789abcdef01",
    "HRKU-" + "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0",
    "AGE-SECRET-KEY-1" + "QYZ8M6T3R2K4V7X9P0N5L1J8H6G4F2D3S5A7Q9W0E2R4T6Y8U0",
    "glptt-" + "0a1b2c3d4e5f60718293a4b5",
    "SG." + "q8Zt1LmX4vR7yN2kP9sJ3w" + "." + "B6q8Zt1LmX4vR7yN2kP9sJ3wB6q8Zt1",
    "pypi-" + "AgEIcHlwaS5vcmcCJDAwMDAwMDAwLTAwMDAtMDAwMC0wMDAwLTAwMDAwMDAwMDAwMAACKlsz",
    "lin_api_" + "q8Zt1LmX4vR7yN2kP9sJ3wB6q8Zt1LmX4vR7",
    "123456789:" + "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw0",
]


@pytest.mark.parametrize("token", TOKENS)
def test_known_token_formats_are_secrets_alone_and_inside_text(token: str) -> None:
    assert looks_secret("", token)
    text = f"call the service with {token} then stop"
    assert redact_spans(text, secret_spans(text)) == f"call the service with {REDACTED} then stop"
    assert scrub_text(text) == f"call the service with {REDACTED} then stop"


@pytest.mark.parametrize(
    "keyword",
    [
        *("PGPASSWORD", "MYSQL_ROOT_PASSWORD", "db_pass", "passcode", "passkey", "clientsecret"),
        *("master_key", "app_key", "consumer_key", "hmac_key", "license_key", "sessionid"),
    ],
)
def test_credential_names_written_as_one_word_or_with_a_qualifier(keyword: str) -> None:
    assert is_secret_keyword(keyword)
    assert looks_secret(keyword, "Winter2024x")
    assert scrub({keyword: "Winter2024x"}) == {keyword: REDACTED}


@pytest.mark.parametrize(
    "keyword", ["sort_key", "primary_key", "cache_key", "pass_count", "bypass", "compass"]
)
def test_ordinary_names_are_not_credentials(keyword: str) -> None:
    assert not is_secret_keyword(keyword)


def test_a_pin_like_number_under_a_credential_name_is_a_secret_but_a_short_one_is_not() -> None:
    assert looks_secret("password", "83749203")
    assert not looks_secret("password", "42")
    assert find_secret("password = 83749203\nreturn 1") is not None
    assert find_secret("password_length = 83749203\nreturn 1") is None
    assert find_secret("passwords_seen = 2024\nreturn 1") is None
    assert find_secret("Password1 = 83749203\nreturn 1") is not None
    assert find_secret("retries = 83749203\nreturn 1") is None


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("mysql -h db -uroot -pSummer2025 app", "Summer2025"),
        ("sshpass -p Autumn2025 ssh ops@host", "Autumn2025"),
        ("curl -u admin:Autumn2025 https://api.example.com", "Autumn2025"),
        ("deploy --password Hunter22x --verbose", "Hunter22x"),
        ("deploy --api-key=q8Zt1LmX4vR7 now", "q8Zt1LmX4vR7"),
        ("the staging db password is Tr0ub4dor&3", "Tr0ub4dor&3"),
        ("# old db password='Summer 2025 Blue'", "Summer 2025 Blue"),
        ("# passphrase: correct horse battery staple", "correct horse battery staple"),
        ("Datadog API key: 4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c", "4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c"),
        (
            "twilio auth token is 9d3f1a7c5e2b8d4f6a0c1e3b5d7f9a2c",
            "9d3f1a7c5e2b8d4f6a0c1e3b5d7f9a2c",
        ),
    ],
)
def test_passwords_in_command_lines_prose_and_phrases_are_redacted(text: str, secret: str) -> None:
    assert [text[a:b] for a, b in secret_spans(text)] == [secret]
    assert secret not in scrub_text(text)
    assert REDACTED in scrub_text(text)


@pytest.mark.parametrize(
    "text",
    [
        "docker run -u 1000:1000 image",
        "mysql -p app",  # asks for the password
        "ssh -p 2222 host",
        "hf jobs run --secrets HF_TOKEN python script.py",
        "The --username and --password options can't be used together",
        "reset the password for user alice42",
        "First pass: determine the maximum length",
        "# Pin Accept-Encoding so it does not vary",
        "the commit 4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f10 fixed it",
        "sort key column_2024_total",
        "MFR_CheckForNewBricklets and NhlAppGetDefaultParentId",
        "export PGPASSWORD=$DB_PASSWORD",
        "Generate passphrase: use diceware with 6 words and print it",
        "store mnemonic: never log it",
        "compare passwords: old2024 vs new2025",
        "postgresql://{user}:{password}@{host}/db",
        "postgresql://app:${DB_PASSWORD}@db/app",
        "UPDATE users SET password_hash = :password WHERE id = :id",
    ],
)
def test_ordinary_text_keeps_every_word(text: str) -> None:
    assert secret_spans(text) == []
    assert scrub_text(text) == text


@pytest.mark.parametrize(
    "code",
    [
        f't = "ghp_%.36s" % "{GLUED}"',
        f't = "{{0}}{{1}}".format(*["ghp_", "{GLUED}"])',
        f't = "".join(x for x in ["ghp_", "{GLUED}"])',
        f't = "ghp_" + "{GLUED}".replace("-", "")',
        f't = "ghp_" + "{GLUED}"[0:36]',
        f't = "ghp_" + bytes.fromhex("{GLUED}").hex()',
        f'P = "ghp_"\nR = "{GLUED}"\nt = P + R',
        f'PREFIX = "sk-"\nBODY = "{GLUED}"',
    ],
)
def test_a_known_start_glued_to_a_token_like_text_is_found(code: str) -> None:
    assert glued_prefix(ast.parse(code)) is not None
    finding = find_secret(code + "\nreturn 1")
    assert finding is not None
    assert finding.what == "a credential glued together from pieces"


@pytest.mark.parametrize(
    "code",
    [
        f'ok = args["key"].startswith("ghp_") and "{GLUED}" != args["key"]',
        f'kind = "github" if "ghp_" in args["key"] else "other"\nref = "{GLUED}"',
        'header = "sk-" + args["key"]',  # the rest is a parameter: nothing glued in the code
        'x = "ghp_"\ny = "report_final"',  # no digit: a word, not a token
    ],
)
def test_a_known_start_that_is_checked_or_takes_a_parameter_is_fine(code: str) -> None:
    assert glued_prefix(ast.parse(code)) is None


def test_names_in_match_class_patterns_and_imports_are_read() -> None:
    token = "ghp_" + GLUED
    matched = f"match x:\n    case C({token}=1):\n        pass\nreturn 1"
    assert find_secret(matched) is not None
    assert find_secret(f"from {token} import y\nreturn 1") is not None


def test_hostile_text_is_judged_in_linear_time() -> None:
    hostile = [
        "mysql " + "a" * 200_000,
        "-u " + "x" * 200_000,
        "password " * 30_000,
        "--password=" + "q" * 200_000,
        "key: " + "9" * 200_000,
        "ghp_" * 50_000,
    ]
    for text in hostile:
        started = time.perf_counter()
        secret_spans(text)
        scrub_text(text)
        assert time.perf_counter() - started < 5.0
