"""``${VAR}`` expansion: the grammar, its escape, and hostile text."""

from __future__ import annotations

import pytest

from pml.config_expand import ExpansionError, UnsetVariable, expand

ENV = {"TOKEN": "t0k", "EMPTY": "", "HOST": "db.local", "_X1": "under"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("plain text", "plain text"),
        ("${TOKEN}", "t0k"),
        ("Bearer ${TOKEN}", "Bearer t0k"),
        ("${HOST}:${TOKEN}/${HOST}", "db.local:t0k/db.local"),
        ("${_X1}", "under"),
        ("${EMPTY}", ""),  # set but empty: empty, no error
        ("${MISSING:-fallback}", "fallback"),
        ("${EMPTY:-fallback}", "fallback"),  # :- also covers empty, as in the shell
        ("${TOKEN:-fallback}", "t0k"),
        ("${MISSING:-}", ""),
        ("${MISSING:-a:-b}", "a:-b"),  # the default is literal up to the first }
        ("${MISSING:-http://x/y?z=1}", "http://x/y?z=1"),
        ("$${TOKEN}", "${TOKEN}"),  # the escape of a literal ${
        ("$$${TOKEN}", "$${TOKEN}"),  # a "$", then the escape
        ("$HOME and $$ and 5$", "$HOME and $$ and 5$"),  # only ${ is special
        ("{TOKEN}", "{TOKEN}"),
        ("}", "}"),
        ("${TOKEN}}", "t0k}"),
    ],
)
def test_references_expand_and_everything_else_stays(text: str, expected: str) -> None:
    assert expand(text, ENV) == expected


def test_a_value_is_inserted_as_is_and_never_expanded_again() -> None:
    environ = {"A": "${B}", "B": "secret", "C": "$${D}", "E": "`rm -rf /`; $(id)"}
    assert expand("${A}", environ) == "${B}"
    assert expand("${C}", environ) == "$${D}"
    assert expand("x ${E} y", environ) == "x `rm -rf /`; $(id) y"


def test_an_unset_variable_without_default_is_an_error_naming_it() -> None:
    with pytest.raises(UnsetVariable) as caught:
        expand("Bearer ${API_TOKEN}", ENV)
    assert caught.value.name == "API_TOKEN"
    assert "API_TOKEN is not set" in str(caught.value)
    assert "${API_TOKEN:-value}" in str(caught.value)


def test_unset_placeholder_checks_shape_without_the_environment() -> None:
    assert expand("${NOPE}/mcp", {}, unset="https://x") == "https://x/mcp"
    assert expand("${NOPE:-d}", {}, unset="https://x") == "d"
    with pytest.raises(ExpansionError):
        expand("${NOPE", {}, unset="https://x")  # syntax is still checked


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("${TOKEN", "unterminated '${' at character 1"),
        ("abc ${", "unterminated '${' at character 5"),
        ("${A:-${B}}", "nested references are not supported"),
        ("${A:-x${B}}", "nested references are not supported"),
        ("${}", "is not a reference PML expands"),
        ("${1ABC}", "is not a reference PML expands"),
        ("${A B}", "is not a reference PML expands"),
        ("${A-default}", "is not a reference PML expands"),
        ("${A:?err}", "is not a reference PML expands"),
        ("${A:=x}", "is not a reference PML expands"),
        ("${ÄPI_KEY}", "is not a reference PML expands"),
        ("${TOKEN\u202e}", "is not a reference PML expands"),
        ("${TO\x00KEN}", "is not a reference PML expands"),
        ("${$(id)}", "is not a reference PML expands"),
        ("${;rm -rf /}", "is not a reference PML expands"),
    ],
)
def test_malformed_references_are_one_line_errors(text: str, expected: str) -> None:
    with pytest.raises(ExpansionError) as caught:
        expand(text, ENV)
    message = str(caught.value)
    assert expected in message
    assert "\n" not in message
    assert "\x00" not in message
    assert "\u202e" not in message


def test_a_huge_reference_name_is_refused_with_a_short_message() -> None:
    name = "A" * 100_000 + "!"
    with pytest.raises(ExpansionError) as caught:
        expand("${" + name + "}", ENV)
    assert len(str(caught.value)) < 300
    assert "100004 characters" in str(caught.value)


def test_huge_text_with_many_references_expands_in_full() -> None:
    text = "${TOKEN}-" * 50_000 + "$${" * 1000
    expanded = expand(text, ENV)
    assert expanded == "t0k-" * 50_000 + "${" * 1000


def test_a_huge_value_and_unicode_values_pass_through() -> None:
    environ = {"BIG": "x" * 1_000_000, "UNI": "météo 時間 🙂"}
    assert expand("${BIG}", environ) == "x" * 1_000_000
    assert expand("<${UNI}>", environ) == "<météo 時間 🙂>"


def test_names_are_case_sensitive() -> None:
    with pytest.raises(UnsetVariable):
        expand("${token}", ENV)
