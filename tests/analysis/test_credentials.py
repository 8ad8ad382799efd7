"""Telling credentials from ordinary literals (``looks_secret``, SPEC §6)."""

from __future__ import annotations

import random
import string
import time

import pytest

from pml.analysis.credentials import is_secret_keyword, keyword_words, looks_random
from pml.analysis.snippet import looks_secret

SECRET_KEYWORDS = [
    "token",
    "access_token",
    "refreshToken",
    "GITHUB_TOKEN",
    "X-Auth-Token",
    "secret",
    "client_secret",
    "clientSecret",
    "password",
    "db_password",
    "passwd",
    "api_key",
    "apikey",
    "apiKey",
    "X-API-Key",
    "access_key",
    "AWS_SECRET_ACCESS_KEY",
    "private_key",
    "privateKey",
    "auth",
    "authorization",
    "Authorization",
    "credentials",
    "credential",
    "bearer",
]
PLAIN_KEYWORDS = [
    "author",
    "authors",
    "tokenizer_path",
    "tokenizer",
    "max_tokens",
    "token_type",
    "token_limit",
    "password_file",
    "secret_name",
    "auth_method",
    "key",
    "keyboard",
    "monkey_key",
    "path",
    "url",
    "query",
    "passage",
    "",
]


@pytest.mark.parametrize("keyword", SECRET_KEYWORDS)
def test_credential_keywords_make_any_real_value_secret(keyword: str) -> None:
    assert is_secret_keyword(keyword)
    assert looks_secret(keyword, "hunter2")
    assert looks_secret(keyword, "correct horse battery staple")


@pytest.mark.parametrize("keyword", PLAIN_KEYWORDS)
def test_other_keywords_do_not(keyword: str) -> None:
    assert not is_secret_keyword(keyword)
    assert not looks_secret(keyword, "hunter2")


@pytest.mark.parametrize(
    "value", ["", "  ", "none", "Bearer", "basic", "${GITHUB_TOKEN}", "<token>"]
)
def test_empty_and_placeholder_values_are_not_secret_even_under_a_credential_keyword(
    value: str,
) -> None:
    assert not looks_secret("token", value)


@pytest.mark.parametrize(
    "value",
    [
        "sk-proj-Abc123def456ghi789jkl012",
        "sk-ant-api03-abcdefghijklmnop",
        "sk_live_51Habcdefghijklmnop",
        "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
        "gho_16C7e42F292c6912E7710c838347Ae178B4a",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
        "glpat-abcdefghij0123456789",
        "xoxb-123456789012-abcdefghijkl",
        "xoxp-1234-5678-abcdefghij",
        "AKIAIOSFODNN7EXAMPLE",
        "AIzaSyA1234567890abcdefghijklmnopqrstuv",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "Bearer 3f9a1c7e5b2d8f40a6c1",
        "bearer abcdefghijklmnopqrstu",
        "Basic dXNlcjpwYXNzd29yZA==",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
        "-----BEGIN OPENSSH PRIVATE KEY-----",
        "https://user:hunter2@db.example.com/app",
        "postgresql://app:s3cr3t@db:5432/app",
        "https://x-access-token:abc@github.com/o/r.git",
        "Server=db;User Id=sa;Password=hunter2;",
        "https://api.example.com/v1/items?page=2&api_key=abc123",
        "q8Zt1LmX4vR7yN2kP9sJ3wB6",
        "h7Xq2Lm9Rt/4vBn8Kp3Zs6Wd1Yc5Fg0Jk+Ue2Ti9",
        "use token ghp_16C7e42F292c6912E7710c838347Ae178B4a here",
    ],
)
def test_credential_shaped_values_are_secret_under_any_keyword(value: str) -> None:
    assert looks_secret("value", value)
    assert looks_secret("", value)


@pytest.mark.parametrize(
    "value",
    [
        "/home/ada/reports/2024-06-01/summary.json",
        "C:\\Users\\Ada\\Documents\\report2024.docx",
        "s3://my-bucket-2024/data/part-00001.parquet",
        "https://api.github.com/repos/octocat/hello-world/issues?page=2",
        "https://example.com/a/b?x=1&y=2",
        "postgresql://db.internal:5432/app2024",
        "ssh://git@github.com/octocat/hello-world.git",
        "The quick brown fox jumps over 13 lazy dogs",
        "Please use a Bearer token in the header",
        "2024-01-15T10:30:00Z",
        "2024-01-15T10:30:00.123456+02:00",
        "550e8400-e29b-41d4-a716-446655440000",
        "d41d8cd98f00b204e9800998ecf8427e",
        "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "ProjectAlphaReport2024Q3Final",
        "getUserAccountDetails2",
        "XMLHttpRequest2Handler",
        "my_bucket_2024_backup",
        "Q3_2024_Revenue_Report_v2_FINAL",
        "claude-3-5-sonnet-20241022",
        "gpt-4o-mini-2024-07-18",
        "feature/JIRA-1234-add-login",
        "v1.2.3-rc.4+build.5678",
        "projects/my-project-123/locations/us-central1/models/m1",
        "arn:aws:s3:::my-bucket-2024/key1",
        "user.name+tag2024@example-company.com",
        "ip-10-0-12-34.ec2.internal",
        "sk-learn",
        "short1",
        "",
        "application/x-sv4cpio",
        "PythonTestSuite/3.100",
        "N18x509_attributes_st4DOLLAR_13E",
        "0x1.921fb54442d18p+1",
        "LOGINDISABLED AUTH=CRAM-MD5",
        "shlex: token=EOF",
        "Rebuild a proxy owned by manager, token=%r",
        "Use AUTH=<mechanism>.",
        '<assembly publicKeyToken="1fc8b3b9a1e18e3b" version="9.0.21022.8">',
    ],
)
def test_ordinary_values_are_not_secret(value: str) -> None:
    assert not looks_secret("value", value)


@pytest.mark.parametrize(
    ("keyword", "value"),
    [
        ("SERVER_AUTH", "1.3.6.1.5.5.7.3.1"),
        ("MODULE_PWD_STATE", "yes"),
        (
            "public_key",
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl",
        ),
        ("publicKeyToken", "1fc8b3b9a1e18e3b"),
        ("token", "%(token)s"),
        ("password", "{password}"),
    ],
)
def test_credential_looking_keywords_with_harmless_values(keyword: str, value: str) -> None:
    assert not looks_secret(keyword, value)


@pytest.mark.parametrize(
    "value", [12345678901234567890, 3.5, True, None, b"ghp_16C7e42F292c6912E7"]
)
def test_only_strings_are_secrets(value: object) -> None:
    assert not looks_secret("password", value)


def test_containers_are_searched_with_their_keys_as_keywords() -> None:
    assert looks_secret("headers", {"Authorization": "Bearer 3f9a1c7e5b2d8f40a6c1"})
    assert looks_secret("headers", {"X-Api-Key": "abc"})
    assert looks_secret("config", {"db": {"password": "hunter2"}})
    assert looks_secret("auth", ["ada", "hunter2"])
    assert looks_secret("auth", ("ada", "hunter2"))
    assert looks_secret("items", ["a", "ghp_16C7e42F292c6912E7710c838347Ae178B4a"])
    assert not looks_secret("headers", {"Content-Type": "application/json", "Accept": "*/*"})
    assert not looks_secret("items", [1, "two", {"three": [3.0, None]}])


def test_a_deeply_nested_value_does_not_overflow_the_stack() -> None:
    value: object = "hunter2"
    for _ in range(20_000):
        value = [value]
    assert not looks_secret("values", value)
    assert looks_secret("password", value)


@pytest.mark.parametrize(
    ("keyword", "words"),
    [
        ("xApiKey", ["x", "api", "key"]),
        ("APIKey", ["api", "key"]),
        ("X-Auth-Token", ["x", "auth", "token"]),
        ("OAuthToken", ["o", "auth", "token"]),
        ("aws.secret_access_key", ["aws", "secret", "access", "key"]),
        ("", []),
    ],
)
def test_keyword_words(keyword: str, words: list[str]) -> None:
    assert keyword_words(keyword) == words


def test_random_tokens_are_flagged_by_entropy_most_of_the_time() -> None:
    rng = random.Random(1234)
    alphabet = string.ascii_letters + string.digits
    tokens = ["".join(rng.choice(alphabet) for _ in range(32)) for _ in range(500)]
    assert sum(looks_random(token) for token in tokens) >= 490


def test_hex_ids_with_a_short_prefix_are_ids_not_secrets() -> None:
    rng = random.Random(99)
    ids = [
        f"{prefix}{rng.getrandbits(128):032x}"
        for prefix in ("wf_", "wf_c_", "req_", "trace_id_")
        for _ in range(500)
    ]
    assert [value for value in ids if looks_random(value)] == []
    # a base62 token keeps looking random whatever its prefix
    alphabet = string.ascii_letters + string.digits
    tokens = ["sk_live_" + "".join(rng.choice(alphabet) for _ in range(28)) for _ in range(100)]
    assert sum(looks_random(token) for token in tokens) >= 95


@pytest.mark.parametrize(
    ("keyword", "value"),
    [
        ("x", "eyJ" * 33_000),
        ("x", "a" * 100_000),
        ("A" * 100_000, "v"),
        ("x", "-----BEGIN" * 10_000),
        ("x", "a://b:" + "c" * 100_000),
        ("x", " bearer" * 14_000),
        ("x", "a=b " * 25_000),
        ("x", "0x" + "1" * 100_000),
        ("x", "a:" * 50_000 + "@"),
    ],
)
def test_hostile_values_are_checked_in_linear_time(keyword: str, value: str) -> None:
    started = time.perf_counter()
    looks_secret(keyword, value)
    assert time.perf_counter() - started < 1.0  # quadratic patterns would take many seconds
