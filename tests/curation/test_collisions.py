"""Collisions: names, aliases and tool names in use get a suffix; owners keep their own names."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pml.curation.collisions import MAX_NAME, MAX_SUFFIX, NameBook
from pml.registry.names import split_display_name, tool_name_for

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


def first_free_by_trying_every_suffix(
    book: NameBook, namespace: str, action: str, owner: str
) -> tuple[str, int] | None:
    """The rule, as plainly as it can be written: the first free of base, base_2 … base_999."""
    base = f"{namespace}:{action}"[:MAX_NAME]
    for k in range(1, MAX_SUFFIX + 1):
        suffix = "" if k == 1 else f"_{k}"
        name = base[: MAX_NAME - len(suffix)] + suffix
        if book.is_free(name, owner):
            return name, k
    return None


def test_a_capability_gets_back_its_own_suffixed_name_after_others_asked() -> None:
    book = NameBook({"fs:read_json": "E", "fs:read_json_2": A, "fs:read_json_3": B}, {})
    assert book.free_variant("fs", "read_json", "E") == ("fs:read_json", 1)
    assert book.free_variant("fs", "read_json", B) == ("fs:read_json_3", 3)
    book.reserve("fs:read_json_4", "C")
    assert book.free_variant("fs", "read_json", "D") == ("fs:read_json_5", 5)
    assert book.free_variant("fs", "read_json", A) == ("fs:read_json_2", 2)
    assert book.free_variant("fs", "read_json", "C") == ("fs:read_json_4", 4)


def test_two_hundred_capabilities_wanting_one_name_each_get_the_next_suffix() -> None:
    book = NameBook({}, {})
    given = []
    for n in range(200):
        found = book.free_variant("filesystem", "read_text_file", f"owner-{n}")
        assert found is not None
        book.reserve(found[0], f"owner-{n}")
        given.append(found[1])
    assert given == list(range(1, 201))


def test_when_every_suffix_is_taken_there_is_no_variant() -> None:
    taken = {"fs:x": B} | {f"fs:x_{k}": B for k in range(2, MAX_SUFFIX + 1)}
    book = NameBook(taken, {})
    assert book.free_variant("fs", "x", A) is None
    assert book.free_variant("fs", "x", A) is None  # and asking again is cheap and the same
    assert book.free_variant("fs", "x", B) == ("fs:x", 1)


_OWNERS = st.sampled_from(["A", "B", "C", "D"])
_BASES = st.sampled_from([("fs", "read"), ("fs", "x" * 62), ("git", "log"), ("fs", "read:x")])


@st.composite
def _held_names(draw: st.DrawFn) -> tuple[dict[str, str], dict[str, str]]:
    names: dict[str, str] = {}
    tool_names: dict[str, str] = {}
    for _ in range(draw(st.integers(0, 30))):
        namespace, action = draw(_BASES)
        k = draw(st.integers(1, 12))
        suffix = "" if k == 1 else f"_{k}"
        name = f"{namespace}:{action}"[: MAX_NAME - len(suffix)] + suffix
        owner = draw(_OWNERS)
        if draw(st.booleans()):
            names[name] = owner
        else:
            tool_names[tool_name_for(*split_display_name(name, "code"))] = owner
    return names, tool_names


@given(
    held=_held_names(),
    asks=st.lists(st.tuples(_BASES, _OWNERS, st.booleans()), max_size=40),
)
@settings(max_examples=300, deadline=None)
def test_the_fast_search_answers_what_trying_every_suffix_answers(
    held: tuple[dict[str, str], dict[str, str]],
    asks: list[tuple[tuple[str, str], str, bool]],
) -> None:
    book, reference = NameBook(*held), NameBook(*held)
    for (namespace, action), owner, keep in asks:
        expected = first_free_by_trying_every_suffix(reference, namespace, action, owner)
        assert book.free_variant(namespace, action, owner) == expected
        if keep and expected is not None:
            book.reserve(expected[0], owner)
            reference.reserve(expected[0], owner)
