"""The audit log on a real file and a real table (SQLite and PostgreSQL): scrubbed,
coalesced, bounded, and never lost when a sink fails for a while."""

from __future__ import annotations

import json
import logging
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
import sqlalchemy as sa

from pml.errors import NotFound
from pml.policy.audit import AUDIT_DROPPED, AuditLog
from pml.policy.audit_file import AuditFile
from pml.policy.model import Auditor
from pml.registry.scope import Scope
from pml.storage.audit_repo import AuditEntry, AuditRepository, AuditRow
from pml.storage.database import Database

pytestmark = pytest.mark.anyio

DEV_FULL = Path("/dev/full")  # every write fails with ENOSPC: a real full disk

ACME = Scope("acme", "webapp", "erwan")
GLOBEX = Scope("globex", "site", "gina")
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkFkYSJ9"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
SECRETS = [
    "sk-live-4f9a8b7c6d5e4f3a2b1c0d9e",
    "3f9a1c7e5b2d8f40a6c1",
    JWT,
    "q8Zt1LmX4vR7yN2kP9sJ3wB6",
    "hunter2-correct-horse",
]


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1_750_000_000.0

    def __call__(self) -> float:
        return self.now


def file_events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


async def table_events(db: Database, org: str | None = None) -> list[AuditRow]:
    return await AuditRepository(db).tail(org=org, project=None, after_id=0, limit=10_000)


def deny(log: AuditLog, tool: str = "fs:write_file", scope: Scope = ACME) -> None:
    log.emit(
        "POLICY_DENIED",
        scope=scope,
        details={"tool": tool, "capability": "file_write"},
        decided_by="policy:file_task",
        request_id="r-1",
    )


async def test_events_land_in_the_file_and_the_table_with_every_field(
    db: Database, tmp_path: Path
) -> None:
    path = tmp_path / "logs" / "nested" / "audit.jsonl"
    log = AuditLog(db, path)
    log.emit(
        "ROUTER_OUTPUT",
        scope=ACME,
        details={"intent": "file_task", "needs": ["file_read"], "ü": "日本語"},
        decided_by="heuristic:read",
        request_id="req-42",
    )
    await log.flush()

    [line] = file_events(path)
    assert set(line) == {
        "ts",
        "event",
        "actor",
        "scope",
        "org",
        "project",
        "request_id",
        "details",
        "decided_by",
    }
    assert line["event"] == "ROUTER_OUTPUT"
    assert (line["scope"], line["org"], line["project"]) == ("acme.webapp", "acme", "webapp")
    assert line["actor"] == "erwan"  # the scope's user when no actor is given
    assert (line["request_id"], line["decided_by"]) == ("req-42", "heuristic:read")
    assert line["details"] == {"intent": "file_task", "needs": ["file_read"], "ü": "日本語"}
    assert line["ts"].startswith("2")
    assert line["ts"].endswith("+00:00")
    assert "日本語" in path.read_text("utf-8")  # ensure_ascii off: readable unicode
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    [row] = await table_events(db)
    assert {key: value for key, value in row.to_dict().items() if key != "id"} == line
    assert log.pending == 0


async def test_secrets_never_reach_the_file_or_the_table(db: Database, tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(db, path)
    log.emit(
        "TOOL_CALL_START",
        scope=ACME,
        details={
            "args": {"api_key": SECRETS[0], "path": "/srv/app/config.json"},
            "headers": ["Authorization: Bearer " + SECRETS[1]],
            "note": f"retrying with token {JWT} after 401",
            "blob": f"value {SECRETS[3]} here",
            "password": SECRETS[4],
        },
        actor="agent with Bearer " + SECRETS[1],
        request_id="r-1",
    )
    await log.flush()

    stored = path.read_text("utf-8") + json.dumps([row.to_dict() for row in await table_events(db)])
    for secret in SECRETS:
        assert secret not in stored
    [line] = file_events(path)
    assert line["details"]["args"] == {"api_key": "[REDACTED]", "path": "/srv/app/config.json"}
    assert line["details"]["headers"] == ["Authorization: Bearer [REDACTED]"]
    assert line["details"]["note"] == "retrying with token [REDACTED] after 401"
    assert line["actor"] == "agent with Bearer [REDACTED]"


async def test_identical_denials_are_written_once_then_counted_when_the_window_closes(
    db: Database, tmp_path: Path
) -> None:
    clock = FakeClock()
    path = tmp_path / "audit.jsonl"
    log = AuditLog(db, path, coalesce_window_s=60.0, clock=clock)
    for _ in range(5):
        deny(log)
        clock.now += 1
    deny(log, tool="fs:delete")  # different details: its own event
    log.emit("ROUTER_OUTPUT", scope=ACME, details={"intent": "file_task"})
    log.emit("ROUTER_OUTPUT", scope=ACME, details={"intent": "file_task"})  # never coalesced
    await log.flush()
    assert [(e["event"], e["details"].get("tool")) for e in file_events(path)] == [
        ("POLICY_DENIED", "fs:write_file"),
        ("POLICY_DENIED", "fs:delete"),
        ("ROUTER_OUTPUT", None),
        ("ROUTER_OUTPUT", None),
    ]

    clock.now += 60
    await log.flush()
    summary = file_events(path)[4:]
    assert [(e["event"], e["details"]) for e in summary] == [
        ("POLICY_DENIED", {"tool": "fs:write_file", "capability": "file_write", "repeated": 4})
    ]
    rows = await table_events(db)
    assert [row.details.get("repeated") for row in rows] == [None, None, None, None, 4]

    deny(log)  # the window closed: the next denial is written again
    await log.flush()
    assert len(file_events(path)) == 6


async def test_denials_of_different_scopes_actors_or_rules_are_not_coalesced(
    db: Database,
) -> None:
    log = AuditLog(db, None, clock=FakeClock())
    deny(log)
    deny(log, scope=GLOBEX)
    log.emit("PERMISSION_DENIED", scope=ACME, details={"tool": "x"}, decided_by="deny[0]")
    log.emit("PERMISSION_DENIED", scope=ACME, details={"tool": "x"}, decided_by="deny[1]")
    log.emit("PERMISSION_DENIED", scope=ACME, details={"tool": "x"}, decided_by="deny[1]")
    log.emit("PERMISSION_DENIED", scope=ACME, details={"tool": "x"}, actor="other")
    await log.flush()
    assert len(await table_events(db)) == 5


async def test_stopping_the_log_writes_the_counts_of_open_windows(
    db: Database, tmp_path: Path
) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(db, path, clock=FakeClock())
    async with log.running():
        for _ in range(3):
            deny(log)
    events = file_events(path)
    assert [e["details"].get("repeated") for e in events] == [None, 2]
    assert len(await table_events(db)) == 2


async def test_the_background_writer_flushes_without_being_asked(db: Database) -> None:
    log = AuditLog(db, None, flush_interval_s=0.01)
    async with log.running():
        log.emit("TOOL_CALL_END", scope=ACME, details={"ok": True})
        with anyio.fail_after(5):  # the writer's own period, not a guess: bounded polling
            for _ in range(1000):
                if await table_events(db):
                    break
                await anyio.sleep(0.01)
    assert [row.event for row in await table_events(db)] == ["TOOL_CALL_END"]


async def test_an_overflowing_queue_drops_the_oldest_and_says_how_many(
    db: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(db, path, max_pending=5)
    with caplog.at_level(logging.WARNING, logger="pml.policy.audit"):
        for index in range(8):
            log.emit("TOOL_CALL_START", scope=ACME, details={"n": index})
        log.emit("TOOL_CALL_START", scope=GLOBEX, details={"n": 8})
    assert len([r for r in caplog.records if "dropping the oldest" in r.message]) == 1
    await log.flush()

    events = file_events(path)
    assert [e["details"]["n"] for e in events[:5]] == [4, 5, 6, 7, 8]
    assert [(e["event"], e["scope"], e["details"]) for e in events[5:]] == [
        (AUDIT_DROPPED, "acme.webapp", {"dropped": 4, "reason": "queue_full"})
    ]
    assert log.dropped == 4
    rows = await table_events(db)
    assert [row.event for row in rows] == ["TOOL_CALL_START"] * 5 + [AUDIT_DROPPED]
    assert rows[-1].details == {"dropped": 4, "reason": "queue_full"}

    log.emit("TOOL_CALL_START", scope=ACME, details={"n": 9})
    await log.flush()  # the episode is over: no new marker
    assert [e["event"] for e in file_events(path)[6:]] == ["TOOL_CALL_START"]


async def test_listeners_get_scrubbed_events_and_their_failures_stay_contained(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    log = AuditLog(db, None, clock=FakeClock())
    seen: list[dict[str, Any]] = []

    def broken(_event: dict[str, Any]) -> None:
        raise RuntimeError("listener bug")

    log.add_listener(broken)
    remove = log.add_listener(seen.append)
    with caplog.at_level(logging.ERROR, logger="pml.policy.audit"):
        log.emit("PERMISSION_CHECK", scope=ACME, details={"token": "abc123secret"})
        deny(log)
        deny(log)  # coalesced in the log, yet each one reaches the listeners
    assert "listener bug" in caplog.text
    assert [event["event"] for event in seen] == [
        "PERMISSION_CHECK",
        "POLICY_DENIED",
        "POLICY_DENIED",
    ]
    assert seen[0]["details"] == {"token": "[REDACTED]"}
    seen[0]["details"]["token"] = "mutated"  # a listener cannot change what is written
    remove()
    log.emit("TOOL_CALL_END", scope=ACME, details={})
    assert len(seen) == 3
    await log.flush()
    rows = await table_events(db)
    assert [row.event for row in rows] == ["PERMISSION_CHECK", "POLICY_DENIED", "TOOL_CALL_END"]
    assert rows[0].details == {"token": "[REDACTED]"}


async def test_a_database_outage_loses_nothing_once_it_recovers(
    db: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(db, path)
    async with db.transaction() as conn:
        await conn.execute(sa.text("ALTER TABLE audit_events RENAME TO audit_events_away"))
    with caplog.at_level(logging.WARNING, logger="pml.policy.audit"):
        log.emit("TOOL_CALL_START", scope=ACME, details={"n": 1})
        await log.flush()
        log.emit("TOOL_CALL_START", scope=ACME, details={"n": 2})
        await log.flush()
        failures = [r for r in caplog.records if "could not write to the database" in r.message]
        assert len(failures) == 1  # logged once, not at every retry
        assert log.pending == 2
        assert [e["details"]["n"] for e in file_events(path)] == [1, 2]  # the file carried on

        async with db.transaction() as conn:
            await conn.execute(sa.text("ALTER TABLE audit_events_away RENAME TO audit_events"))
        log.emit("TOOL_CALL_START", scope=ACME, details={"n": 3})
        await log.flush()
    assert "writing to the database again" in caplog.text
    assert [row.details["n"] for row in await table_events(db)] == [1, 2, 3]
    assert [e["details"]["n"] for e in file_events(path)] == [1, 2, 3]
    assert log.pending == 0


async def test_a_file_that_cannot_be_written_is_retried_without_loss(
    db: Database, tmp_path: Path
) -> None:
    blocker = tmp_path / "blocked"
    blocker.write_text("a file where the log's folder should be")
    path = blocker / "audit.jsonl"
    log = AuditLog(db, path)
    log.emit("TOOL_CALL_START", scope=ACME, details={"n": 1})
    await log.flush()
    assert len(await table_events(db)) == 1  # the table carried on
    blocker.unlink()
    log.emit("TOOL_CALL_START", scope=ACME, details={"n": 2})
    await log.flush()
    assert [e["details"]["n"] for e in file_events(path)] == [1, 2]


@pytest.mark.skipif(not DEV_FULL.exists(), reason="/dev/full is Linux-only")
async def test_a_full_disk_keeps_the_lines_for_the_next_write(tmp_path: Path) -> None:
    sink = AuditFile(DEV_FULL)
    entry = AuditEntry(
        ts=datetime(2025, 1, 2, tzinfo=UTC),
        event="TOOL_CALL_START",
        org="acme",
        project="webapp",
        details={"n": 1},
    )
    sink.add([entry, entry])
    error = await sink.write()
    assert isinstance(error, OSError)
    assert len(sink) == 2
    sink.path = tmp_path / "audit.jsonl"
    assert await sink.write() is None
    assert len(sink) == 0
    assert len(file_events(sink.path)) == 2


async def test_a_sink_backlog_is_bounded_and_the_loss_is_recorded(db: Database) -> None:
    log = AuditLog(db, None, max_pending=3)
    async with db.transaction() as conn:
        await conn.execute(sa.text("ALTER TABLE audit_events RENAME TO audit_events_away"))
    for index in range(5):
        log.emit("TOOL_CALL_START", scope=ACME, details={"n": index})
        await log.flush()
    async with db.transaction() as conn:
        await conn.execute(sa.text("ALTER TABLE audit_events_away RENAME TO audit_events"))
    await log.flush()
    await log.flush()
    rows = await table_events(db)
    assert [(row.event, row.details) for row in rows] == [
        ("TOOL_CALL_START", {"n": 2}),
        ("TOOL_CALL_START", {"n": 3}),
        ("TOOL_CALL_START", {"n": 4}),
        (AUDIT_DROPPED, {"dropped": 2, "reason": "database_unavailable"}),
    ]
    assert log.dropped == 2


INJECTIONS = [
    "'; DROP TABLE audit_events; --",
    'x"}\n{"event": "PERMISSION_GRANTED", "org": "acme"}\n',
    "line\u2028separator\u2029paragraph\x85next",
    "\x1b[31mred\x1b[0m \u202eevil\u202c \x00nul \ud800lone",
    "{{7*7}} ${jndi:ldap://x} <script>alert(1)</script>",
]


async def test_hostile_details_are_stored_bounded_and_one_line_per_event(
    db: Database, tmp_path: Path
) -> None:
    class Opaque:
        def __str__(self) -> str:
            raise ValueError("cannot print")

    deep: dict[str, Any] = {}
    node = deep
    for _ in range(10_000):
        node["d"] = {}
        node = node["d"]
    path = tmp_path / "audit.jsonl"
    log = AuditLog(db, path)
    for text in INJECTIONS:
        log.emit(
            "EXECUTOR_RESPONSE",
            scope=ACME,
            details={"text": text, text: 1},
            decided_by=text,
            actor=text,
            request_id=text,
        )
    log.emit(
        "EXECUTOR_RESPONSE",
        scope=ACME,
        details={"huge": "a " * 2_500_000, "deep": deep, "set": {1}, "obj": Opaque()},
        decided_by="r" * 500,
    )
    await log.flush()

    lines = path.read_text("utf-8").splitlines()
    assert len(lines) == len(INJECTIONS) + 1
    events = [json.loads(line) for line in lines]
    assert all(event["event"] == "EXECUTOR_RESPONSE" for event in events)
    assert events[0]["details"]["text"] == INJECTIONS[0]
    assert (
        events[3]["details"]["text"] == "\x1b[31mred\x1b[0m \u202eevil\u202c \ufffdnul \ufffdlone"
    )
    assert len(lines[-1]) < 20_000
    rows = await table_events(db)
    assert len(rows) == len(INJECTIONS) + 1
    assert rows[1].details["text"] == INJECTIONS[1]
    assert rows[-1].decided_by == "r" * 200  # cut to the column, the whole batch stored
    assert rows[-1].details["set"] == [1]
    assert rows[-1].details["obj"] == "[unprintable Opaque]"
    async with db.read() as conn:  # the injection stayed data
        assert (await conn.execute(sa.text("SELECT count(*) FROM audit_events"))).scalar() == 6


async def test_bad_calls_are_logged_and_dropped_without_raising(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    log = AuditLog(db, None)
    bad: list[dict[str, Any]] = [
        {"event": 42, "scope": ACME, "details": {}},
        {"event": "lower_case", "scope": ACME, "details": {}},
        {"event": "X" * 500, "scope": ACME, "details": {}},
        {"event": "TOOL_CALL_END", "scope": "acme.webapp", "details": {}},
        {"event": "TOOL_CALL_END", "scope": None, "details": {}},
    ]
    with caplog.at_level(logging.WARNING, logger="pml.policy.audit"):
        for call in bad:
            log.emit(**call)
    assert len(caplog.records) == len(bad)
    log.emit("TOOL_CALL_END", scope=ACME, details=["not", "a", "mapping"])  # type: ignore[arg-type]
    log.emit("TOOL_CALL_END", scope=ACME, details=None)  # type: ignore[arg-type]
    log.emit("TOOL_CALL_END", scope=ACME, details={}, actor=12345, request_id=7)  # type: ignore[arg-type]
    await log.flush()
    rows = await table_events(db)
    assert [row.details for row in rows] == [{"value": ["not", "a", "mapping"]}, {}, {}]
    assert (rows[2].actor, rows[2].request_id) == ("12345", "7")


async def test_events_emitted_from_worker_threads_are_all_written(db: Database) -> None:
    log = AuditLog(db, None)

    def burst(worker: int) -> None:
        for index in range(250):
            log.emit("TOOL_CALL_END", scope=ACME, details={"w": worker, "i": index})

    async with anyio.create_task_group() as group:
        for worker in range(4):
            group.start_soon(anyio.to_thread.run_sync, burst, worker)
    await log.flush()
    rows = await table_events(db)
    assert len(rows) == 1000
    assert len({(row.details["w"], row.details["i"]) for row in rows}) == 1000


async def test_a_log_without_sinks_accepts_events() -> None:
    auditor: Auditor = AuditLog(None, None)
    auditor.emit("TOOL_CALL_END", scope=ACME, details={"ok": True})
    assert isinstance(auditor, AuditLog)
    assert auditor.pending == 1
    await auditor.flush()
    assert auditor.pending == 0


async def test_an_error_of_the_block_is_raised_as_it_is_after_the_last_flush(
    tmp_path: Path,
) -> None:
    log = AuditLog(None, tmp_path / "audit.jsonl")

    async def fail_inside() -> None:
        async with log.running():
            log.emit("TOOL_CALL_END", scope=ACME, details={"ok": True})
            raise NotFound("Capability not found: x")

    with pytest.raises(NotFound):  # not an exception group
        await fail_inside()
    assert json.loads((tmp_path / "audit.jsonl").read_text())["event"] == "TOOL_CALL_END"
