"""Collisions: names, aliases and tool names in use get a suffix; owners keep their own names."""

from __future__ import annotations

from pml.curation.collisions import NameBook

A = "acme.web.fs.exec_aaaaaaaa.aaaa"
B = "acme.web.fs.exec_bbbbbbbb.bbbb"


def test_a_free_name_has_no_suffix() -> None:
    assert NameBook({}, {}).free_variant("fs", "read_json", A) == ("fs:read_json", 1)


def test_a_display_name_in_use_gets_the_next_free_suffix() -> None:
    book = NameBook({"fs:read_json": B, "fs:read_json_2": B}, {})

    assert book.free_variant("fs", "read_json", A) == ("fs:read_json_3", 3)


def test_an_alias_in_use_counts_like_a_name() -> None:
    # names_in_use maps aliases like display names; here fs:read_json is B's old name
    book = NameBook({"fs:read_json": B, "fs:json_reader": B}, {"mcp__fs__read_json": B})

    assert book.free_variant("fs", "read_json", A) == ("fs:read_json_2", 2)


def test_the_tool_name_a_name_gives_must_be_free_too() -> None:
    # B is named "read_json" in namespace fs: its tool is mcp__fs__read_json
    book = NameBook({"read_json": B}, {"mcp__fs__read_json": B})

    assert not book.is_free("fs:read_json", A)
    assert book.free_variant("fs", "read_json", A) == ("fs:read_json_2", 2)


def test_a_capability_may_take_its_own_name_or_alias() -> None:
    book = NameBook({"fs:read_json": A}, {"mcp__fs__read_json": A})

    assert book.is_free("fs:read_json", A)
    assert not book.is_free("fs:read_json", B)


def test_reserved_names_are_avoided_by_later_suggestions() -> None:
    book = NameBook({}, {})
    name, _ = book.free_variant("fs", "read_json", A) or ("", 0)
    book.reserve(name, A)

    assert book.free_variant("fs", "read_json", B) == ("fs:read_json_2", 2)


def test_a_suffix_never_makes_a_name_longer_than_64_characters() -> None:
    action = "x" * 60
    book = NameBook({f"fs:{action}"[:64]: B}, {})

    name, k = book.free_variant("fs", action, A) or ("", 0)

    assert (k, len(name)) == (2, 64)
    assert name.endswith("_2")


def test_invalid_names_are_never_free() -> None:
    book = NameBook({}, {})

    assert not book.is_free("fs:read json", A)
    assert not book.is_free("", A)
    assert not book.is_free("a" * 65, A)
