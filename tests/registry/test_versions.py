"""Version specifiers, version selection and history diffs (SPEC §6.7)."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pml.errors import VersionNotFound
from pml.registry.versions import (
    VersionLike,
    VersionSpec,
    parse_version_spec,
    select_version,
    split_name_and_spec,
    unified_diff,
)

UTC = dt.UTC


@dataclass(frozen=True)
class Ver:
    version: int
    version_tag: str | None
    updated_at: dt.datetime


def at(day: str, clock: str = "12:00:00") -> dt.datetime:
    return dt.datetime.fromisoformat(f"{day}T{clock}+00:00")


HISTORY = [
    Ver(1, "v1.0.0", at("2025-12-01")),
    Ver(2, "v1.1.0", at("2025-12-10")),
    Ver(3, "v2.0.0", at("2025-12-22", "23:59:59.999999")),
    Ver(4, None, at("2025-12-23", "00:00:00")),
]


def test_a_frozen_dataclass_satisfies_the_version_protocol() -> None:
    version: VersionLike = HISTORY[0]
    assert version.version == 1


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("my-reader@v1", ("my-reader", "v1")),
        ("my-reader", ("my-reader", None)),
        ("a@b@v2", ("a@b", "v2")),
        ("my-reader@", ("my-reader", "")),
        ("@v1", ("", "v1")),
        ("", ("", None)),
    ],
)
def test_split_name_and_spec_splits_at_the_last_at_sign(
    ref: str, expected: tuple[str, str | None]
) -> None:
    assert split_name_and_spec(ref) == expected


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (None, VersionSpec("latest", "latest")),
        ("latest", VersionSpec("latest", "latest")),
        ("v1", VersionSpec("major", "v1", major=1)),
        ("3", VersionSpec("major", "3", major=3)),
        ("v0", VersionSpec("major", "v0", major=0)),
        ("v1.2.0", VersionSpec("tag", "v1.2.0", tag="v1.2.0")),
        ("1.2.0", VersionSpec("tag", "1.2.0", tag="v1.2.0")),
        ("v1.02.0", VersionSpec("tag", "v1.02.0", tag="v1.2.0")),
        ("2025-12-22", VersionSpec("date", "2025-12-22", day=dt.date(2025, 12, 22))),
        ("2024-02-29", VersionSpec("date", "2024-02-29", day=dt.date(2024, 2, 29))),
    ],
)
def test_parse_version_spec_accepts_the_four_forms(spec: str | None, expected: VersionSpec) -> None:
    assert parse_version_spec(spec, "my-reader") == expected


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "v",
        "v-1",
        "-1",
        "v1.2",
        "v1.2.3.4",
        "V1",
        "Latest",
        " v1",
        "v1\n",
        "2025-13-45",
        "2025-02-29",
        "0000-01-01",
        "25-12-22",
        "2025/12/22",
        "١",
        "v١",
        "v" + "9" * 10,
        "' OR 1=1 --",
        "%",
        "_",
        "v1.2.0-beta",
    ],
)
def test_anything_else_is_version_not_found(spec: str) -> None:
    with pytest.raises(VersionNotFound) as info:
        parse_version_spec(spec, "my-reader")
    assert info.value.message == f"Version {spec} not found for my-reader"
    assert info.value.code == "VERSION_NOT_FOUND"


def test_a_10000_character_spec_is_truncated_in_the_message() -> None:
    spec = "9" * 10_000
    with pytest.raises(VersionNotFound) as info:
        parse_version_spec(spec, "my-reader")
    assert info.value.message == f"Version {'9' * 100}… not found for my-reader"


@pytest.mark.parametrize("spec", [1, 1.5, ["v1"]])
def test_a_non_string_spec_is_version_not_found(spec: Any) -> None:
    with pytest.raises(VersionNotFound) as info:
        parse_version_spec(spec, "my-reader")
    assert info.value.message == f"Version {spec!r} not found for my-reader"


@given(st.integers(min_value=0, max_value=999_999_999), st.booleans())
def test_any_major_round_trips(major: int, prefixed: bool) -> None:
    raw = f"v{major}" if prefixed else str(major)
    assert parse_version_spec(raw, "x") == VersionSpec("major", raw, major=major)


def is_accepted(spec: str) -> bool:
    """Reference grammar: latest, major, tag, or a real YYYY-MM-DD date."""
    numbers = r"latest|v?[0-9]{1,9}|v?[0-9]{1,9}\.[0-9]{1,9}\.[0-9]{1,9}"
    if re.fullmatch(numbers, spec):
        return True
    if re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", spec) is None:
        return False
    try:
        dt.date(int(spec[:4]), int(spec[5:7]), int(spec[8:]))
    except ValueError:
        return False
    return True


@given(st.one_of(st.text(max_size=30), st.from_regex(r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}\Z")))
def test_any_other_text_is_version_not_found(spec: str) -> None:
    if is_accepted(spec):
        assert parse_version_spec(spec, "x").raw == spec
    else:
        with pytest.raises(VersionNotFound):
            parse_version_spec(spec, "x")


def select(spec: str | None, versions: list[Ver] = HISTORY) -> int:
    return select_version(versions, parse_version_spec(spec, "my-reader"), "my-reader").version


def test_latest_selects_the_highest_version() -> None:
    assert select(None) == 4
    assert select("latest", list(reversed(HISTORY))) == 4


def test_major_uses_the_tag_major_when_tagged_and_the_version_otherwise() -> None:
    assert select("v1") == 2
    assert select("2") == 3
    assert select("v4") == 4


def test_an_exact_tag_selects_that_version_with_or_without_v() -> None:
    assert select("v1.0.0") == 1
    assert select("1.1.0") == 2
    assert select("v01.1.0") == 2


def test_a_stored_tag_without_v_still_matches() -> None:
    versions = [Ver(1, "1.0.0", at("2025-01-01")), Ver(2, "beta", at("2025-01-02"))]
    assert select("v1.0.0", versions) == 1
    assert select("v2", versions) == 2


def test_a_date_selects_the_version_current_at_the_end_of_that_utc_day() -> None:
    assert select("2025-12-22") == 3
    assert select("2025-12-23") == 4
    assert select("2025-12-09") == 1
    assert select("9999-12-31") == 4


def test_a_date_compares_in_utc_whatever_the_offset() -> None:
    # 2025-12-23 01:00 at +02:00 is 2025-12-22 23:00 UTC: still on the 22nd.
    versions = [
        Ver(1, None, at("2025-12-01")),
        Ver(2, None, dt.datetime.fromisoformat("2025-12-23T01:00:00+02:00")),
    ]
    assert select("2025-12-22", versions) == 2


def test_a_naive_timestamp_is_read_as_utc() -> None:
    versions = [Ver(1, None, dt.datetime(2025, 12, 22, 23, 0))]
    assert select("2025-12-22", versions) == 1


@pytest.mark.parametrize("spec", ["v3", "v9.9.9", "2025-11-30", "v0"])
def test_no_matching_version_is_version_not_found(spec: str) -> None:
    with pytest.raises(VersionNotFound) as info:
        select(spec)
    assert info.value.message == f"Version {spec} not found for my-reader"


def test_an_empty_history_is_version_not_found() -> None:
    with pytest.raises(VersionNotFound) as info:
        select(None, [])
    assert info.value.message == "Version latest not found for my-reader"


def test_unified_diff_is_empty_for_equal_texts() -> None:
    assert unified_diff("a\nb\n", "a\nb\n", "v1", "v2") == ""


def test_unified_diff_shows_removed_and_added_lines_with_labels() -> None:
    diff = unified_diff("x = 1\nreturn x\n", "x = 2\nreturn x\n", "v1", "v2")
    assert diff.splitlines() == [
        "--- v1",
        "+++ v2",
        "@@ -1,2 +1,2 @@",
        "-x = 1",
        "+x = 2",
        " return x",
    ]


def test_unified_diff_marks_a_missing_final_newline() -> None:
    diff = unified_diff("return 1", "return 1\n", "v1", "v2")
    assert diff != ""
    assert "\\ No newline at end of file\n" in diff
    assert diff.endswith("+return 1\n")


def test_unified_diff_keeps_carriage_returns_inside_lines() -> None:
    diff = unified_diff("a\rb\n", "a\rc\n", "v1", "v2")
    assert "-a\rb\n" in diff
    assert "+a\rc\n" in diff
