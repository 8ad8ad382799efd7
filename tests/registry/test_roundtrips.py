"""What capturing a run asks of the database: at most three round trips to create a capability.

The meter (``RoundTrips``) sees every statement any engine sends (``before_cursor_execute``
on the ``Engine`` class, so the inline SQLite engine of point reads is counted too). On
PostgreSQL asyncpg sends a transaction's ``BEGIN`` and ``COMMIT``/``ROLLBACK`` outside the
cursor, so each transaction not in autocommit mode adds two round trips. On SQLite nothing
crosses a network: the count is the statements, transaction control (``BEGIN IMMEDIATE``)
left out.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Self

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from pml.analysis.snippet import analyze_snippet
from pml.errors import NameTaken
from pml.execution.capture import CaptureService, RunReport
from pml.execution.recorder import UsageRecorder
from pml.execution.references import Plan
from pml.registry import naming
from pml.registry.changes import CapabilityChange
from pml.registry.models import ListQuery
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry
from pml.storage.capability_repo import SqlCapabilityRepository
from pml.storage.database import Database

pytestmark = pytest.mark.anyio

READ = "text = await mcp.filesystem.read_text_file(path='a.json')\nreturn text"
_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK")


class RoundTrips:
    """Records statements and transactions while the ``with`` block runs."""

    def __init__(self) -> None:
        self.statements: list[str] = []
        self.transactions = 0

    def _statement(self, *args: Any) -> None:
        self.statements.append(" ".join(str(args[2]).split())[:200])

    def _begin(self, conn: sa.Connection) -> None:
        if conn.get_execution_options().get("isolation_level") != "AUTOCOMMIT":
            self.transactions += 1

    def __enter__(self) -> Self:
        event.listen(sa.Engine, "before_cursor_execute", self._statement)
        event.listen(sa.Engine, "begin", self._begin)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        event.remove(sa.Engine, "before_cursor_execute", self._statement)
        event.remove(sa.Engine, "begin", self._begin)

    def queries(self) -> list[str]:
        """The statements sent, transaction control left out."""
        return [s for s in self.statements if not s.upper().startswith(_CONTROL)]

    def count(self, dialect: str) -> int:
        """Round trips on ``dialect`` (see the module docstring)."""
        extra = 2 * self.transactions if dialect == "postgresql" else 0
        return len(self.queries()) + extra


def report(scope: Scope, code: str, tools: tuple[str, ...] = ("filesystem:read_text_file",)):
    return RunReport(
        scope=scope,
        intent="read a.json",
        analysis=analyze_snippet(code, max_code_bytes=100_000),
        plan=Plan(),
        called=tools,
        task_results=[],
        duration_ms=3.5,
    )


@pytest.fixture
def capture(registry: CapabilityRegistry, db: Database) -> CaptureService:
    # Not entered: nothing is flushed in the background while the meter runs.
    return CaptureService(registry, UsageRecorder(db))


async def test_capturing_new_code_takes_at_most_three_round_trips(
    capture: CaptureService, registry: CapabilityRegistry, db: Database, scope: Scope
) -> None:
    await capture.capture(report(scope, "return 0"), None, None)  # warm the engine's pool
    heard: list[CapabilityChange] = []

    async def listener(change: CapabilityChange) -> None:
        heard.append(change)

    registry.on_change(listener)
    with RoundTrips() as trips:
        record, created = await capture.capture(report(scope, READ), None, None)
    assert created
    assert trips.count(db.dialect) <= 3, trips.statements
    assert [(c.fqdn, c.kind) for c in heard] == [(record.fqdn, "captured_unnamed")]
    stored = (await registry.resolve(scope, record.fqdn)).record
    assert stored.display_name.startswith("unnamed_")
    assert (stored.usage_count, stored.success_count, stored.total_latency_ms) == (1, 1, 3.5)
    assert stored.routing == "local"
    async with db.read() as conn:
        versions = await SqlCapabilityRepository(conn).versions_of(record.fqdn)
    assert [(v.version, v.change_summary, v.code_hash) for v in versions] == [
        (1, "created", stored.code_hash)
    ]


async def test_capturing_new_code_under_a_name_takes_at_most_three_round_trips(
    capture: CaptureService, registry: CapabilityRegistry, db: Database, scope: Scope
) -> None:
    await capture.capture(report(scope, "return 0"), None, None)
    with RoundTrips() as trips:
        record, created = await capture.capture(report(scope, READ), "fs:read_json", None)
    assert created
    assert trips.count(db.dialect) <= 3, trips.statements
    found = await registry.resolve(scope, "mcp__fs__read_json")
    assert (found.record.fqdn, found.record.display_name, found.record.named) == (
        record.fqdn,
        "fs:read_json",
        True,
    )


async def test_checking_a_name_before_a_run_is_one_round_trip(
    capture: CaptureService, db: Database, scope: Scope
) -> None:
    await capture.capture(report(scope, "return 0"), "taken", None)
    code_hash = analyze_snippet(READ, max_code_bytes=100_000).code_hash
    with RoundTrips() as trips:
        assert await naming.check_name_before_run(db, scope, "fresh", code_hash) == "fresh"
    assert trips.count(db.dialect) <= 1, trips.statements
    with RoundTrips() as trips, pytest.raises(NameTaken) as caught:
        await naming.check_name_before_run(db, scope, "taken", code_hash)
    assert caught.value.message == "Capability name 'taken' already exists in scope acme.webapp"
    assert trips.count(db.dialect) <= 1, trips.statements


async def test_reusing_known_code_is_one_round_trip_and_writes_later(
    capture: CaptureService, db: Database, scope: Scope
) -> None:
    first, _ = await capture.capture(report(scope, READ), None, None)
    with RoundTrips() as trips:
        again, created = await capture.capture(report(scope, READ), None, None)
    assert (again.fqdn, created) == (first.fqdn, False)
    assert trips.count(db.dialect) <= 1, trips.statements


async def test_a_capture_racing_a_name_still_gets_the_exact_name_taken_message(
    registry: CapabilityRegistry, scope: Scope
) -> None:
    await registry.capture(scope, CapabilityDraft(code="return 1", name="fs:read"), latency_ms=1)
    with pytest.raises(NameTaken) as caught:
        await registry.capture(scope, CapabilityDraft(code=READ, name="fs:read"), latency_ms=1)
    assert caught.value.message == "Capability name 'fs:read' already exists in scope acme.webapp"
    # the tool name of one is the display name of the other: the same namespace
    with pytest.raises(NameTaken):
        await registry.capture(
            scope, CapabilityDraft(code=READ, name="mcp__fs__read"), latency_ms=1
        )


async def test_one_statement_creation_stores_tags_version_tag_and_hostile_text_exactly(
    registry: CapabilityRegistry, db: Database, scope: Scope
) -> None:
    code = "text = \"x'); DROP TABLE capability_records; --\"\nreturn text + ' ünï ☃ \\u0000'"
    intent = "读取 'quotes' \"and\" $1 :name ?" * 300
    tags = [f"t{n}:x.y-z" for n in range(32)]
    result = await registry.capture(
        scope,
        CapabilityDraft(code=code, intent=intent, tags=tags, version_tag="1.2.0"),
        latency_ms=0,
    )
    assert result.created
    found = (await registry.resolve(scope, f"{result.record.display_name}@v1.2.0")).record
    assert (found.code, found.intent, found.tags) == (code, intent, tags)
    async with db.read() as conn:
        versions = await SqlCapabilityRepository(conn).versions_of(found.fqdn)
    assert [(v.version, v.version_tag, v.code) for v in versions] == [(1, "v1.2.0", code)]
    page = await registry.list(scope, ListQuery(tags=("t31:x.y-z",)))
    assert [item.fqdn for item in page.items] == [found.fqdn]
