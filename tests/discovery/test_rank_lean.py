"""Lean ``pml_discover`` results: a description cut to its first sentences at a word
boundary, a schema without what no caller needs, scores to 3 decimals, no empty field."""

from __future__ import annotations

import copy
import time
import unicodedata
from datetime import UTC, datetime
from typing import Any

import mcp_types
import numpy as np
import pytest

from pml.discovery.index import Entry, HybridIndex
from pml.discovery.items import capability_item, render, tool_item
from pml.discovery.lean import CUT_MARK, DESCRIPTION_CHARS, lean_schema, short_description
from pml.registry.scope import Scope
from pml.storage.discovery_repo import CapabilityRow
from pml.upstream.base import UpstreamTool

ME = Scope("acme", "web", "erwan")
DIM = 4
FILESYSTEM_READ = (
    "Read the complete contents of a file from the file system as text. Handles various "
    "text encodings and provides detailed error messages if the file cannot be read. Use "
    "this tool when you need to examine the contents of a single file. Only works within "
    "allowed directories."
)
DRAFT_07 = "http://json-schema.org/draft-07/schema#"


def assert_cut_at_a_word_boundary(short: str, original: str) -> None:
    """``short`` is ``original``'s first words (whole ones) and the mark, within the limit."""
    assert short.endswith(CUT_MARK)
    assert len(short) <= DESCRIPTION_CHARS
    kept = short.removesuffix(CUT_MARK)
    flat = " ".join(original.split())
    assert flat.startswith(kept)
    rest = flat[len(kept) :]
    assert rest[:1] in (" ", ",", ";", ":", "-", "—", "–")  # whole words only


# -- descriptions ----------------------------------------------------------------------


def test_a_long_description_keeps_its_first_sentence_whole() -> None:
    assert short_description(FILESYSTEM_READ) == (
        "Read the complete contents of a file from the file system as text."
    )


def test_sentences_that_fit_are_all_kept_and_short_text_is_unchanged() -> None:
    text = "Read a file. Handles encodings. Only works in allowed directories."
    assert short_description(text) == text
    assert short_description("  Echo the arguments  ") == "Echo the arguments"
    assert short_description("") == ""
    assert short_description(" \n\t ") == ""


def test_a_first_sentence_too_long_is_cut_at_a_word_boundary_with_the_mark() -> None:
    text = "Search " + " ".join(f"word{i}" for i in range(100)) + ". Second sentence."
    short = short_description(text)
    assert_cut_at_a_word_boundary(short, text)
    assert "word" in short
    assert not short.removesuffix(CUT_MARK).endswith("wor")
    words = set(text.replace(".", "").split())
    assert all(word in words for word in short.removesuffix(CUT_MARK).split())


def test_a_description_with_no_sentence_end_is_cut_the_same_way() -> None:
    text = "lists every file under a folder recursively " * 20
    short = short_description(text)
    assert_cut_at_a_word_boundary(short, text)
    assert set(short.removesuffix(CUT_MARK).split()) <= set(text.split())


def test_abbreviations_do_not_end_a_sentence_and_wrapped_lines_are_one() -> None:
    text = "Convert units, e.g. miles to km.\nKeeps the\nprecision. " + "More. " * 40
    short = short_description(text)
    assert short.startswith("Convert units, e.g. miles to km. Keeps the precision.")
    assert CUT_MARK not in short


def test_a_title_paragraph_without_a_full_stop_reads_as_a_sentence() -> None:
    text = "Search issues\n\nFinds issues by label. " + "Args: " + "x " * 200
    assert short_description(text) == "Search issues. Finds issues by label."


def test_unicode_descriptions_are_never_cut_inside_a_character() -> None:
    french = "Lit le contenu complet d'un fichier texte, ça gère les accents très bien " * 5
    short = short_description(french)
    assert_cut_at_a_word_boundary(short, french)
    chinese = "读取文件的全部内容并返回文本" * 30  # no spaces at all
    cut = short_description(chinese)
    assert cut.endswith(CUT_MARK)
    assert len(cut) <= DESCRIPTION_CHARS
    assert chinese.startswith(cut.removesuffix(CUT_MARK))
    assert short_description("读取文件。返回文本。") == "读取文件。返回文本。"
    accents = "e\u0301" * 400  # e + combining acute: never parted
    marked = short_description(accents).removesuffix(CUT_MARK)
    assert marked
    assert not unicodedata.combining(marked[0])
    assert marked.endswith("\u0301")
    emoji = "📄" * 400
    assert short_description(emoji).removesuffix(CUT_MARK) == "📄" * (DESCRIPTION_CHARS - 1)


def test_a_huge_description_is_cut_quickly() -> None:
    huge = "Reads a file. " + "Padding words " * 8_000  # ~110 KB
    started = time.perf_counter()
    short = ""
    for _ in range(100):
        short = short_description(huge)
    assert (time.perf_counter() - started) / 100 < 0.002
    assert short == "Reads a file."
    one_word = "x" * 100_000
    assert short_description(one_word) == "x" * (DESCRIPTION_CHARS - 1) + CUT_MARK
    spaced = " " * 100_000 + "late words"
    assert short_description(spaced) == "late words"


@pytest.mark.parametrize(
    "text",
    [
        "'; DROP TABLE capability_records; --",
        "<script>alert(1)</script> " * 20,
        "\x00\x01 nul bytes " * 30,
        "‮ right-to-left " * 30,
        "{{7*7}} ${jndi:ldap://x} " * 30,
    ],
)
def test_hostile_descriptions_come_back_bounded_and_unchanged_in_their_words(text: str) -> None:
    short = short_description(text)
    assert len(short) <= DESCRIPTION_CHARS
    assert " ".join(text.split()).startswith(short.removesuffix(CUT_MARK))


# -- schemas ---------------------------------------------------------------------------


def test_schema_noise_is_dropped_and_everything_a_caller_needs_is_kept() -> None:
    schema: dict[str, Any] = {
        "$schema": DRAFT_07,
        "$id": "https://example.com/read.json",
        "title": "read_fileArguments",
        "$comment": "generated",
        "type": "object",
        "properties": {
            "path": {"type": "string", "title": "Path", "description": "Where to read"},
            "sort_by": {"type": "string", "title": "Sort By", "enum": ["name", "size"]},
            "mode": {"type": "string", "title": "How to open it", "default": "r"},
            "$schema": {"type": "string"},  # a parameter named $schema stays a parameter
            "title": {"type": "string", "title": "Title"},
            "tags": {"type": "array", "items": {"$schema": DRAFT_07, "type": "string"}},
            "shape": {"anyOf": [{"$ref": "#/$defs/Box"}, {"type": "null"}]},
        },
        "required": ["path"],
        "additionalProperties": False,
        "$defs": {"Box": {"type": "object", "title": "Box", "properties": {}}},
    }
    original = copy.deepcopy(schema)
    lean = lean_schema(schema)
    assert schema == original  # what was given is untouched
    assert lean == {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Where to read"},
            "sort_by": {"type": "string", "enum": ["name", "size"]},
            "mode": {"type": "string", "title": "How to open it", "default": "r"},
            "$schema": {"type": "string"},
            "title": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "shape": {"anyOf": [{"$ref": "#/$defs/Box"}, {"type": "null"}]},
        },
        "required": ["path"],
        "additionalProperties": False,
        "$defs": {"Box": {"type": "object", "properties": {}}},
    }


@pytest.mark.parametrize("schema", [None, [], "object", 42, True])
def test_a_schema_that_is_not_an_object_becomes_empty(schema: object) -> None:
    assert lean_schema(schema) == {}


def test_a_deeply_nested_schema_is_handled_without_recursion_errors() -> None:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(5_000):
        schema = {"$schema": DRAFT_07, "type": "array", "items": schema}
    lean = lean_schema(schema)
    assert "$schema" not in lean
    assert "$schema" not in lean["items"]
    assert lean["type"] == "array"


# -- results ---------------------------------------------------------------------------


def first_result(entry: Entry, score_axis: int = 0) -> dict[str, Any]:
    index = HybridIndex(DIM)
    vector = np.zeros(DIM, dtype=np.float32)
    vector[score_axis] = 1.0
    index.put(entry, vector, [])
    query = np.array([0.6, 0.8, 0.0, 0.0], dtype=np.float32)
    return render(index.search(query, [], ME)[0], routing="local")


def upstream_tool(name: str, description: str, schema: dict[str, Any]) -> UpstreamTool:
    definition = mcp_types.Tool(name=name, description=description, input_schema=schema)
    return UpstreamTool(server="filesystem", definition=definition)


def test_a_tool_result_is_lean_and_still_has_what_a_call_needs() -> None:
    schema = {
        "$schema": DRAFT_07,
        "type": "object",
        "properties": {"path": {"type": "string"}, "head": {"type": "number"}},
        "required": ["path"],
    }
    result = first_result(tool_item(upstream_tool("read_text_file", FILESYSTEM_READ, schema)).entry)
    assert set(result) == {
        "kind",
        "name",
        "callName",
        "description",
        "inputSchema",
        "score",
        "routing",
    }
    assert result["callName"] == "mcp.filesystem.read_text_file"
    assert result["description"] == FILESYSTEM_READ.split(". ")[0] + "."
    assert result["inputSchema"] == {k: v for k, v in schema.items() if k != "$schema"}
    assert result["score"] == round(result["score"], 3)
    assert 0 < result["score"] <= 1


def capability_row(**fields: Any) -> CapabilityRow:
    base: dict[str, Any] = {
        "fqdn": "acme.web.logs.count_errors.ab12",
        "org": "acme",
        "project": "web",
        "display_name": "logs:count_errors",
        "named": True,
        "namespace": "logs",
        "action": "count_errors",
        "tool_name": "mcp__logs__count_errors",
        "intent": "count the error lines of the application log",
        "description": "",
        "parameters_schema": {"$schema": DRAFT_07, "type": "object", "properties": {}},
        "tools_used": ["filesystem:read_text_file"],
        "routing": "local",
        "visibility": "project",
        "created_by": "erwan",
        "usage_count": 0,
        "success_count": 0,
        "updated_at": datetime(2026, 1, 1, tzinfo=UTC),
    }
    return CapabilityRow(**(base | fields))


def test_a_capability_result_says_its_intent_once_and_no_empty_fields() -> None:
    result = first_result(capability_item(capability_row()).entry)
    assert result == {
        "kind": "capability",
        "name": "logs:count_errors",
        "callName": "mcp.logs.count_errors",
        "fqdn": "acme.web.logs.count_errors.ab12",
        "description": "count the error lines of the application log",
        "inputSchema": {"type": "object", "properties": {}},
        "score": result["score"],
        "routing": "local",
        "usage_count": 0,
        "toolName": "mcp__logs__count_errors",
    }
    assert "intent" not in result  # the description already says it


def test_a_capability_with_a_description_shows_it_cut_and_its_record_once_it_ran() -> None:
    long = "Counts the error lines " + "of every log " * 30
    row = capability_row(
        description=long,
        usage_count=3,
        success_count=2,
        recent_outcomes=0b011,
        recent_runs=3,
        recent_latency_ms=12.5,
    )
    result = first_result(capability_item(row).entry)
    assert_cut_at_a_word_boundary(result["description"], long)
    assert result["success_rate"] == 0.6667
    assert (result["recent_runs"], result["recent_latency_ms"]) == (3, 12.5)
    assert "intent" not in result


def test_an_unnamed_capability_is_called_by_its_fqdn_and_never_lists_a_tool_name() -> None:
    row = capability_row(named=False, display_name="acme.web.logs.count_errors.ab12")
    result = first_result(capability_item(row).entry)
    assert result["callName"] == 'mcp["acme.web.logs.count_errors.ab12"]'
    assert "toolName" not in result


# -- what a capability is searched by ------------------------------------------------------


def test_remembered_intents_stay_searchable_beside_a_huge_description_and_intent() -> None:
    row = capability_row(
        intent="count the error lines " * 5_000,
        description="Counts errors. " * 10_000,  # ~150 KB
        intents=("how many failures are in the app log", "tally the crash reports"),
    )
    item = capability_item(row)
    assert "how many failures are in the app log" in item.index_text
    assert "tally the crash reports" in item.index_text
    assert len(item.index_text) <= 8_000
