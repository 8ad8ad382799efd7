"""``MemoryStore`` on SQLite and PostgreSQL: dedup, scope isolation, limits, forget, and
hostile input."""

from __future__ import annotations

import json
from datetime import UTC

import anyio
import pytest

from pml.errors import InvalidInput, LimitExceeded, PermissionDenied
from pml.memory.store import MAX_LIST, MAX_TEXT_CHARS, MemoryFact, MemoryStore, fact_hash
from pml.registry.scope import Scope
from pml.storage.database import Database
from pml.storage.memory_repo import MemoryRepository
from pml.storage.types import utc_now

pytestmark = pytest.mark.anyio

OTHER_USER = Scope("acme", "webapp", "ada")
OTHER_PROJECT = Scope("acme", "mobile", "erwan")


@pytest.fixture
def store(db: Database) -> MemoryStore:
    return MemoryStore(db)


async def test_a_new_fact_is_stored_and_described(store: MemoryStore, scope: Scope) -> None:
    fact, new = await store.add(
        scope, "  I prefer metric units \n", sensitivity="low", source="agent", request_id="r-1"
    )
    assert new is True
    assert (fact.text, fact.sensitivity, fact.source, fact.request_id) == (
        "I prefer metric units",
        "low",
        "agent",
        "r-1",
    )
    assert fact.created_at.tzinfo == UTC
    data = fact.to_dict()
    assert set(data) == {"id", "text", "sensitivity", "source", "request_id", "created_at"}
    assert json.loads(json.dumps(data)) == data
    assert await store.recent(scope, 10) == [fact]


@pytest.mark.parametrize(
    "again",
    [
        "I prefer metric units",
        "i PREFER   metric\nunits",
        "I prefer metric\u200b units",
        "Ｉ prefer metric units",
    ],
)
async def test_the_same_fact_is_stored_once(store: MemoryStore, scope: Scope, again: str) -> None:
    first, _ = await store.add(scope, "I prefer metric units", sensitivity="low", source="agent")
    second, new = await store.add(scope, again, sensitivity="low", source="cli")
    assert new is False
    assert second == first
    assert len(await store.list(scope)) == 1


async def test_each_user_and_project_has_its_own_facts(store: MemoryStore, scope: Scope) -> None:
    mine, _ = await store.add(scope, "the repo uses tabs", sensitivity="low", source="agent")
    theirs, new = await store.add(OTHER_USER, "the repo uses tabs", sensitivity="low", source="x")
    elsewhere, _ = await store.add(OTHER_PROJECT, "uses tabs", sensitivity="low", source="x")
    assert new is True
    assert mine.id != theirs.id
    assert await store.list(scope) == [mine]
    assert await store.list(OTHER_USER) == [theirs]
    assert await store.list(OTHER_PROJECT) == [elsewhere]
    assert await store.forget(OTHER_USER, mine.id) is False
    assert await store.find(OTHER_USER, mine.id) is None
    assert await store.find(OTHER_USER, mine.id[:8]) is None
    assert await store.list(scope) == [mine]


async def test_recent_and_list_are_newest_first_and_bounded(
    store: MemoryStore, scope: Scope
) -> None:
    facts = [
        (await store.add(scope, f"fact number {index}", sensitivity="low", source="agent"))[0]
        for index in range(5)
    ]
    newest_first = list(reversed(facts))
    assert await store.recent(scope, 3) == newest_first[:3]
    assert await store.recent(scope, 0) == []
    assert await store.recent(scope, -4) == []
    assert await store.recent(scope, 10**9) == newest_first
    assert await store.list(scope, limit=2) == newest_first[:2]


async def test_search_is_case_insensitive_and_takes_wildcards_literally(
    store: MemoryStore, scope: Scope
) -> None:
    metric, _ = await store.add(scope, "I prefer METRIC units", sensitivity="low", source="a")
    percent, _ = await store.add(scope, "coverage must stay at 100%", sensitivity="low", source="a")
    under, _ = await store.add(scope, "files are snake_case", sensitivity="low", source="a")
    await store.add(scope, "files are snakeXcase", sensitivity="low", source="a")
    assert await store.list(scope, query="metric") == [metric]
    assert await store.list(scope, query="  Metric   Units ") == [metric]
    assert await store.list(scope, query="100%") == [percent]
    assert await store.list(scope, query="e_c") == [under]
    assert await store.list(scope, query="%") == [percent]
    assert await store.list(scope, query="nothing like it") == []
    assert len(await store.list(scope, query="   ")) == 4


@pytest.mark.parametrize("limit", [0, -1, MAX_LIST + 1, True, 2.5, "10"])
async def test_a_list_limit_out_of_range_is_invalid(
    store: MemoryStore, scope: Scope, limit: object
) -> None:
    with pytest.raises(InvalidInput):
        await store.list(scope, limit=limit)  # type: ignore[arg-type]


async def test_a_search_that_is_not_short_text_is_invalid(store: MemoryStore, scope: Scope) -> None:
    with pytest.raises(InvalidInput):
        await store.list(scope, query="x" * 201)
    with pytest.raises(InvalidInput):
        await store.list(scope, query=42)  # type: ignore[arg-type]


async def test_forget_deletes_once(store: MemoryStore, scope: Scope) -> None:
    fact, _ = await store.add(scope, "staging is called beta", sensitivity="low", source="cli")
    assert await store.forget(scope, fact.id) is True
    assert await store.forget(scope, fact.id) is False
    assert await store.list(scope) == []
    assert await store.forget(scope, "not-a-uuid") is False
    assert await store.forget(scope, "'; DROP TABLE memories; --") is False


async def test_find_takes_an_id_or_a_unique_prefix(
    db: Database, store: MemoryStore, scope: Scope
) -> None:
    now = utc_now()
    async with db.transaction() as conn:
        repo = MemoryRepository(conn)
        for fact_id, text in (
            ("aaaa1111-0000-4000-8000-000000000001", "one"),
            ("aaaa2222-0000-4000-8000-000000000002", "two"),
        ):
            await repo.insert(
                {
                    "id": fact_id,
                    "org": scope.org,
                    "project": scope.project,
                    "user_id": scope.user,
                    "text": text,
                    "sensitivity": "low",
                    "source": "test",
                    "request_id": None,
                    "created_at": now,
                    "text_hash": fact_hash(text),
                }
            )
    found = await store.find(scope, "AAAA1111")
    assert found is not None
    assert found.text == "one"
    with pytest.raises(InvalidInput, match="Several memories"):
        await store.find(scope, "aaaa")
    assert await store.find(scope, "aaa") is None  # too short to be a prefix
    assert await store.find(scope, "aa%") is None  # a wildcard is a character
    assert await store.find(scope, "bbbb") is None


@pytest.mark.parametrize(
    ("text", "sensitivity"),
    [
        ("my password is hunter2", "low"),
        ("my password is hunter2", "high"),
        ("OPENAI_API_KEY=sk-proj-4f9a8b7c6d5e4f3a2b1c0d9e", "low"),
        ("I prefer metric units", "credential"),
    ],
)
async def test_a_credential_is_never_stored(
    store: MemoryStore, scope: Scope, text: str, sensitivity: str
) -> None:
    with pytest.raises(PermissionDenied, match="never stored"):
        await store.add(scope, text, sensitivity=sensitivity, source="agent")  # type: ignore[arg-type]
    assert await store.list(scope) == []


async def test_the_stored_level_is_the_more_sensitive_of_caller_and_heuristics(
    store: MemoryStore, scope: Scope
) -> None:
    card, _ = await store.add(
        scope, "my card number is 4111 1111 1111 1111", sensitivity="low", source="agent"
    )
    assert card.sensitivity == "high"
    plain, _ = await store.add(scope, "Grandma naps at 2pm", sensitivity="low", source="agent")
    raised, new = await store.add(scope, "grandma naps at 2pm", sensitivity="high", source="x")
    assert (new, raised.id, raised.sensitivity) == (False, plain.id, "high")
    kept, _ = await store.add(scope, "Grandma naps at 2pm", sensitivity="low", source="x")
    assert kept.sensitivity == "high"
    assert {fact.sensitivity for fact in await store.list(scope)} == {"high"}


async def test_max_facts_is_a_limit_that_forgetting_frees(store: MemoryStore, scope: Scope) -> None:
    facts = [
        (await store.add(scope, f"fact {index}", sensitivity="low", source="a", max_facts=3))[0]
        for index in range(3)
    ]
    with pytest.raises(LimitExceeded, match="3 memories"):
        await store.add(scope, "one too many", sensitivity="low", source="a", max_facts=3)
    again, new = await store.add(scope, "fact 1", sensitivity="low", source="a", max_facts=3)
    assert (again, new) == (facts[1], False)  # a known fact is not one more
    await store.add(OTHER_USER, "theirs", sensitivity="low", source="a", max_facts=3)
    await store.forget(scope, facts[0].id)
    _, new = await store.add(scope, "one too many", sensitivity="low", source="a", max_facts=3)
    assert new is True


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("   \n\t ", "empty"),
        ("x" * (MAX_TEXT_CHARS + 1), "2000"),
        ("bell\x07", "control"),
        ("nul\x00byte", "control"),
        ("escape \x1b[2J", "control"),
        ("carriage\rreturn", "control"),
        ("lone \ud800 surrogate", "control"),
    ],
)
async def test_bad_texts_are_invalid_input(
    store: MemoryStore, scope: Scope, text: str, message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        await store.add(scope, text, sensitivity="low", source="agent")
    assert await store.list(scope) == []


async def test_texts_at_the_limit_and_with_newlines_tabs_and_unicode_round_trip(
    store: MemoryStore, scope: Scope
) -> None:
    texts = [
        "y" * MAX_TEXT_CHARS,
        "line one\r\nline two\tand a tab",
        "日本語のメモ 🙂 עברית \u202eevil\u202c",
        '\'; DROP TABLE memories; -- "quoted" \\ back',
    ]
    for text in texts:
        await store.add(scope, text, sensitivity="low", source="agent")
    stored = [fact.text for fact in reversed(await store.list(scope))]
    assert stored == [texts[0], "line one\nline two\tand a tab", texts[2], texts[3]]


@pytest.mark.parametrize(
    "arguments",
    [
        {"text": None},
        {"text": 42},
        {"text": b"bytes"},
        {"sensitivity": "LOW"},
        {"sensitivity": None},
        {"sensitivity": "medium"},
        {"source": ""},
        {"source": "has space"},
        {"source": "s" * 65},
        {"source": None},
        {"request_id": "has space"},
        {"request_id": "r" * 65},
        {"request_id": 7},
        {"max_facts": 0},
        {"max_facts": True},
        {"max_facts": "10"},
    ],
)
async def test_wrong_types_and_values_are_invalid_input(
    store: MemoryStore, scope: Scope, arguments: dict[str, object]
) -> None:
    call: dict[str, object] = {"text": "fine", "sensitivity": "low", "source": "agent"}
    call.update(arguments)
    text = call.pop("text")
    with pytest.raises(InvalidInput):
        await store.add(scope, text, **call)  # type: ignore[arg-type]
    assert await store.list(scope) == []


async def test_a_scope_that_is_not_a_scope_is_invalid(store: MemoryStore) -> None:
    with pytest.raises(InvalidInput):
        await store.add("acme.webapp", "x", sensitivity="low", source="a")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        await store.recent(None, 5)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        await store.forget(Scope("acme", "webapp", "erwan"), None)  # type: ignore[arg-type]


async def test_the_same_fact_added_at_once_is_stored_once(store: MemoryStore, scope: Scope) -> None:
    results: list[tuple[MemoryFact, bool]] = []

    async def add() -> None:
        fact = await store.add(scope, "we deploy on Tuesdays", sensitivity="low", source="a")
        results.append(fact)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            for _ in range(8):
                group.start_soon(add)
    assert sum(new for _, new in results) == 1
    assert len({fact.id for fact, _ in results}) == 1
    assert len(await store.list(scope)) == 1
