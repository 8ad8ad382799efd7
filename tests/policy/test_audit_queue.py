"""A full audit queue drops from the org with the most events waiting: one org's flood loses
its own events, never another org's, and what is written keeps the order events came in."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pml.policy.audit import AUDIT_DROPPED, AuditLog
from pml.policy.audit_queue import FairQueue
from pml.registry.scope import Scope
from pml.storage.database import Database
from policy.test_audit import file_events

pytestmark = pytest.mark.anyio

ACME = Scope("acme", "webapp", "erwan")
GLOBEX = Scope("globex", "site", "gina")
INITECH = Scope("initech", "tps", "peter")


def org_of(item: tuple[str, int]) -> str:
    return item[0]


def test_a_flood_drops_its_own_oldest_and_keeps_the_others() -> None:
    queue = FairQueue[tuple[str, int]](4, org_of)
    assert queue.push(("globex", 0)) is None
    for n in range(1, 10):
        queue.push(("acme", n))
    assert len(queue) == 4
    assert queue.waiting_for("globex") == 1
    assert queue.drain() == [("globex", 0), ("acme", 7), ("acme", 8), ("acme", 9)]
    assert len(queue) == 0
    assert queue.drain() == []


def test_equal_orgs_lose_their_oldest_first() -> None:
    queue = FairQueue[tuple[str, int]](4, org_of)
    for item in [("a", 0), ("b", 1), ("a", 2), ("b", 3)]:
        queue.push(item)
    assert queue.push(("c", 4)) == ("a", 0)  # a and b hold 2 each; a's is the oldest
    assert queue.push(("c", 5)) == ("b", 1)
    assert queue.drain() == [("a", 2), ("b", 3), ("c", 4), ("c", 5)]


@given(st.lists(st.sampled_from("abc"), max_size=60), st.integers(1, 8))
def test_any_stream_is_bounded_ordered_and_fair(orgs: list[str], limit: int) -> None:
    queue = FairQueue[tuple[str, int]](limit, org_of)
    dropped: list[tuple[str, int]] = []
    for index, org in enumerate(orgs):
        held = {name: queue.waiting_for(name) for name in "abc"}
        lost = queue.push((org, index))
        if lost is not None:  # only an org holding the most loses one
            assert held[lost[0]] == max(held.values())
            dropped.append(lost)
        assert len(queue) <= limit
    kept = queue.drain()
    assert len(kept) == min(limit, len(orgs))
    assert kept == sorted(kept, key=lambda item: item[1])  # the order they came in
    assert sorted(kept + dropped) == list(enumerate_orgs(orgs))  # none lost unsaid


def enumerate_orgs(orgs: list[str]) -> list[tuple[str, int]]:
    return sorted((org, index) for index, org in enumerate(orgs))


async def test_another_org_s_events_survive_a_flood_of_denials(
    db: Database, tmp_path: Path
) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(db, path, max_pending=10)
    log.emit("TOOL_CALL_START", scope=GLOBEX, details={"n": "first"})
    log.emit("TOOL_CALL_START", scope=INITECH, details={"n": "second"})
    for index in range(200):  # distinct details: nothing is coalesced
        log.emit("TOOL_CALL_START", scope=ACME, details={"n": index})
    log.emit("TOOL_CALL_START", scope=GLOBEX, details={"n": "last"})
    await log.flush()

    written = [(e["scope"], e["event"], e["details"]) for e in file_events(path)]
    others = [w for w in written if w[0] != "acme.webapp"]
    assert others == [
        ("globex.site", "TOOL_CALL_START", {"n": "first"}),
        ("initech.tps", "TOOL_CALL_START", {"n": "second"}),
        ("globex.site", "TOOL_CALL_START", {"n": "last"}),
    ]
    acme = [w[2] for w in written if w[0] == "acme.webapp"]
    assert acme[:-1] == [{"n": n} for n in range(193, 200)]  # its newest 7
    assert acme[-1] == {"dropped": 193, "reason": "queue_full"}
    assert written[-1][1] == AUDIT_DROPPED
    assert log.dropped == 193
