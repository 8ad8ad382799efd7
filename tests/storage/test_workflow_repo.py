"""Workflow state on a real database (SQLite and PostgreSQL): round trips, tenant and kind
isolation, expiry with an injected clock, take-once under concurrency, replace, delete,
purge, and hostile ids and states."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
import sqlalchemy as sa

from pml.errors import InvalidInput, PmlError
from pml.execution.journal import Journal
from pml.registry.scope import Scope
from pml.storage.database import Database
from pml.storage.tables import workflow_state
from pml.storage.workflow_repo import WorkflowStateStore

pytestmark = pytest.mark.anyio

START = datetime(2030, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
KIND = "approval"


@dataclass
class Clock:
    """A clock the test moves by hand."""

    now: datetime = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(db: Database, clock: Clock) -> WorkflowStateStore:
    return WorkflowStateStore(db, clock=clock)


def nested_state() -> dict[str, Any]:
    deep: dict[str, Any] = {"leaf": "🌿"}
    for level in range(30):
        deep = {f"level{level}": deep, "n": level}
    return {
        "code": "const r = await mcp.fs.read_file({path: '/tmp/é'});\nreturn r;",
        "journal": [
            {"tool": "fs:read_file", "digest": "ab" * 32, "result": {"text": "héllo 🌍"}},
            {"tool": "time:now", "digest": "cd" * 32, "result": {}},
        ],
        "approvals": [{"tool": "fs:write_file", "capability": "file_write"}],
        "bidi": "\u202eevil\u202c",
        "cjk": "日本語",
        "zero_width": "a\u200bb",
        "numbers": [0, -1, 1.5, 2**53, -(2**31)],
        "flags": {"yes": True, "no": False, "nothing": None},
        "empty": {"list": [], "object": {}, "string": ""},
        "deep": deep,
    }


async def count_rows(db: Database) -> int:
    async with db.read() as conn:
        result = await conn.execute(sa.select(sa.func.count()).select_from(workflow_state))
        return result.scalar_one()


# --- round trips and isolation ------------------------------------------------------------


async def test_put_and_get_round_trip_a_nested_unicode_state(
    store: WorkflowStateStore, scope: Scope
) -> None:
    state = nested_state()

    expires = await store.put("wf_1a2b", kind=KIND, scope=scope, state=state, ttl_s=900)

    assert expires == START + timedelta(seconds=900)
    assert expires.tzinfo is not None
    assert await store.get("wf_1a2b", kind=KIND, scope=scope) == state
    # Reading does not consume it.
    assert await store.get("wf_1a2b", kind=KIND, scope=scope) == state


async def test_get_of_a_missing_workflow_is_none(store: WorkflowStateStore, scope: Scope) -> None:
    assert await store.get("wf_missing", kind=KIND, scope=scope) is None
    assert await store.take("wf_missing", kind=KIND, scope=scope) is None
    assert await store.delete("wf_missing", scope=scope) is False


@pytest.mark.parametrize(
    ("kind", "other"),
    [
        ("client_route", Scope("acme", "webapp", "erwan")),
        (KIND, Scope("other", "webapp", "erwan")),
        (KIND, Scope("acme", "other", "erwan")),
        (KIND, Scope("acme", "webapp", "mallory")),
        (KIND, Scope("ACME", "webapp", "erwan")),
        (KIND, Scope("acme", "webapp", "erwan ")),
        (KIND, Scope("acme", "webapp", "Erwan")),
    ],
)
async def test_another_kind_or_tenant_sees_nothing_and_cannot_take_it(
    store: WorkflowStateStore, scope: Scope, kind: str, other: Scope
) -> None:
    await store.put("wf_1", kind=KIND, scope=scope, state={"secret": 1}, ttl_s=60)

    assert await store.get("wf_1", kind=kind, scope=other) is None
    assert await store.take("wf_1", kind=kind, scope=other) is None
    # The owner still has it, untouched.
    assert await store.get("wf_1", kind=KIND, scope=scope) == {"secret": 1}


@pytest.mark.parametrize("kind", ["", "APPROVAL", "approval ", "approva", "approval%", "%"])
async def test_kinds_match_exactly(store: WorkflowStateStore, scope: Scope, kind: str) -> None:
    await store.put("wf_1", kind=KIND, scope=scope, state={"a": 1}, ttl_s=60)

    assert await store.get("wf_1", kind=kind, scope=scope) is None


async def test_another_scope_cannot_delete_it(store: WorkflowStateStore, scope: Scope) -> None:
    await store.put("wf_1", kind=KIND, scope=scope, state={"a": 1}, ttl_s=60)

    for other in (
        Scope("other", "webapp", "erwan"),
        Scope("acme", "other", "erwan"),
        Scope("acme", "webapp", "mallory"),
    ):
        assert await store.delete("wf_1", scope=other) is False
    assert await store.get("wf_1", kind=KIND, scope=scope) == {"a": 1}

    assert await store.delete("wf_1", scope=scope) is True
    assert await store.get("wf_1", kind=KIND, scope=scope) is None
    assert await store.delete("wf_1", scope=scope) is False


async def test_delete_removes_the_state_whatever_its_kind(
    store: WorkflowStateStore, scope: Scope
) -> None:
    await store.put("wf_1", kind="client_route", scope=scope, state={"a": 1}, ttl_s=60)

    assert await store.delete("wf_1", scope=scope) is True
    assert await store.get("wf_1", kind="client_route", scope=scope) is None


async def test_states_of_different_ids_are_independent(
    store: WorkflowStateStore, scope: Scope
) -> None:
    for index in range(5):
        await store.put(f"wf_{index}", kind=KIND, scope=scope, state={"i": index}, ttl_s=60)

    assert await store.take("wf_2", kind=KIND, scope=scope) == {"i": 2}
    for index in (0, 1, 3, 4):
        assert await store.get(f"wf_{index}", kind=KIND, scope=scope) == {"i": index}


# --- expiry -------------------------------------------------------------------------------


async def test_expiry_is_enforced_on_read_before_any_purge(
    db: Database, store: WorkflowStateStore, clock: Clock, scope: Scope
) -> None:
    await store.put("wf_1", kind=KIND, scope=scope, state={"a": 1}, ttl_s=60)

    clock.advance(59.999999)
    assert await store.get("wf_1", kind=KIND, scope=scope) == {"a": 1}

    clock.advance(0.000001)  # exactly at expires_at: gone
    assert await store.get("wf_1", kind=KIND, scope=scope) is None
    assert await store.take("wf_1", kind=KIND, scope=scope) is None
    assert await count_rows(db) == 1  # still stored, just never returned


async def test_an_expired_state_is_not_revived_by_going_back_in_time_after_take(
    store: WorkflowStateStore, clock: Clock, scope: Scope
) -> None:
    await store.put("wf_1", kind=KIND, scope=scope, state={"a": 1}, ttl_s=10)
    clock.advance(11)
    assert await store.take("wf_1", kind=KIND, scope=scope) is None

    clock.now = START  # the row is still there and live again at this time
    assert await store.get("wf_1", kind=KIND, scope=scope) == {"a": 1}


async def test_fractional_and_non_positive_ttls(
    store: WorkflowStateStore, clock: Clock, scope: Scope
) -> None:
    await store.put("half", kind=KIND, scope=scope, state={"a": 1}, ttl_s=0.5)
    await store.put("zero", kind=KIND, scope=scope, state={"a": 2}, ttl_s=0)
    await store.put("negative", kind=KIND, scope=scope, state={"a": 3}, ttl_s=-60)

    assert await store.get("zero", kind=KIND, scope=scope) is None
    assert await store.get("negative", kind=KIND, scope=scope) is None
    clock.advance(0.4)
    assert await store.get("half", kind=KIND, scope=scope) == {"a": 1}
    clock.advance(0.1)
    assert await store.get("half", kind=KIND, scope=scope) is None


async def test_purge_deletes_only_expired_rows_and_counts_them(
    db: Database, store: WorkflowStateStore, clock: Clock, scope: Scope
) -> None:
    other = Scope("other", "proj", "someone")
    await store.put("ttl10", kind=KIND, scope=scope, state={"t": 10}, ttl_s=10)
    await store.put("ttl20", kind="client_route", scope=other, state={"t": 20}, ttl_s=20)
    await store.put("ttl30", kind=KIND, scope=scope, state={"t": 30}, ttl_s=30)
    await store.put("ttl40", kind=KIND, scope=other, state={"t": 40}, ttl_s=40)

    assert await store.purge_expired() == 0
    assert await count_rows(db) == 4

    clock.advance(20)  # ttl10 is past its expiry, ttl20 exactly at it
    assert await store.purge_expired() == 2
    assert await store.purge_expired() == 0
    assert await count_rows(db) == 2

    clock.now = START  # purged rows do not come back
    assert await store.get("ttl10", kind=KIND, scope=scope) is None
    assert await store.get("ttl20", kind="client_route", scope=other) is None
    assert await store.get("ttl30", kind=KIND, scope=scope) == {"t": 30}
    assert await store.get("ttl40", kind=KIND, scope=other) == {"t": 40}


async def test_purge_of_an_empty_table_is_zero(store: WorkflowStateStore) -> None:
    assert await store.purge_expired() == 0


# --- take ---------------------------------------------------------------------------------


async def test_take_returns_the_state_once(
    db: Database, store: WorkflowStateStore, scope: Scope
) -> None:
    state = nested_state()
    await store.put("wf_1", kind=KIND, scope=scope, state=state, ttl_s=60)

    assert await store.take("wf_1", kind=KIND, scope=scope) == state
    assert await store.take("wf_1", kind=KIND, scope=scope) is None
    assert await store.get("wf_1", kind=KIND, scope=scope) is None
    assert await count_rows(db) == 0


async def race(stores: list[WorkflowStateStore], workflow_id: str, scope: Scope) -> list[Any]:
    """What each store's ``take`` of ``workflow_id`` got, all started at once."""
    results: list[dict[str, Any] | None] = []

    async def take(store: WorkflowStateStore) -> None:
        results.append(await store.take(workflow_id, kind=KIND, scope=scope))

    async with anyio.create_task_group() as group:
        for store in stores:
            group.start_soon(take, store)
    assert len(results) == len(stores)
    return [result for result in results if result is not None]


@pytest.mark.parametrize("racers", [2, 8])
async def test_concurrent_takes_give_the_state_to_exactly_one(
    store: WorkflowStateStore, scope: Scope, racers: int
) -> None:
    for round_ in range(5):
        workflow_id = f"wf_race_{round_}"
        await store.put(workflow_id, kind=KIND, scope=scope, state={"r": round_}, ttl_s=60)

        assert await race([store] * racers, workflow_id, scope) == [{"r": round_}]


async def test_concurrent_takes_from_two_engines_give_the_state_to_exactly_one(
    database_url: str, scope: Scope
) -> None:
    # Two gateway processes sharing one database: each has its own engine.
    first_db, second_db = await Database.open(database_url), await Database.open(database_url)
    try:
        first, second = WorkflowStateStore(first_db), WorkflowStateStore(second_db)
        for round_ in range(5):
            await first.put(f"wf_{round_}", kind=KIND, scope=scope, state={"r": round_}, ttl_s=60)

            winners = await race([first, second, first, second], f"wf_{round_}", scope)

            assert winners == [{"r": round_}]
    finally:
        await first_db.close()
        await second_db.close()


# --- replace ------------------------------------------------------------------------------


async def test_put_on_an_existing_id_replaces_state_kind_and_expiry(
    db: Database, store: WorkflowStateStore, clock: Clock, scope: Scope
) -> None:
    await store.put("wf_1", kind=KIND, scope=scope, state={"version": 1}, ttl_s=10)
    clock.advance(5)

    expires = await store.put(
        "wf_1", kind="client_route", scope=scope, state={"version": 2}, ttl_s=100
    )

    assert expires == START + timedelta(seconds=105)
    assert await count_rows(db) == 1
    assert await store.get("wf_1", kind=KIND, scope=scope) is None
    assert await store.get("wf_1", kind="client_route", scope=scope) == {"version": 2}
    clock.advance(50)  # past the first expiry, before the second
    assert await store.get("wf_1", kind="client_route", scope=scope) == {"version": 2}


async def test_put_replaces_an_expired_state(
    store: WorkflowStateStore, clock: Clock, scope: Scope
) -> None:
    await store.put("wf_1", kind=KIND, scope=scope, state={"old": True}, ttl_s=1)
    clock.advance(5)

    await store.put("wf_1", kind=KIND, scope=scope, state={"new": True}, ttl_s=60)

    assert await store.take("wf_1", kind=KIND, scope=scope) == {"new": True}


async def test_another_caller_cannot_replace_a_state(
    store: WorkflowStateStore, scope: Scope
) -> None:
    other = Scope("other", "webapp", "erwan")
    await store.put("wf_1", kind=KIND, scope=scope, state={"owner": "first"}, ttl_s=60)

    with pytest.raises(InvalidInput, match="already in use"):
        await store.put("wf_1", kind=KIND, scope=other, state={"owner": "second"}, ttl_s=60)

    assert await store.get("wf_1", kind=KIND, scope=other) is None
    assert await store.get("wf_1", kind=KIND, scope=scope) == {"owner": "first"}


@pytest.mark.parametrize(
    ("workflow_id", "kind"), [("", KIND), ("w" * 65, KIND), ("wf_1", ""), ("wf_1", "k" * 33)]
)
async def test_ids_and_kinds_out_of_bounds_are_refused_and_store_nothing(
    db: Database, store: WorkflowStateStore, scope: Scope, workflow_id: str, kind: str
) -> None:
    with pytest.raises(InvalidInput):
        await store.put(workflow_id, kind=kind, scope=scope, state={"a": 1}, ttl_s=60)
    assert await count_rows(db) == 0


async def test_a_taken_state_can_be_put_again(store: WorkflowStateStore, scope: Scope) -> None:
    await store.put("wf_1", kind=KIND, scope=scope, state={"n": 1}, ttl_s=60)
    assert await store.take("wf_1", kind=KIND, scope=scope) == {"n": 1}

    await store.put("wf_1", kind=KIND, scope=scope, state={"n": 2}, ttl_s=60)

    assert await store.take("wf_1", kind=KIND, scope=scope) == {"n": 2}


# --- hostile ids and states ---------------------------------------------------------------


@pytest.mark.parametrize(
    "workflow_id",
    [
        "'; DROP TABLE workflow_state; --",
        '" OR 1=1 --',
        "wf') OR ('1'='1",
        "%",
        "_",
        "wf_%",
        "*",
        "\\",
        "wf_\u202egnp.exe",
        "🌍" * 16,
        "é" * 64,
        "x" * 64,
    ],
)
async def test_injection_like_and_unicode_ids_are_stored_verbatim(
    db: Database, store: WorkflowStateStore, scope: Scope, workflow_id: str
) -> None:
    await store.put("wf_bystander", kind=KIND, scope=scope, state={"b": 1}, ttl_s=60)
    await store.put(workflow_id, kind=KIND, scope=scope, state={"id": workflow_id}, ttl_s=60)

    assert await store.get(workflow_id, kind=KIND, scope=scope) == {"id": workflow_id}
    assert await count_rows(db) == 2
    # Patterns in ids are not patterns in queries.
    assert await store.get("wf_bystander", kind=KIND, scope=scope) == {"b": 1}
    assert await store.get(workflow_id + "x", kind=KIND, scope=scope) is None
    assert await store.delete(workflow_id, scope=scope) is True
    assert await store.get("wf_bystander", kind=KIND, scope=scope) == {"b": 1}


async def test_a_percent_id_does_not_match_other_ids(
    store: WorkflowStateStore, scope: Scope
) -> None:
    await store.put("wf_real", kind=KIND, scope=scope, state={"real": 1}, ttl_s=60)

    for pattern in ("%", "wf_%", "wf_____", "_f_real", "*"):
        assert await store.get(pattern, kind=KIND, scope=scope) is None
        assert await store.take(pattern, kind=KIND, scope=scope) is None
        assert await store.delete(pattern, scope=scope) is False
    assert await store.purge_expired() == 0
    assert await store.get("wf_real", kind=KIND, scope=scope) == {"real": 1}


async def test_states_with_sql_strings_are_stored_verbatim(
    db: Database, store: WorkflowStateStore, scope: Scope
) -> None:
    state = {
        "code": "'; DROP TABLE workflow_state; --",
        "'; DROP TABLE workflow_state; --": ['"; DELETE FROM audit_events; --'],
        "quote": 'it\'s "quoted" \\ back\\slash',
        "json_looking": '{"injected": true}',
        "percent": "100% _done_",
    }

    await store.put("wf_sql", kind=KIND, scope=scope, state=state, ttl_s=60)

    assert await store.get("wf_sql", kind=KIND, scope=scope) == state
    assert await count_rows(db) == 1
    async with db.read() as conn:
        tables = await conn.run_sync(lambda sync: sa.inspect(sync).get_table_names())
    assert "workflow_state" in tables
    assert "audit_events" in tables


async def test_a_large_state_round_trips(store: WorkflowStateStore, scope: Scope) -> None:
    state = {"blob": "é🌍x" * 300_000, "items": [{"i": index} for index in range(5000)]}

    await store.put("wf_big", kind=KIND, scope=scope, state=state, ttl_s=60)

    assert await store.take("wf_big", kind=KIND, scope=scope) == state


async def test_a_long_scope_user_is_isolated_like_any_other(
    store: WorkflowStateStore,
) -> None:
    long_user = Scope("acme", "webapp", "ü" * 128)
    near = Scope("acme", "webapp", "ü" * 127)
    await store.put("wf_1", kind=KIND, scope=long_user, state={"u": 128}, ttl_s=60)

    assert await store.get("wf_1", kind=KIND, scope=long_user) == {"u": 128}
    assert await store.get("wf_1", kind=KIND, scope=near) is None


async def test_a_paused_run_whose_tool_returned_a_nul_character_can_be_stored(
    store: WorkflowStateStore, scope: Scope
) -> None:
    # JSON allows "\u0000" in strings; an upstream tool reading a binary file returns it.
    journal = Journal()
    journal.record(
        "fs:read_text_file",
        "ab" * 32,
        {"content": [{"type": "text", "text": "PK\x03\x04\x00\x00"}]},
    )
    state = {"journal": journal.to_json(), "resume": {"code": "return 1"}}

    await store.put("wf_binary", kind=KIND, scope=scope, state=state, ttl_s=60)

    stored = await store.take("wf_binary", kind=KIND, scope=scope)
    assert stored == state
    assert stored is not None
    resumed = Journal.resumed(stored["journal"])
    assert resumed.replay("fs:read_text_file", "ab" * 32) == state["journal"][0]["result"]


@pytest.mark.parametrize("length", [65, 10_000])
async def test_an_over_long_id_fails_cleanly_or_works(
    db: Database, store: WorkflowStateStore, scope: Scope, length: int
) -> None:
    workflow_id = "w" * length
    try:
        await store.put(workflow_id, kind=KIND, scope=scope, state={"a": 1}, ttl_s=60)
    except PmlError:
        # Refused: nothing half-stored, and the store keeps working.
        assert await count_rows(db) == 0
        assert await store.get(workflow_id, kind=KIND, scope=scope) is None
    else:
        assert await store.get(workflow_id, kind=KIND, scope=scope) == {"a": 1}
        assert await store.get(workflow_id[:64], kind=KIND, scope=scope) is None
    await store.put("wf_after", kind=KIND, scope=scope, state={"ok": True}, ttl_s=60)
    assert await store.get("wf_after", kind=KIND, scope=scope) == {"ok": True}


# --- both backends must agree on hostile input --------------------------------------------

Action = Callable[[WorkflowStateStore, Scope], Awaitable[object]]


def _put_get(workflow_id: str, kind: str, state: dict[str, Any]) -> Action:
    async def action(store: WorkflowStateStore, scope: Scope) -> object:
        await store.put(workflow_id, kind=kind, scope=scope, state=state, ttl_s=60)
        return await store.get(workflow_id, kind=kind, scope=scope)

    return action


HOSTILE: dict[str, tuple[str, str, dict[str, Any]]] = {
    "65-character id": ("w" * 65, KIND, {"a": 1}),
    "10 000-character id": ("w" * 10_000, KIND, {"a": 1}),
    "33-character kind": ("wf_1", "k" * 33, {"a": 1}),
    "NUL in a state string": ("wf_1", KIND, {"a": "x\x00y"}),
    "lone surrogate in a state string": ("wf_1", KIND, {"a": "\ud800"}),
    "NaN in a state": ("wf_1", KIND, {"a": float("nan")}),
}


async def _outcome(url: str, action: Action, scope: Scope) -> tuple[str, str]:
    database = await Database.open(url)
    try:
        result = await action(WorkflowStateStore(database), scope)
    except PmlError as error:
        return ("refused", type(error).__name__)
    finally:
        await database.close()
    return ("stored", repr(result))


@pytest.mark.postgres
@pytest.mark.parametrize("case", list(HOSTILE))
async def test_sqlite_and_postgresql_treat_hostile_input_alike(
    sqlite_url: str, postgres_url: str, scope: Scope, case: str
) -> None:
    workflow_id, kind, state = HOSTILE[case]
    action = _put_get(workflow_id, kind, state)

    on_sqlite = await _outcome(sqlite_url, action, scope)
    on_postgres = await _outcome(postgres_url, action, scope)

    assert on_sqlite == on_postgres, f"{case}: SQLite {on_sqlite}, PostgreSQL {on_postgres}"
