"""The gateway's token estimate (``pml.gateway.tools_budget``) against the real cl100k BPE.

The budget of ``tools/list`` is counted without a tokenizer at runtime; these tests hold
the estimate to never undercount realistic tool definitions by more than a few percent
(nor overcount them wildly), and to stay cheap and total on hostile text.
"""

from __future__ import annotations

import json
import random
import statistics
import string
import time
from collections.abc import Iterator
from typing import Any

import pytest
import tiktoken

from gateway.tools_budget_bench import encoder, generate, reference_tools, synthetic_catalog
from pml.gateway.capability_tools import describe, input_schema
from pml.gateway.schemas import STATIC_WIRE
from pml.gateway.tools_budget import MIN_TOOL_TOKENS, estimate_tokens


@pytest.fixture(scope="module")
def cl100k() -> tiktoken.Encoding:
    return encoder()


def tool_text(name: str, description: str | None, intent: str | None, schema: object) -> str:
    """A capability tool as the catalog sends it."""
    return json.dumps(
        {
            "name": name[:64],
            "description": describe(name, description, intent),
            "inputSchema": input_schema(schema),
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )


def synthetic_capability_tools(count: int) -> Iterator[str]:
    for cap in generate(count, seed=3):
        namespace, action = cap["display_name"].split(":")
        yield tool_text(
            f"mcp__{namespace}__{action}",
            cap["description"],
            cap["intent"],
            cap["parameters_schema"],
        )


def upstream_shaped_tools() -> Iterator[str]:
    for tool in [*reference_tools(), *synthetic_catalog(800, seed=2)]:
        yield tool_text(
            "mcp__r__" + tool["name"], tool.get("description"), None, tool["inputSchema"]
        )


PHRASES = {
    "english": "Read the configuration file, parse every section and return the changed keys",
    "french": "Lire le fichier de configuration et renvoyer les clés modifiées, même vides",
    "german": "Überprüfe die Größe aller Dateien im Verzeichnis und melde Änderungen",
    "russian": "Прочитать файл и вернуть список ключей из базы данных пользователей",
    "chinese": "读取配置文件并返回所有已修改的键和数据库查询结果",
    "japanese": "ファイルを読んで内容を返します。データベースを検索する。",
    "greek": "Διάβασε το αρχείο ρυθμίσεων και επέστρεψε τα κλειδιά",
    "hebrew": "קרא את קובץ התצורה והחזר את המפתחות",
    "arabic": "اقرأ ملف الإعدادات وأرجع المفاتيح المعدلة",
    "korean": "구성 파일을 읽고 변경된 키를 반환합니다",
    "hindi": "कॉन्फ़िगरेशन फ़ाइल पढ़ें और बदली गई कुंजियाँ लौटाएँ",
    "code": 'r = await mcp.fs.read_file(path=args["path"]); return {"n": len(r), "ok": True}',
    "camel": "fetchUserProfileById getOrderHistoryForCustomer listOpenPullRequests",
    "numbers": "ticket 12345 and 67890 on 2025-12-22T10:11:12Z for 3.14159 at port 8080",
    "hex ids": "commit 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
}


@pytest.mark.parametrize("kind", ["synthetic capabilities", "upstream-shaped", "own tools"])
def test_realistic_tool_definitions_are_never_undercounted_by_more_than_a_few_percent(
    cl100k: tiktoken.Encoding, kind: str
) -> None:
    texts = {
        "synthetic capabilities": lambda: list(synthetic_capability_tools(1500)),
        "upstream-shaped": lambda: list(upstream_shaped_tools()),
        "own tools": lambda: list(STATIC_WIRE),
    }[kind]()
    ratios = [estimate_tokens(text) / len(cl100k.encode(text)) for text in texts]
    assert min(ratios) >= 0.96, kind
    assert statistics.median(ratios) <= 1.35, kind  # conservative, not wasteful
    whole = ",".join(texts)
    assert estimate_tokens(whole) >= len(cl100k.encode(whole))


@pytest.mark.parametrize("language", sorted(PHRASES))
def test_descriptions_in_many_languages_and_shapes_are_not_undercounted(
    cl100k: tiktoken.Encoding, language: str
) -> None:
    text = tool_text("mcp__x__y", PHRASES[language], None, {"type": "object", "properties": {}})
    ratio = estimate_tokens(text) / len(cl100k.encode(text))
    assert 0.95 <= ratio <= 2.0, (language, ratio)


def test_adversarial_character_soup_is_undercounted_by_at_most_a_third(
    cl100k: tiktoken.Encoding,
) -> None:
    rng = random.Random(7)
    alphabets = [
        string.ascii_letters + string.digits,
        string.printable,
        "🙂🚀📁✅❌🔥",
        "\x00\x01\x7f\u202e\u200b",
    ]
    for alphabet in alphabets:
        for _ in range(25):
            soup = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 400)))
            text = tool_text("mcp__x__y", soup, None, {"properties": {soup[:30]: {}}})
            assert estimate_tokens(text) >= 0.67 * len(cl100k.encode(text)), repr(soup[:40])


def test_the_smallest_tool_bounds_every_tool_from_below(cl100k: tiktoken.Encoding) -> None:
    smallest = tool_text("a:b", None, None, None).replace('"a:b"', '"mcp__a__b"', 1)
    assert estimate_tokens(smallest) == MIN_TOOL_TOKENS
    assert len(cl100k.encode(smallest)) * 1.25 >= MIN_TOOL_TOKENS
    for text in synthetic_capability_tools(200):
        assert estimate_tokens(text) >= MIN_TOOL_TOKENS


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "\n\n\r\n",
        "\x00" * 1000,
        "\ud800 lone surrogate",
        "a" * 100_000,
        "1" * 100_000,
        "'; DROP TABLE capability_records; --",
        "\u202eevil\u202c",
        "🙂" * 10_000,
    ],
)
def test_hostile_text_is_estimated_without_error(text: str) -> None:
    estimate = estimate_tokens(text)
    assert estimate >= 0
    assert (estimate > 0) == bool(text)


def test_a_megabyte_is_estimated_quickly() -> None:
    rng = random.Random(1)
    text = "".join(rng.choice(string.printable + "éд中🙂") for _ in range(1_000_000))
    started = time.perf_counter()
    estimate_tokens(text)
    assert time.perf_counter() - started < 5.0


def test_an_estimate_grows_with_the_text() -> None:
    base: Any = tool_text("mcp__a__b", "read a file", None, None)
    longer = tool_text("mcp__a__b", "read a file and return its lines, one by one", None, None)
    assert estimate_tokens(longer) > estimate_tokens(base)
