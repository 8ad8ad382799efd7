"""Scrubbing audit events: credentials go, ordinary text stays, hostile input stays bounded."""

from __future__ import annotations

import doctest
import json
import time
from datetime import UTC, datetime
from enum import Enum
from pathlib import PurePosixPath
from typing import Any
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pml.policy import scrub as scrub_module
from pml.policy.scrub import (
    MAX_ITEMS,
    MAX_NODES,
    MAX_STRING,
    MAX_TOTAL_CHARS,
    REDACTED,
    TOO_DEEP,
    scrub,
    scrub_text,
)

JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkFkYSJ9"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
RANDOM = "q8Zt1LmX4vR7yN2kP9sJ3wB6"


def test_the_docstring_examples_hold() -> None:
    result = doctest.testmod(scrub_module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0
    assert result.failed == 0


@pytest.mark.parametrize(
    "key",
    [
        "password",
        "passwd",
        "token",
        "access_token",
        "secret",
        "clientSecret",
        "api_key",
        "apiKey",
        "X-Api-Key",
        "Authorization",
        "cookie",
        "Set-Cookie",
        "credentials",
        "private_key",
    ],
)
def test_values_under_keys_that_name_credentials_are_redacted(key: str) -> None:
    scrubbed = scrub({key: "hunter2-correct-horse", "tool": "fs:read_file"})
    assert scrubbed == {key: REDACTED, "tool": "fs:read_file"}


def test_credential_keys_redact_numbers_and_whole_subtrees_but_keep_placeholders() -> None:
    scrubbed = scrub(
        {
            "password": 123456,
            "pin_password": "4821",
            "credentials": {"user": "ada", "pw": ["a", "b"]},
            "token": "${GITHUB_TOKEN}",
            "auth": True,
            "secret": None,
            "authorization": "Bearer",
        }
    )
    assert scrubbed == {
        "password": REDACTED,
        "pin_password": REDACTED,
        "credentials": {"user": REDACTED, "pw": [REDACTED, REDACTED]},
        "token": "${GITHUB_TOKEN}",
        "auth": True,
        "secret": None,
        "authorization": "Bearer",
    }


def test_keys_that_describe_a_credential_keep_their_values() -> None:
    value = {
        "token_count": 512,
        "token_type": "bearer",
        "password_file": "/etc/app/password.txt",
        "auth_method": "oauth",
        "public_key": "/home/ada/.ssh/id_ed25519.pub",
        "tokens": 12,
    }
    assert scrub(value) == value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Authorization: Bearer 3f9a1c7e5b2d8f40a6c1", "Authorization: Bearer [REDACTED]"),
        (
            "curl -H 'authorization: bearer abc.def-123_456' x",
            "curl -H 'authorization: bearer [REDACTED]' x",
        ),
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "Authorization: Basic [REDACTED]"),
        (f"token {JWT} expired", "token [REDACTED] expired"),
        (f"id_token={JWT}&state=x", "id_token=[REDACTED]&state=x"),
        ("key sk-live-4f9a8b7c6d5e4f3a2b1c0d in env", "key [REDACTED] in env"),
        ("sk_live_4f9a8b7c6d5e4f3a2b1c0d", REDACTED),
        ("gh: ghp_abcdefghijklmnopqrstuvwxyz0123456789", "gh: [REDACTED]"),
        ("aws AKIAIOSFODNN7EXAMPLE region", "aws [REDACTED] region"),
        ("slack xoxb-1234567890-abcdefghij", "slack [REDACTED]"),
        (
            "postgresql://ada:hunter2@db.example.com/app",
            "postgresql://ada:[REDACTED]@db.example.com/app",
        ),
        ("password=hunter2&user=ada", "password=[REDACTED]&user=ada"),
        ('{"api_key": "abcd1234efgh", "user": "ada"}', '{"api_key": "[REDACTED]", "user": "ada"}'),
        ("client_secret: s3cr3t-value", "client_secret: [REDACTED]"),
        (f"value {RANDOM} here", "value [REDACTED] here"),
        (f"/data/{RANDOM}/report.txt", "/data/[REDACTED]/report.txt"),
        (
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nAKCAQ\n-----END RSA PRIVATE KEY-----\nafter",
            "[REDACTED]\nafter",
        ),
        ("-----BEGIN PRIVATE KEY-----\nMIIEow never closed", REDACTED),
    ],
)
def test_secrets_inside_text_are_replaced_and_the_rest_is_kept(text: str, expected: str) -> None:
    assert scrub(text) == expected
    assert scrub_text(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "/home/ada/reports/2024-06-01/summary.json",
        "https://api.example.com/v1/items?page=2&sort=name",
        "https://ada@example.com/repo.git",
        "550e8400-e29b-41d4-a716-446655440000",
        "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "The quick brown fox jumps over the lazy dog; the token count was 12.",
        "Basic authentication is required for this endpoint",
        "Policy denied filesystem:write_file (file_write): policy:file_task",
        "mcp__fs__read_json",
        "config:permissions.deny[3]:filesystem:write_*",
        "acme.webapp.fs.read_json.a7f3",
        "pml_AbCdEfGh",
        'Invalid capability name: "bad!name". Must be alphanumeric',
        "",
        "ünïcödé ✓ 日本語 \u202eevil\u202c",
    ],
)
def test_ordinary_text_is_not_redacted(text: str) -> None:
    assert scrub(text) == text


def test_numbers_booleans_and_null_pass_through() -> None:
    value = {"n": 3, "x": 1.5, "ok": True, "none": None, "neg": -7}
    assert scrub(value) == value


def test_the_input_is_not_modified() -> None:
    value: dict[str, Any] = {"password": "hunter2", "nested": {"token": "abc123"}}
    scrub(value)
    assert value == {"password": "hunter2", "nested": {"token": "abc123"}}


def test_deep_nesting_becomes_a_marker_not_a_recursion_error() -> None:
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(200_000):
        node["a"] = {}
        node = node["a"]
    scrubbed = scrub(deep)
    text = json.dumps(scrubbed)
    assert TOO_DEEP in text
    assert text.count('"a"') < 50


def test_a_cycle_ends_at_the_depth_bound() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    assert TOO_DEEP in json.dumps(scrub(loop))


def test_huge_strings_are_cut_with_a_marker_and_without_half_a_token() -> None:
    big = "word " * 1_000_000  # 5 MB
    scrubbed = scrub(big)
    assert len(scrubbed) < MAX_STRING + 100
    assert scrubbed.startswith("word word")
    assert scrubbed.endswith("more characters]")
    blob = scrub("A1b2" * 1_300_000)  # one 5 MB token: nothing of it is kept
    assert blob.startswith("…[TRUNCATED: 5200000 more characters]")


def test_huge_containers_and_values_stay_bounded() -> None:
    scrubbed = scrub({"items": list(range(1_000_000)), "map": {str(i): i for i in range(100_000)}})
    assert len(scrubbed["items"]) == MAX_ITEMS + 1
    assert scrubbed["items"][-1] == f"[TRUNCATED: {1_000_000 - MAX_ITEMS} more items]"
    assert len(scrubbed["map"]) == MAX_ITEMS + 1
    wide = scrub([["x" * 3000] * 200] * 200)
    assert len(json.dumps(wide)) < MAX_TOTAL_CHARS + MAX_NODES * 16


def test_values_json_cannot_hold_become_json() -> None:
    class Color(Enum):
        RED = "red"

    class Broken:
        def __str__(self) -> str:
            raise RuntimeError("no")

    class Sneaky(str):
        def __str__(self) -> str:
            return "sk-live-4f9a8b7c6d5e4f3a2b1c0d"

    value = {
        1: b"\x00\xff",
        (1, 2): {3},
        "nan": float("nan"),
        "inf": float("-inf"),
        "big": 10**400,
        "when": datetime(2025, 1, 2, tzinfo=UTC),
        "path": PurePosixPath("/tmp/x"),
        "id": UUID("550e8400-e29b-41d4-a716-446655440000"),
        "color": Color.RED,
        "broken": Broken(),
        "sneaky": Sneaky("plain"),
        "frozen": frozenset(),
    }
    scrubbed = scrub(value)
    json.dumps(scrubbed, allow_nan=False)
    assert scrubbed == {
        "1": "[bytes: 2]",
        "(1, 2)": [3],
        "nan": "nan",
        "inf": "-inf",
        "big": "[TRUNCATED: integer too large]",
        "when": "2025-01-02T00:00:00+00:00",
        "path": "/tmp/x",
        "id": "550e8400-e29b-41d4-a716-446655440000",
        "color": "red",
        "broken": "[unprintable Broken]",
        "sneaky": "plain",
        "frozen": [],
    }


def test_nul_and_lone_surrogates_become_replacement_characters_in_keys_and_values() -> None:
    scrubbed = scrub({"k\x00ey": "a\x00b\ud800c"})
    assert scrubbed == {"k\ufffdey": "a\ufffdb\ufffdc"}
    json.dumps(scrubbed, ensure_ascii=False).encode("utf-8")


def test_secrets_in_keys_are_redacted_too() -> None:
    assert scrub({"sk-live-4f9a8b7c6d5e4f3a2b1c0d": 1}) == {REDACTED: 1}


HOSTILE = [
    "Bearer " + " " * 5_000_000,
    "bearer " * 1_000_000,
    "a=" * 2_500_000,
    "eyJ" * 1_700_000,
    "sk-" * 1_700_000,
    "-----BEGIN PRIVATE KEY-----" * 200_000,
    "x://" + "a:" * 2_500_000,
    "password" * 600_000 + "=",
    ("/" + RANDOM) * 200_000,
]


@pytest.mark.parametrize("text", HOSTILE, ids=lambda text: repr(text[:12]))
def test_hostile_strings_are_scrubbed_quickly(text: str) -> None:
    started = time.perf_counter()
    scrubbed = scrub({"t": text, "l": [text] * 50})
    assert time.perf_counter() - started < 2.0
    assert len(json.dumps(scrubbed)) < MAX_TOTAL_CHARS * 2


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text()
    | st.sampled_from([JWT, RANDOM, "Bearer " + RANDOM, "sk-live-4f9a8b7c6d5e4f3a2b1c0d"]),
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(
            st.text(max_size=12) | st.sampled_from(["password", "token", "api_key"]),
            children,
            max_size=5,
        )
    ),
    max_leaves=30,
)


@given(JSON_VALUES)
@settings(max_examples=300, deadline=None)
def test_any_json_value_scrubs_to_storable_json_without_known_secrets(value: Any) -> None:
    scrubbed = scrub(value)
    text = json.dumps(scrubbed, ensure_ascii=False, allow_nan=False)
    text.encode("utf-8")
    assert "\x00" not in text
    for secret in (JWT, RANDOM, "sk-live-4f9a8b7c6d5e4f3a2b1c0d"):
        assert secret not in text
    assert scrub(scrubbed) == scrubbed


def test_texts_found_clean_are_remembered_and_secrets_never_are() -> None:
    scrub_module._KNOWN_CLEAN.clear()
    clean = "read the weekly report from the shared drive"
    secret = "deploy with token ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    assert scrub_text(clean) == clean
    assert clean in scrub_module._KNOWN_CLEAN
    for _ in range(3):  # asked again and again: redacted every time, never remembered
        assert "ghp_" not in scrub_text(secret)
        assert "ghp_" not in scrub({"note": secret})["note"]
    assert secret not in scrub_module._KNOWN_CLEAN
    assert all("ghp_" not in text for text in scrub_module._KNOWN_CLEAN)


def test_the_memory_of_clean_texts_is_bounded() -> None:
    scrub_module._KNOWN_CLEAN.clear()
    limit = scrub_module._CLEAN_MAX_ENTRIES
    for index in range(limit + 500):
        assert scrub_text(f"a plain sentence number {index}") == f"a plain sentence number {index}"
    assert len(scrub_module._KNOWN_CLEAN) == limit
    assert "a plain sentence number 0" not in scrub_module._KNOWN_CLEAN  # the oldest made room
    long_text = "word " * 200  # longer than what is remembered
    assert scrub_text(long_text) == long_text
    assert long_text not in scrub_module._KNOWN_CLEAN
