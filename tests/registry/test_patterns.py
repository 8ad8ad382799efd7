"""Display-name globs as SQL LIKE patterns (SPEC §6.5 ``cap_list {pattern}``)."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pml.errors import InvalidInput
from pml.registry.patterns import LIKE_ESCAPE, glob_to_like


@pytest.fixture(scope="module")
def db() -> Iterator[sqlite3.Connection]:
    connection = sqlite3.connect(":memory:")
    connection.execute("PRAGMA case_sensitive_like=ON")
    yield connection
    connection.close()


def glob_matches(pattern: str, name: str) -> bool:
    """fnmatchcase restricted to ``*`` and ``?``: every other character is literal."""
    regex = "".join(
        ".*" if char == "*" else "." if char == "?" else re.escape(char) for char in pattern
    )
    return re.fullmatch(regex, name, flags=re.DOTALL) is not None


def like_matches(db: sqlite3.Connection, like: str, name: str) -> bool:
    row = db.execute("SELECT ? LIKE ? ESCAPE ?", (name, like, LIKE_ESCAPE)).fetchone()
    return bool(row[0])


@pytest.mark.parametrize(
    ("pattern", "like"),
    [
        ("fs:*", "fs:%"),
        ("a_b*", "a\\_b%"),
        ("100%", "100\\%"),
        ("a?c", "a_c"),
        ("back\\slash", "back\\\\slash"),
        ("[ab]*", "[ab]%"),
        ("", ""),
        ("**", "%%"),
        ("'; DROP TABLE capability_records; --", "'; DROP TABLE capability\\_records; --"),
    ],
)
def test_glob_to_like_translates_wildcards_and_escapes_literals(pattern: str, like: str) -> None:
    assert glob_to_like(pattern) == like


@pytest.mark.parametrize(
    ("pattern", "name", "matches"),
    [
        ("fs:*", "fs:read_json", True),
        ("fs:*", "fsx:read", False),
        ("a_b*", "a_b_c", True),
        ("a_b*", "axb", False),
        ("100%", "100%", True),
        ("100%", "1000", False),
        ("?", "а", True),  # Cyrillic 'а' is one character
        ("a", "а", False),  # ... and not a Latin 'a'
        ("FS:*", "fs:read", False),
        ("x" * 256, "x" * 256, True),
    ],
)
def test_like_patterns_match_in_sqlite_as_the_glob_does(
    db: sqlite3.Connection, pattern: str, name: str, matches: bool
) -> None:
    assert like_matches(db, glob_to_like(pattern), name) is matches
    assert glob_matches(pattern, name) is matches


ALPHABET = st.sampled_from(list("ab_%\\*?[]:-'а"))


@given(st.text(ALPHABET, max_size=8), st.text(ALPHABET.filter(lambda c: c not in "*?"), max_size=8))
def test_like_pattern_matches_exactly_what_the_glob_matches(pattern: str, name: str) -> None:
    connection = sqlite3.connect(":memory:")
    try:
        connection.execute("PRAGMA case_sensitive_like=ON")
        assert like_matches(connection, glob_to_like(pattern), name) == glob_matches(pattern, name)
    finally:
        connection.close()


@given(st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12))
def test_a_glob_without_wildcards_matches_only_itself(name: str) -> None:
    literal = name.replace("*", "").replace("?", "")
    connection = sqlite3.connect(":memory:")
    try:
        connection.execute("PRAGMA case_sensitive_like=ON")
        assert like_matches(connection, glob_to_like(literal), literal)
        assert not like_matches(connection, glob_to_like(literal), literal + "x")
    finally:
        connection.close()


def test_a_256_character_pattern_is_accepted() -> None:
    assert glob_to_like("*" * 256) == "%" * 256


@pytest.mark.parametrize("pattern", ["x" * 257, "*" * 10_000, None, 42, ["fs:*"]])
def test_long_or_non_string_patterns_are_invalid_input_naming_the_field(pattern: Any) -> None:
    with pytest.raises(InvalidInput) as info:
        glob_to_like(pattern)
    assert info.value.data == {"field": "pattern"}
    assert "pattern" in info.value.message
