"""FQDN parsing, formatting and hash-length candidates (SPEC §6.1)."""

from __future__ import annotations

import re
from itertools import islice
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pml.errors import InvalidFqdn, InvalidInput
from pml.registry.fqdn import FQDN_COMPONENT, Fqdn, fqdn_candidates, is_fqdn

EXPECTED = "Expected <org>.<project>.<namespace>.<action>.<hash>"

components = st.from_regex(r"\A[A-Za-z0-9_-]{1,64}\Z")
hashes = st.from_regex(r"\A[0-9a-f]{4,64}\Z")


def test_parse_splits_the_five_components() -> None:
    fqdn = Fqdn.parse("local.default.fs.read_json.a7f3")
    assert fqdn == Fqdn("local", "default", "fs", "read_json", "a7f3")
    assert (fqdn.org, fqdn.project, fqdn.namespace, fqdn.action, fqdn.hash) == (
        "local",
        "default",
        "fs",
        "read_json",
        "a7f3",
    )


def test_str_joins_the_components_with_dots() -> None:
    assert str(Fqdn("acme", "web-app", "code", "exec_a7f3b2c1", "a7f3b")) == (
        "acme.web-app.code.exec_a7f3b2c1.a7f3b"
    )


def test_fqdn_is_an_immutable_hashable_value() -> None:
    fqdn = Fqdn.parse("local.default.fs.read_json.a7f3")
    with pytest.raises(AttributeError):
        fqdn.org = "other"  # type: ignore[misc]
    assert {fqdn, Fqdn.parse("local.default.fs.read_json.a7f3")} == {fqdn}


@given(components, components, components, components, hashes)
def test_generated_fqdns_round_trip_through_str_and_parse(
    org: str, project: str, namespace: str, action: str, code_hash: str
) -> None:
    fqdn = Fqdn(org, project, namespace, action, code_hash)
    assert Fqdn.parse(str(fqdn)) == fqdn
    assert is_fqdn(str(fqdn))


@given(st.text(max_size=80))
def test_parse_accepts_exactly_the_documented_grammar(value: str) -> None:
    parts = value.split(".")
    well_formed = (
        len(parts) == 5
        and all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", part) for part in parts[:4])
        and re.fullmatch(r"[0-9a-f]{4,64}", parts[4]) is not None
    )
    assert is_fqdn(value) is well_formed
    if well_formed:
        assert str(Fqdn.parse(value)) == value
    else:
        with pytest.raises(InvalidFqdn):
            Fqdn.parse(value)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "local.default.fs.read_json",
        "local.default.fs.read_json.a7f3.extra",
        "local.default.fs.read_json.A7F3",
        "local.default.fs.read_json.a7f",
        "local.default.fs.read_json.xyz1",
        "local.default.fs.read_json." + "a" * 65,
        "local..fs.read_json.a7f3",
        "local.default.fs.read json.a7f3",
        "local.default.fs.read:json.a7f3",
        "local.default.fs.read_json.a7f3\n",
        "local.default.fs.read_json.a7f3 ",
        "lоcal.default.fs.read_json.a7f3",  # Cyrillic 'о'
        "local.default.fs.' OR 1=1 --.a7f3",
        "local.default.fs.read%.a7f3",
        "local.default.fs." + "x" * 65 + ".a7f3",
    ],
)
def test_malformed_fqdns_are_rejected(value: str) -> None:
    with pytest.raises(InvalidFqdn) as info:
        Fqdn.parse(value)
    assert info.value.message == f'Invalid FQDN format: "{value}". {EXPECTED}'
    assert not is_fqdn(value)


def test_invalid_fqdn_is_an_invalid_input_error() -> None:
    with pytest.raises(InvalidInput) as info:
        Fqdn.parse("nope")
    assert info.value.to_dict() == {
        "code": "INVALID_INPUT",
        "message": f'Invalid FQDN format: "nope". {EXPECTED}',
    }


def test_long_values_are_truncated_to_100_characters_in_the_message() -> None:
    value = "a." * 5000
    with pytest.raises(InvalidFqdn) as info:
        Fqdn.parse(value)
    assert info.value.message == f'Invalid FQDN format: "{value[:100]}…". {EXPECTED}'


def test_a_100_character_value_is_shown_whole() -> None:
    value = "b" * 100
    with pytest.raises(InvalidFqdn) as info:
        Fqdn.parse(value)
    assert f'"{value}"' in info.value.message
    assert "…" not in info.value.message


@pytest.mark.parametrize("value", [None, 42, ["local", "default"], b"local.default.fs.x.a7f3"])
def test_non_string_values_are_rejected_and_shown_with_repr(value: Any) -> None:
    with pytest.raises(InvalidFqdn) as info:
        Fqdn.parse(value)
    assert info.value.message == f'Invalid FQDN format: "{value!r}". {EXPECTED}'
    assert not is_fqdn(value)


def test_constructing_an_fqdn_with_a_bad_component_raises() -> None:
    with pytest.raises(InvalidFqdn):
        Fqdn("local", "default", "fs", "read json", "a7f3")
    with pytest.raises(InvalidFqdn):
        Fqdn("local", "default", "fs", "read", "A7F3")
    with pytest.raises(InvalidFqdn):
        Fqdn("local", "default", "fs", 5, "a7f3")  # type: ignore[arg-type]


def test_component_pattern_rejects_a_trailing_newline_with_fullmatch() -> None:
    assert FQDN_COMPONENT.fullmatch("abc") is not None
    assert FQDN_COMPONENT.fullmatch("abc\n") is None


def test_candidates_start_at_four_hex_characters_and_grow_by_one() -> None:
    code_hash = "a7f3b2c1d4"
    candidates = list(fqdn_candidates("local", "default", "fs", "read", code_hash))
    assert [c.hash for c in candidates] == [code_hash[:n] for n in range(4, len(code_hash) + 1)]
    assert str(candidates[0]) == "local.default.fs.read.a7f3"
    assert all(c.action == "read" and c.namespace == "fs" for c in candidates)


def test_candidates_end_with_the_full_sha256_hash() -> None:
    code_hash = "0123456789abcdef" * 4
    candidates = list(fqdn_candidates("o", "p", "code", "exec_01234567", code_hash))
    assert len(candidates) == 61
    assert candidates[-1].hash == code_hash


def test_the_first_unused_candidate_skips_a_colliding_four_hex_hash() -> None:
    used = {"local.default.fs.read.a7f3"}
    chosen = next(
        c for c in fqdn_candidates("local", "default", "fs", "read", "a7f3b2") if str(c) not in used
    )
    assert str(chosen) == "local.default.fs.read.a7f3b"


@given(components, components, components, components, hashes)
def test_every_candidate_round_trips(
    org: str, project: str, namespace: str, action: str, code_hash: str
) -> None:
    for candidate in islice(fqdn_candidates(org, project, namespace, action, code_hash), 3):
        assert Fqdn.parse(str(candidate)) == candidate
        assert code_hash.startswith(candidate.hash)


@pytest.mark.parametrize(
    ("org", "project", "namespace", "action", "code_hash"),
    [
        ("local", "default", "fs", "read", "a7f"),
        ("local", "default", "fs", "read", "A7F3B2"),
        ("local", "default", "fs", "read", "g7f3b2"),
        ("local", "default", "fs", "read", ""),
        ("local", "default", "fs", "read", "a" * 65),
        ("", "default", "fs", "read", "a7f3"),
        ("local", "def.ault", "fs", "read", "a7f3"),
        ("local", "default", "f s", "read", "a7f3"),
        ("local", "default", "fs", "x" * 65, "a7f3"),
        ("local", "default", "fs", "drop table;", "a7f3"),
        ("local", "default", "fs", "rеad", "a7f3"),  # Cyrillic 'е'
    ],
)
def test_candidates_validate_components_and_hash_before_yielding(
    org: str, project: str, namespace: str, action: str, code_hash: str
) -> None:
    with pytest.raises(InvalidFqdn):
        fqdn_candidates(org, project, namespace, action, code_hash)
