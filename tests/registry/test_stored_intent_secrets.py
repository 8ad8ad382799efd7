"""A secret typed into an intent is stored nowhere: not in the capability's creation intent,
not in its run traces (the remembered intents are covered in test_intents_execute.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from pml.registry.models import CapabilityDraft
from pml.registry.scope import Scope
from pml.registry.service import CapabilityRegistry
from pml.storage.database import Database
from pml.storage.tables import capability_records, execution_traces
from pml.storage.trace_repo import SqlTraceRepository, TraceRow

pytestmark = pytest.mark.anyio

SCOPE = Scope("acme", "webapp", "erwan")
# Credential shapes the audit scrubs (assembled so that no literal secret sits in this file).
TOKENS = [
    "ghp_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2",
    "sk-" + "live9f8e7d6c5b4a39f8e7d6c5b4a39f8e7d6",
    "AKIA" + "ABCDEFGHIJKLMNOP",
]


async def _stored_text(db: Database) -> str:
    async with db.read() as conn:
        intents = (await conn.execute(sa.select(capability_records.c.intent))).scalars().all()
        traces = (await conn.execute(sa.select(execution_traces.c.intent))).scalars().all()
    return "\n".join(str(text) for text in (*intents, *traces))


@pytest.mark.parametrize("token", TOKENS)
async def test_a_token_in_the_creation_intent_is_scrubbed_before_it_is_stored(
    db: Database, token: str
) -> None:
    registry = CapabilityRegistry(db)
    intent = f"call the deploy api with token {token} and report"
    result = await registry.capture(
        SCOPE, CapabilityDraft(code="return 1", intent=intent), latency_ms=1.0
    )
    assert token not in (result.record.intent or "")
    assert "deploy api" in (result.record.intent or "")  # the rest of the intent stays
    assert token not in await _stored_text(db)


@pytest.mark.parametrize("token", TOKENS)
async def test_a_token_in_a_run_intent_is_scrubbed_in_its_trace(db: Database, token: str) -> None:
    row = TraceRow(
        id="t-1",
        org=SCOPE.org,
        project=SCOPE.project,
        user_id=SCOPE.user,
        intent=f"fetch with {token}",
        capability_fqdn=None,
        success=True,
        error=None,
        duration_ms=1.0,
        task_results=[],
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    async with db.transaction() as conn:
        await SqlTraceRepository(conn).insert_many([row])
    stored = await _stored_text(db)
    assert token not in stored
    assert "fetch with" in stored


@pytest.mark.parametrize(
    "intent",
    ["lire le fichier « été » 📄", "'; DROP TABLE capability_records; --", "a\tb\nc", "x" * 9000],
)
async def test_ordinary_and_hostile_intents_are_kept_as_written(db: Database, intent: str) -> None:
    registry = CapabilityRegistry(db)
    result = await registry.capture(
        SCOPE, CapabilityDraft(code="return 2", intent=intent), latency_ms=1.0
    )
    stored = result.record.intent or ""
    assert stored[:200] == intent[:200]
    assert stored == intent
