"""The durable trace queue: FIFO on disk, refusals, the cap, parents before children,
crash safety (a SIGKILLed writer) and two processes on one file."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import stat
import subprocess
import sys
import tempfile
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pml.client.trace_queue import MAX_TRACE_BYTES, QueuedTrace, TraceQueue, prepare_trace
from pml.errors import InvalidInput, StorageError

SUBPROCESS_TIMEOUT_S = 120


def trace(n: int, trace_id: str | None = None, parent: str | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"traceId": trace_id or f"t{n}", "workflowId": f"wf-{n}", "n": n}
    if parent is not None:
        item["parentId"] = parent
    return item


def numbers(batch: list[QueuedTrace]) -> list[int]:
    return [item.trace["n"] for item in batch]


def test_traces_come_back_oldest_first_until_removed(queue: TraceQueue) -> None:
    ids = [queue.put(trace(n)) for n in range(5)]
    assert ids == sorted(ids)
    assert queue.count() == 5
    first = queue.peek(3)
    assert numbers(first) == [0, 1, 2]
    assert numbers(queue.peek(3)) == [0, 1, 2]  # peeking removes nothing
    queue.remove([item.id for item in first])
    assert queue.count() == 2
    assert numbers(queue.peek(100)) == [3, 4]
    queue.remove([first[0].id, 10_000])  # ids no longer queued are ignored
    assert queue.count() == 2
    assert queue.peek(0) == []


def test_traces_survive_closing_and_reopening_and_the_file_is_private(queue_path: Path) -> None:
    with TraceQueue(queue_path) as queue:
        for n in range(3):
            queue.put(trace(n, parent="x" if n else None))
        sidecars = [path for path in queue_path.parent.iterdir() if path != queue_path]
        for path in [queue_path, *sidecars]:
            assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, path
    with TraceQueue(queue_path) as reopened:
        assert reopened.count() == 3
        assert [item.trace for item in reopened.peek()] == [
            trace(0),
            trace(1, parent="x"),
            trace(2, parent="x"),
        ]
    assert stat.S_IMODE(queue_path.stat().st_mode) == 0o600


def test_unicode_and_nul_characters_round_trip(queue: TraceQueue) -> None:
    text = "héllo \u0000 wörld 🚀 \u202e \uffff"
    queue.put({"traceId": "u", "text": text, "nested": [{"k": text}]})
    [item] = queue.peek()
    assert item.trace["text"] == text
    assert item.trace["nested"][0]["k"] == text


@pytest.mark.parametrize(
    "bad",
    [
        {"traceId": "a", "value": object()},
        {"traceId": "a", "value": float("nan")},
        {"traceId": "a", "value": "lone \ud800 surrogate"},
        {"traceId": "a", "blob": "x" * (MAX_TRACE_BYTES + 1)},
        {"traceId": "a", ("tuple", "key"): 1},
        "not a mapping",
    ],
    ids=["object", "nan", "surrogate", "too-large", "tuple-key", "not-a-mapping"],
)
def test_a_trace_json_cannot_hold_or_too_large_is_refused(queue: TraceQueue, bad: Any) -> None:
    queue.put(trace(1))
    with pytest.raises(InvalidInput):
        queue.put(bad)
    assert numbers(queue.peek()) == [1]


def test_a_self_referencing_trace_is_refused(queue: TraceQueue) -> None:
    loop: dict[str, Any] = {"traceId": "a"}
    loop["self"] = loop
    with pytest.raises(InvalidInput):
        queue.put(loop)
    assert queue.count() == 0


def test_a_trace_just_under_the_size_limit_is_kept(queue: TraceQueue) -> None:
    overhead = len(json.dumps({"traceId": "a", "blob": ""}, separators=(",", ":")))
    queue.put({"traceId": "a", "blob": "x" * (MAX_TRACE_BYTES - overhead)})
    assert queue.count() == 1


def test_a_full_queue_drops_its_oldest_traces_with_one_warning(
    queue_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with TraceQueue(queue_path, max_items=3) as queue, caplog.at_level(logging.WARNING):
        for n in range(6):
            queue.put(trace(n))
        assert queue.count() == 3
        assert numbers(queue.peek()) == [3, 4, 5]
        assert queue.dropped == 3
    warnings = [r for r in caplog.records if "trace queue full" in r.getMessage()]
    assert len(warnings) == 1


def test_a_child_queued_before_its_parent_comes_after_it(queue: TraceQueue) -> None:
    queue.put(trace(1, "child", parent="parent"))
    queue.put(trace(2, "other"))
    queue.put(trace(3, "grandchild", parent="child"))
    queue.put(trace(4, "parent"))
    assert numbers(queue.peek()) == [4, 1, 2, 3]


def test_a_small_batch_never_holds_a_child_without_its_queued_parent(queue: TraceQueue) -> None:
    queue.put(trace(1, "c", parent="b"))
    queue.put(trace(2, "b", parent="a"))
    queue.put(trace(3, "a"))
    first = queue.peek(2)
    assert numbers(first) == [3, 2]
    queue.remove([item.id for item in first])
    assert numbers(queue.peek(2)) == [1]


def test_a_child_whose_parent_is_gone_is_sent_in_order(queue: TraceQueue) -> None:
    parent = queue.put(trace(1, "p"))
    queue.put(trace(2, "c", parent="p"))
    queue.put(trace(3, "orphan", parent="never-queued"))
    queue.remove([parent])
    assert numbers(queue.peek()) == [2, 3]


@pytest.mark.parametrize(
    "links",
    [
        [("a", "b"), ("b", "a")],
        [("a", "a")],
        [("x", "a"), ("a", "b"), ("b", "c"), ("c", "a")],
    ],
    ids=["two", "self", "tail-into-loop"],
)
def test_a_loop_of_parent_ids_does_not_block_the_queue(
    queue: TraceQueue, links: list[tuple[str, str]]
) -> None:
    for n, (trace_id, parent) in enumerate(links):
        queue.put(trace(n, trace_id, parent=parent))
    queue.put(trace(99, "after"))
    seen: list[int] = []
    for _ in range(len(links) + 1):
        batch = queue.peek(1)
        if not batch:
            break
        seen += numbers(batch)
        queue.remove([item.id for item in batch])
    assert sorted(seen) == [*range(len(links)), 99]
    assert queue.count() == 0


@settings(max_examples=60, deadline=None)
@given(
    parents=st.lists(st.integers(min_value=-1, max_value=24), min_size=1, max_size=20),
    limit=st.integers(min_value=1, max_value=6),
)
def test_batches_send_queued_parents_first_and_drain_any_graph(
    parents: list[int], limit: int
) -> None:
    with tempfile.TemporaryDirectory() as folder, TraceQueue(Path(folder) / "q.db") as queue:
        for n, parent in enumerate(parents):
            queue.put(trace(n, f"t{n}", parent=f"t{parent}" if parent >= 0 else None))
        queued = set(range(len(parents)))
        for _ in range(len(parents)):
            peeked = queue.peek(limit)
            batch = numbers(peeked)
            assert 1 <= len(batch) <= limit
            for position, n in enumerate(batch):
                parent = parents[n]
                if parent in queued and parent not in batch[:position]:
                    # only the oldest trace of a loop may go before its queued parent
                    assert n == min(_loop_through(parents, n, queued), default=-1), (parents, batch)
            queue.remove([item.id for item in peeked])
            queued -= set(batch)
            if not queued:
                break
        assert queue.count() == 0


def _loop_through(parents: list[int], start: int, queued: set[int]) -> set[int]:
    """The queued traces on a loop of parent links through ``start`` (empty: none)."""
    path: list[int] = []
    node = start
    while node in queued and node not in path:
        path.append(node)
        node = parents[node]
    loop = path[path.index(node) :] if node in path else []
    return set(loop) if start in loop else set()


def test_prepare_trace_fills_in_id_and_utc_timestamp() -> None:
    prepared = prepare_trace(
        {
            "workflowId": "wf",
            "success": True,
            "durationMs": 1,
            "timestamp": "2025-06-01T14:00:00+02:00",
        }
    )
    assert uuid.UUID(prepared["traceId"]).version == 4
    assert prepared["timestamp"] == "2025-06-01T12:00:00.000+00:00"
    assert prepared["taskResults"] == []


def test_a_closed_queue_raises_storage_error(queue_path: Path) -> None:
    queue = TraceQueue(queue_path)
    queue.close()
    queue.close()
    with pytest.raises(StorageError):
        queue.put(trace(1))


def test_an_unreadable_entry_is_dropped_instead_of_blocking(queue: TraceQueue) -> None:
    queue.put(trace(1))
    with contextlib.closing(sqlite3.connect(queue.path)) as raw, raw:
        raw.execute("INSERT INTO traces (trace_id, parent_id, body) VALUES ('x', NULL, '{nope')")
    queue.put(trace(2))
    assert numbers(queue.peek()) == [1, 2]
    assert queue.count() == 2


_WRITER = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from pml.client.trace_queue import TraceQueue

    queue = TraceQueue(Path(sys.argv[1]))
    prefix, count, die = sys.argv[2], int(sys.argv[3]), sys.argv[4] == "kill"
    print("ready", flush=True)
    sys.stdin.readline()  # every writer starts at once
    for n in range(count):
        queue.put({"traceId": f"{prefix}{n}", "workflowId": prefix, "n": n})
        if n % 50 == 0:
            queue.peek(20)
    if die:
        os.kill(os.getpid(), signal.SIGKILL)
    queue.close()
    """
)


def _run_writers(path: Path, count: int, prefixes: str, *, kill: bool) -> list[int]:
    """Start one writer per prefix, let them put ``count`` traces each at once; exit codes."""
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path), prefix, str(count), "kill" * kill],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for prefix in prefixes
    ]
    for writer in writers:
        assert writer.stdout is not None
        line = writer.stdout.readline()  # b"" if it died: then communicate() says why
        assert line == b"ready\n", writer.communicate(timeout=SUBPROCESS_TIMEOUT_S)[1].decode()
    for writer in writers:
        assert writer.stdin is not None
        writer.stdin.write(b"go\n")
        writer.stdin.flush()
    codes: list[int] = []
    for writer in writers:
        _, stderr = writer.communicate(timeout=SUBPROCESS_TIMEOUT_S)
        assert writer.returncode in (0, -9), stderr.decode()
        codes.append(writer.returncode)
    return codes


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")
def test_every_trace_put_survives_a_sigkill_of_the_writer(queue_path: Path) -> None:
    assert _run_writers(queue_path, 300, "k", kill=True) == [-9]
    with TraceQueue(queue_path) as reopened:
        assert reopened.count() == 300
        assert numbers(reopened.peek(300)) == list(range(300))
        reopened.put(trace(300))
        assert reopened.count() == 301


def test_two_processes_writing_one_file_lose_nothing(queue_path: Path) -> None:
    TraceQueue(queue_path).close()  # created once, so both writers open an existing file
    assert _run_writers(queue_path, 1000, "ab", kill=False) == [0, 0]
    with TraceQueue(queue_path) as queue:
        assert queue.count() == 2000
        batch = queue.peek(2000)
        for prefix in ("a", "b"):
            mine = [item.trace["n"] for item in batch if item.trace["workflowId"] == prefix]
            assert mine == list(range(1000))
    with contextlib.closing(sqlite3.connect(queue_path)) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert raw.execute("SELECT n FROM queue_size").fetchone() == (2000,)


def test_a_queue_can_be_opened_where_the_parent_folders_do_not_exist(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "traces.db"
    with TraceQueue(path) as queue:
        queue.put(trace(1))
    assert path.exists()
    assert os.stat(path.parent).st_mode & 0o077 == 0


@pytest.mark.parametrize(
    ("error", "sent"),
    [
        ("no mailbox john.doe@example.com", "no mailbox [EMAIL]"),
        ("call +33 6 12 34 56 78 failed", "call [PHONE] failed"),
        ("dial (555) 123-4567", "dial [PHONE]"),
        ("took 1234 ms at 2026-11-24 06:57:52", "took 1234 ms at 2026-11-24 06:57:52"),
        (
            "v1.2.3 of 904f8816-fe15-4ed5-a960-7b745b2c0812",
            "v1.2.3 of 904f8816-fe15-4ed5-a960-7b745b2c0812",
        ),
    ],
)
def test_personal_data_in_errors_and_task_results_never_leaves(error: str, sent: str) -> None:
    prepared = prepare_trace(
        {
            "workflowId": "wf_1",
            "success": False,
            "durationMs": 1,
            "error": error,
            "taskResults": [{"tool": "crm:lookup", "error": error, "nested": [error]}],
        }
    )
    assert prepared["error"] == sent
    assert prepared["taskResults"] == [{"tool": "crm:lookup", "error": sent, "nested": [sent]}]
