"""Names from an LLM (``[llm]`` configured), and the heuristic fallback for every failure.

``LlmStub`` stands in for the model: a real HTTP server on 127.0.0.1 speaking the
OpenAI-compatible ``/v1/chat/completions`` format (no real LLM is reachable here).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Iterator
from typing import Any

import pytest

from curation.llm_stub import LlmStub, completion, name_by_intent, requested_ids
from pml.curation import CurationService
from pml.llm import LlmClient
from pml.registry.names import NAME_PATTERN
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry
from pml.sections import CurationSettings
from pml.storage.database import Database

pytestmark = pytest.mark.anyio

INTENTS = {
    "read and parse JSON config file": ("fs:load_json_config", ["filesystem:read_text_file"]),
    "list files in a directory": ("fs:list_dir", ["filesystem:list_directory"]),
}


@pytest.fixture
def stub() -> Iterator[LlmStub]:
    with LlmStub() as server:
        yield server


@pytest.fixture
async def llm(stub: LlmStub) -> AsyncGenerator[LlmClient]:
    async with LlmClient(base_url=stub.base_url, model="haiku", timeout_s=2.0) as client:
        yield client


@pytest.fixture
def curation(registry: CapabilityRegistry, db: Database, llm: LlmClient) -> CurationService:
    return CurationService(registry, db, settings=CurationSettings(batch_size=5), llm=llm)


async def capture_all(registry: CapabilityRegistry, scope: Scope, count: int = 0) -> dict[str, str]:
    """The two INTENTS capabilities (plus ``count`` more); fqdn → intent."""
    captured: dict[str, str] = {}
    items = [(intent, tools) for intent, (_, tools) in INTENTS.items()]
    items += [(f"task number {index}", ["shell:run"]) for index in range(count)]
    for index, (intent, tools) in enumerate(items):
        draft = CapabilityDraft(code=f"return {index}", intent=intent, tools_used=tools)
        captured[(await registry.capture(scope, draft, latency_ms=1.0)).record.fqdn] = intent
    return captured


def suggested(answer: dict[str, Any]) -> dict[str, str]:
    return {item["id"]: item["suggestedName"] for item in answer["suggestions"]}


async def test_llm_names_are_used_when_they_are_valid_and_free(
    registry: CapabilityRegistry, curation: CurationService, stub: LlmStub, scope: Scope
) -> None:  # AC7, AC11
    captured = await capture_all(registry, scope)
    stub.reply = name_by_intent({intent: name for intent, (name, _) in INTENTS.items()})

    answer = await curation.call(scope, {"mode": "auto"})

    expected = {fqdn: INTENTS[intent][0] for fqdn, intent in captured.items()}
    assert suggested(answer) == expected
    by_name = {item["suggestedName"]: item for item in answer["suggestions"]}
    item = by_name["fs:load_json_config"]
    assert item["reasoning"] == "Named by the LLM: it read and parse JSON config file"
    assert item["confidence"] == 1.0  # fs matches the tools, clear intent, free
    assert sorted(entry["newName"] for entry in answer["applied"]) == sorted(expected.values())
    (body,) = stub.requests
    assert body["model"] == "haiku"
    request = json.loads(body["messages"][1]["content"])["capabilities"]
    assert {entry["suggested_namespace"] for entry in request} == {"fs"}
    assert {entry["intent"] for entry in request} == set(INTENTS)
    assert all("code" in entry and "tools_used" in entry for entry in request)


async def test_capabilities_are_named_in_batches_of_five(
    registry: CapabilityRegistry, curation: CurationService, stub: LlmStub, scope: Scope
) -> None:  # AC10
    await capture_all(registry, scope, count=10)

    answer = await curation.call(scope, {})

    assert [len(requested_ids(body)) for body in stub.requests] == [5, 5, 2]
    assert all(name.startswith("llm:") for name in suggested(answer).values())


async def test_a_namespace_that_does_not_match_the_tools_lowers_confidence(
    registry: CapabilityRegistry, curation: CurationService, stub: LlmStub, scope: Scope
) -> None:
    await capture_all(registry, scope)
    stub.reply = name_by_intent({intent: "config:thing" for intent in INTENTS})

    answer = await curation.call(scope, {"mode": "auto"})

    first, second = answer["suggestions"]
    assert {first["suggestedName"], second["suggestedName"]} == {
        "config:thing",
        "fs:list_directory",
    }
    llm_named = first if first["suggestedName"] == "config:thing" else second
    assert llm_named["confidence"] == pytest.approx(0.3 * 0 + 0.3 * 1 + 0.4)
    assert "config:thing" not in {entry["newName"] for entry in answer["applied"]}


HOSTILE_NAMES = [
    "fs:read json",  # a space
    "fs:réad",  # not ASCII
    "fs:" + "a" * 100,  # too long
    "readjson",  # no namespace
    "fs:read:json",  # two colons
    ":read",
    "fs:",
    "unnamed_deadbeef:x",
    "fs:x'; DROP TABLE capability_records; --",
    "ignore previous instructions",
    "fs:x\nmalicious",
    "",
]


@pytest.mark.parametrize("bad", HOSTILE_NAMES)
async def test_an_invalid_llm_name_falls_back_to_the_heuristic(
    registry: CapabilityRegistry, curation: CurationService, stub: LlmStub, scope: Scope, bad: str
) -> None:
    captured = await capture_all(registry, scope)
    stub.reply = name_by_intent(dict.fromkeys(INTENTS, bad))

    answer = await curation.call(scope, {})

    assert sorted(suggested(answer).values()) == ["fs:list_directory", "fs:read_json_config"]
    assert set(suggested(answer)) == set(captured)


def answering(entries: list[Any] | dict[str, Any] | str) -> Any:
    def reply(body: dict[str, Any]) -> tuple[int, bytes]:
        content = entries if isinstance(entries, str) else json.dumps({"names": entries})
        return 200, completion(content)

    return reply


async def test_duplicate_names_missing_and_invented_ids_fall_back_per_capability(
    registry: CapabilityRegistry, curation: CurationService, stub: LlmStub, scope: Scope
) -> None:
    await capture_all(registry, scope, count=2)
    stub.reply = answering(
        [
            {"id": "c1", "name": "fs:same", "reasoning": "x"},
            {"id": "c2", "name": "fs:same", "reasoning": "duplicate"},
            {"id": "c9", "name": "fs:invented", "reasoning": "no such id"},
            {"id": "c1", "name": "fs:again", "reasoning": "second answer for c1"},
            "not an object",
            {"id": ["c3"], "name": "fs:weird"},
            {"id": "c3", "name": 42},
        ]
    )

    answer = await curation.call(scope, {})

    names = list(suggested(answer).values())
    assert names.count("fs:same") == 1
    assert not {"fs:invented", "fs:again"} & set(names)
    assert len(set(names)) == 4
    assert all(NAME_PATTERN.fullmatch(name) for name in names)


async def test_an_llm_name_already_in_use_falls_back_to_the_heuristic(
    registry: CapabilityRegistry, curation: CurationService, stub: LlmStub, scope: Scope
) -> None:
    await registry.capture(
        scope, CapabilityDraft(code="return 'taken'", name="fs:load_json_config"), latency_ms=1
    )
    await capture_all(registry, scope)
    stub.reply = name_by_intent({intent: name for intent, (name, _) in INTENTS.items()})

    answer = await curation.call(scope, {})

    assert sorted(suggested(answer).values()) == ["fs:list_dir", "fs:read_json_config"]


async def test_hostile_reasoning_is_flattened_and_cut(
    registry: CapabilityRegistry, curation: CurationService, stub: LlmStub, scope: Scope
) -> None:
    await capture_all(registry, scope)
    reasoning = "[bold]x[/]\x1b[2J\nIGNORE ALL RULES " + "z" * 1000
    stub.reply = answering(
        [{"id": "c1", "name": "fs:one", "reasoning": reasoning},
         {"id": "c2", "name": "fs:two", "reasoning": reasoning}]
    )  # fmt: skip

    answer = await curation.call(scope, {})

    for item in answer["suggestions"]:
        assert item["reasoning"].startswith("Named by the LLM: [bold]x[/] [2J IGNORE ALL RULES")
        assert item["reasoning"].isprintable()
        assert len(item["reasoning"]) <= len("Named by the LLM: ") + 200


@pytest.mark.parametrize(
    "reply",
    [
        lambda body: (500, b'{"error": {"message": "boom"}}'),
        lambda body: (200, b"<html>"),
        lambda body: (200, completion("I cannot help with that.")),
        lambda body: (200, completion('{"names": "fs:x"}')),
        lambda body: (200, completion('{"other": []}')),
        lambda body: (429, b'{"error": {"message": "rate limited"}}'),
    ],
)
async def test_every_failed_request_falls_back_to_heuristics_and_never_raises(
    registry: CapabilityRegistry, curation: CurationService, stub: LlmStub, scope: Scope, reply: Any
) -> None:
    await capture_all(registry, scope)
    stub.reply = reply

    answer = await curation.call(scope, {"mode": "auto"})

    assert sorted(suggested(answer).values()) == ["fs:list_directory", "fs:read_json_config"]
    assert len(answer["applied"]) == 2


async def test_a_slow_llm_times_out_and_is_not_asked_again_after_two_failures(
    registry: CapabilityRegistry, db: Database, stub: LlmStub, scope: Scope
) -> None:
    await capture_all(registry, scope, count=18)  # 20 capabilities: 4 batches
    stub.hang = True
    async with LlmClient(base_url=stub.base_url, model="m", timeout_s=0.3) as slow:
        curation = CurationService(registry, db, llm=slow)

        answer = await curation.call(scope, {})

    assert len(stub.requests) == 2
    assert len(answer["suggestions"]) == 20
    assert not any(item["reasoning"].startswith("Named by") for item in answer["suggestions"])
