"""Display names, auto names, namespaces and tool references (SPEC §6.1, §6.2, §8)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pml.analysis.secret_text import holds_token
from pml.errors import InvalidInput, InvalidName
from pml.registry.fqdn import FQDN_COMPONENT
from pml.registry.names import (
    NAME_PATTERN,
    auto_action,
    auto_display_name,
    namespace_for_server,
    namespace_from_tools,
    server_of,
    split_display_name,
    tool_name_for,
    validate_name,
)

SUFFIX = "Must be alphanumeric with underscores, hyphens, and colons only."
CODE_HASH = "a7f3b2c1d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d"
VALID_NAME = re.compile(r"[A-Za-z0-9_:-]{1,64}")

valid_names = st.from_regex(r"\A[A-Za-z0-9_:-]{1,64}\Z")


@pytest.mark.parametrize(
    "name", ["fs:read_json", "my-reader", "a", "x" * 64, "A:b:c", "unnamed_a7f3b2c1", "::", "0"]
)
def test_valid_display_names_are_returned_unchanged(name: str) -> None:
    assert validate_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        "x" * 65,
        "my reader",
        " fs:read",
        "fs:read\n",
        "fs:read\t",
        "100%",
        "fs.read",
        "it's",
        '"quoted"',
        "'; DROP TABLE capability_records; --",
        "a' OR '1'='1",
        "rеader",  # Cyrillic 'е'
        "аbc",  # Cyrillic 'а'
        "ｆｓ",  # fullwidth letters
        "٣",  # Arabic-Indic digit
        "fs/read",
        "fs\x00read",
    ],
)
def test_invalid_display_names_are_rejected_with_the_spec_message(name: str) -> None:
    with pytest.raises(InvalidName) as info:
        validate_name(name)
    assert info.value.message == f'Invalid capability name: "{name}". {SUFFIX}'
    assert info.value.code == "INVALID_NAME"


def test_a_10000_character_name_is_shown_truncated_in_the_message() -> None:
    name = "y" * 10_000
    with pytest.raises(InvalidName) as info:
        validate_name(name)
    assert info.value.message == f'Invalid capability name: "{"y" * 100}…". {SUFFIX}'


@pytest.mark.parametrize("name", [None, 42, ["fs:read"], 3.5])
def test_non_string_names_are_rejected_and_shown_with_repr(name: Any) -> None:
    with pytest.raises(InvalidName) as info:
        validate_name(name)
    assert info.value.message == f'Invalid capability name: "{name!r}". {SUFFIX}'


@given(valid_names)
def test_every_name_matching_the_pattern_is_accepted_unless_it_looks_like_a_secret(
    name: str,
) -> None:
    if holds_token(name):
        with pytest.raises(InvalidName, match="looks like a secret"):
            validate_name(name)
    else:
        assert validate_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
        "fs:AKIAQ3EGRTXZ7LMN4PQA",
        "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",
        "deploy:xoxb-2048-4096-q8Zt1LmX4vR7yN2kP9sJ",
        "q8Zt1LmX4vR7yN2kP9sJ3wB6",
    ],
)
def test_a_name_that_looks_like_a_secret_is_refused_without_quoting_it(name: str) -> None:
    with pytest.raises(InvalidName) as info:
        validate_name(name)
    assert "looks like a secret" in info.value.message
    assert name.split(":")[-1] not in info.value.message


@pytest.mark.parametrize(
    "name",
    [
        *("unnamed_a7f3b2c1", "fs:read_json", "report_2024_q3_summary", "task_8f3a9c2e1b7d4f60"),
        *("token:github", "password:rotate", "auth:login"),
    ],
)
def test_ordinary_names_with_digits_and_hex_are_not_taken_for_secrets(name: str) -> None:
    assert validate_name(name) == name


@given(st.text(max_size=70))
def test_validation_agrees_with_the_ascii_pattern(name: str) -> None:
    expected = VALID_NAME.fullmatch(name) is not None and not holds_token(name)
    try:
        validate_name(name)
    except InvalidName:
        accepted = False
    else:
        accepted = True
    assert accepted == expected
    if not holds_token(name):
        assert (NAME_PATTERN.fullmatch(name) is not None) == expected


def test_auto_names_use_the_first_eight_hex_characters() -> None:
    assert auto_display_name(CODE_HASH) == "unnamed_a7f3b2c1"
    assert auto_action(CODE_HASH) == "exec_a7f3b2c1"
    assert validate_name(auto_display_name(CODE_HASH)) == "unnamed_a7f3b2c1"


@pytest.mark.parametrize("code_hash", ["", "a7f3b2c", "A7F3B2C1", "xyz12345", 12345678, None])
def test_auto_names_reject_anything_but_a_lowercase_hex_hash(code_hash: Any) -> None:
    with pytest.raises(InvalidInput):
        auto_display_name(code_hash)
    with pytest.raises(InvalidInput):
        auto_action(code_hash)


@pytest.mark.parametrize(
    ("server", "namespace"),
    [
        ("filesystem", "fs"),
        ("pml", "code"),  # PML's own tools (mcp.pml.*) give no namespace of their own
        ("shell", "shell"),
        ("sqlite", "sqlite"),
        ("my-server_2", "my-server_2"),
        ("my.server", "my_server"),
        ("a b..c", "a_b__c"),
        ("gïthub", "g_thub"),
        ("", "code"),
        ("'; DROP TABLE x; --", "___DROP_TABLE_x__--"),
    ],
)
def test_namespace_for_server_shortens_known_servers_and_sanitises_others(
    server: str, namespace: str
) -> None:
    assert namespace_for_server(server) == namespace


def test_namespace_for_a_very_long_server_is_truncated_to_64_characters() -> None:
    assert namespace_for_server("s" * 10_000) == "s" * 64


@given(st.text(max_size=100))
def test_namespace_for_any_server_is_a_valid_fqdn_component(server: str) -> None:
    assert FQDN_COMPONENT.fullmatch(namespace_for_server(server)) is not None


@pytest.mark.parametrize(
    ("tools", "namespace"),
    [
        (["filesystem:read_file", "memory:store"], "fs"),
        (["memory:store", "filesystem:read_file"], "memory"),
        (["github.create_issue"], "github"),
        (["mcp__data__transform"], "data"),
        (["local.default.api.fetch_page.a7f3"], "api"),
        ([], "code"),
        (["no_separator"], "code"),
        ([":orphan_tool"], "code"),
    ],
)
def test_namespace_from_tools_uses_the_first_tools_server(tools: list[str], namespace: str) -> None:
    assert namespace_from_tools(tools) == namespace


@pytest.mark.parametrize(
    ("display_name", "expected"),
    [
        ("fs:read_json", ("fs", "read_json")),
        ("summary", ("code", "summary")),
        ("a:b:c", ("a", "b_c")),
        ("a:b::c", ("a", "b__c")),
        (":read", ("code", "read")),
        ("::read", ("code", "_read")),
        ("fs:", ("code", "fs")),
        ("fs::", ("code", "fs")),
    ],
)
def test_split_display_name_gives_namespace_and_action(
    display_name: str, expected: tuple[str, str]
) -> None:
    assert split_display_name(display_name, "code") == expected


@pytest.mark.parametrize("display_name", [":", "::", ":::"])
def test_a_display_name_of_only_colons_names_no_action(display_name: str) -> None:
    with pytest.raises(InvalidName):
        split_display_name(display_name, "code")


@pytest.mark.parametrize("display_name", ["", "fs read", "x" * 65, "'; --", "fs:rеad", 7])
def test_split_display_name_rejects_invalid_names(display_name: Any) -> None:
    with pytest.raises(InvalidName):
        split_display_name(display_name, "code")


@given(valid_names.filter(lambda name: name.strip(":") != "" and not holds_token(name)))
def test_split_display_name_always_gives_valid_fqdn_components(display_name: str) -> None:
    namespace, action = split_display_name(display_name, "code")
    assert FQDN_COMPONENT.fullmatch(namespace) is not None
    assert FQDN_COMPONENT.fullmatch(action) is not None
    assert ":" not in action


def test_tool_name_for_builds_the_mcp_tool_name() -> None:
    assert tool_name_for("fs", "read_json") == "mcp__fs__read_json"
    assert tool_name_for(*split_display_name("data:transform", "fs")) == "mcp__data__transform"


@pytest.mark.parametrize(
    ("tool_ref", "server"),
    [
        ("filesystem:read_file", "filesystem"),
        ("fs:read", "fs"),
        ("memory:store", "memory"),
        ("github.create_issue", "github"),
        ("github__create_issue", "github"),
        ("mcp__code__analyze", "code"),
        ("mcp__fs__read__json", "fs"),
        ("local.default.fs.read_json.a7f3", "fs"),
        ("acme.web.api.fetch.a7f3b2c1", "api"),
        ("a.b.c.d.E7F3", "a"),  # not an FQDN: upper-case hash, read as server.tool
        ("filesystem:read.file", "filesystem"),
        ("my-server:get-sum", "my-server"),
    ],
)
def test_server_of_reads_every_tool_reference_spelling(tool_ref: str, server: str) -> None:
    assert server_of(tool_ref) == server


@pytest.mark.parametrize(
    "tool_ref", ["", "read_file", ":read_file", "filesystem:", "mcp__", ".", "__", "x" * 10_000]
)
def test_server_of_returns_none_when_no_server_can_be_extracted(tool_ref: str) -> None:
    assert server_of(tool_ref) is None


@pytest.mark.parametrize("tool_ref", [None, 42, ["filesystem:read_file"]])
def test_server_of_returns_none_for_non_strings(tool_ref: Any) -> None:
    assert server_of(tool_ref) is None


@given(
    st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True),
    st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True),
    st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True),
)
def test_tool_names_are_always_valid_and_never_collide(
    namespace: str, action: str, other: str
) -> None:
    name = tool_name_for(namespace, action)
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name)
    assert name.startswith("mcp__")
    if other != action:
        assert tool_name_for(namespace, other) != name
    if len(f"mcp__{namespace}__{action}") <= 64:
        assert name == f"mcp__{namespace}__{action}"


def test_a_tool_name_over_64_characters_keeps_a_readable_head_and_a_digest() -> None:
    name = tool_name_for("filesystem_tools", "read_every_json_file_below_a_folder_and_merge_them")
    assert len(name) == 64
    assert name.startswith("mcp__filesystem_tools__read_every_json")
    assert re.fullmatch(r".*_[0-9a-f]{8}", name)
    assert tool_name_for("a", "b" * 70) != tool_name_for("a", "b" * 71)
