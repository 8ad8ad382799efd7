"""The trace syncer against a real HTTP server on loopback: batching, exactly-once across
an outage, Retry-After, backoff, splitting, refused keys, order, redaction, hostile traces,
and the flush at exit."""

from __future__ import annotations

import itertools
import json
import logging
import random
import socket
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import pytest

from pml.client.sync_answers import backoff_delay, parse_retry_after
from pml.client.syncer import SyncReport, TraceSyncer
from pml.client.trace_queue import MAX_TRACE_BYTES, TraceQueue
from pml.errors import ConfigError

if TYPE_CHECKING:
    from client.conftest import FakeTraceServer, Responder

pytestmark = pytest.mark.anyio

API_KEY = "pml_test_0123456789abcdef"
LIMIT_S = 20  # the bound on every wait: generous, a slow machine must not fail a test


class _Top(random.Random):
    """A random source that always draws the top of the range (jitter switched off)."""

    def random(self) -> float:
        return 1.0


def make_syncer(queue: TraceQueue, url: str, **options: Any) -> TraceSyncer:
    settings: dict[str, Any] = {
        "api_key": API_KEY,
        "base_delay_s": 0.01,
        "max_delay_s": 0.05,
        "request_timeout_s": 5.0,
        "rng": random.Random(7),
    }
    settings.update(options)
    return TraceSyncer(queue, base_url=url, **settings)


def trace(n: int, **fields: Any) -> dict[str, Any]:
    item: dict[str, Any] = {
        "traceId": str(uuid.uuid4()),
        "workflowId": f"wf-{n}",
        "success": True,
        "durationMs": n,
        "taskResults": [{"tool": "fs:read_file", "n": n}],
    }
    item.update(fields)
    return item


def workflows(server: FakeTraceServer) -> list[str]:
    return [item["workflowId"] for item in server.traces]


async def test_250_traces_go_in_three_ordered_requests_of_at_most_100(
    server: FakeTraceServer, queue: TraceQueue
) -> None:
    syncer = make_syncer(queue, server.url, batch_size=500)
    assert syncer.batch_size == 100
    for n in range(250):
        syncer.enqueue(trace(n))
    with anyio.fail_after(LIMIT_S):
        left = await syncer.flush(LIMIT_S)
    await syncer.aclose()
    assert left == 0
    assert [len(batch) for batch in server.batches] == [100, 100, 50]
    assert workflows(server) == [f"wf-{n}" for n in range(250)]
    assert set(server.authorizations) == {f"Bearer {API_KEY}"}


async def test_traces_queued_while_the_server_is_down_arrive_exactly_once(
    down_server: FakeTraceServer, quiet_socket: socket.socket, queue: TraceQueue
) -> None:
    syncer = make_syncer(queue, down_server.url)
    early = [trace(n) for n in range(30)]
    for item in early:
        syncer.enqueue(item)
    report = await syncer.sync_once()
    assert report.error is not None
    assert "no answer" in report.error
    assert report.removed == 0
    assert report.retry_after_s is not None
    assert syncer.pending == 30
    late = [trace(n) for n in range(30, 40)]
    async with syncer.running(flush_timeout_s=LIMIT_S):
        for item in late[:5]:
            syncer.enqueue(item)  # while the server is still down
        async with down_server.serving(quiet_socket):
            await down_server.wait_until(lambda: len(down_server.traces) >= 35)
            for item in late[5:]:
                syncer.enqueue(item)
            await down_server.wait_until(lambda: len(down_server.traces) >= 40)
    sent = Counter(down_server.trace_ids)
    assert set(sent) == {item["traceId"] for item in early + late}
    assert set(sent.values()) == {1}
    assert syncer.pending == 0


async def test_server_errors_keep_the_batch_until_it_is_captured_once(
    server: FakeTraceServer, queue: TraceQueue
) -> None:
    server.respond((500, {"error": {"code": "INTERNAL_ERROR", "message": "db down"}}), (503, None))
    syncer = make_syncer(queue, server.url)
    sent = [trace(n) for n in range(3)]
    for item in sent:
        syncer.enqueue(item)
    reports = [await syncer.sync_once() for _ in range(3)]
    await syncer.aclose()
    assert [r.removed for r in reports] == [0, 0, 3]
    assert reports[0].error is not None
    assert "HTTP 500: db down" in reports[0].error
    assert reports[2] == SyncReport(sent=3, removed=3, statuses={"captured": 3})
    assert len(server.batches) == 3
    assert server.batches[0] == server.batches[2]  # the same traces, retried as they were


async def test_429_waits_for_retry_after_before_sending_again(
    server: FakeTraceServer, queue: TraceQueue
) -> None:
    server.respond((429, None, {"Retry-After": "0.2"}))
    syncer = make_syncer(queue, server.url, max_delay_s=30.0)
    async with syncer.running():
        syncer.enqueue(trace(1))
        await server.wait_until(lambda: len(server.batches) >= 2)
    assert server.arrivals[1] - server.arrivals[0] >= 0.2
    assert server.batches[0] == server.batches[1]
    assert syncer.pending == 0


async def test_retry_after_is_capped_and_a_garbage_one_means_backoff(
    server: FakeTraceServer, queue: TraceQueue
) -> None:
    server.respond(
        (429, None, {"Retry-After": "3600"}),
        (429, None, {"Retry-After": "soon"}),
        (429, None),
    )
    syncer = make_syncer(queue, server.url, base_delay_s=0.5, max_delay_s=2.0, rng=_Top())
    syncer.enqueue(trace(1))
    waits = [(await syncer.sync_once()).retry_after_s for _ in range(3)]
    await syncer.aclose()
    assert waits == [2.0, 1.0, 2.0]  # capped; then backoff 0.5 * 2**1, 0.5 * 2**2 (capped)
    assert syncer.pending == 1


def test_retry_after_reads_seconds_and_http_dates() -> None:
    now = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(" 0.25 ") == 0.25
    assert parse_retry_after(format_datetime(now + timedelta(seconds=30)), now=now) == 30.0
    assert parse_retry_after(format_datetime(now - timedelta(seconds=30)), now=now) == 0.0
    for garbage in (None, "", "soon", "-3", "nan", "inf", "Mon, 99 Foo 2025"):
        assert parse_retry_after(garbage, now=now) is None, garbage


def test_backoff_grows_to_the_cap_and_is_jittered() -> None:
    tops = [backoff_delay(k, base_s=0.5, max_s=60.0, rng=_Top()) for k in range(9)]
    assert tops == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]
    assert backoff_delay(10_000, base_s=0.5, max_s=60.0, rng=_Top()) == 60.0
    rng = random.Random(3)
    draws = [backoff_delay(3, base_s=0.5, max_s=60.0, rng=rng) for _ in range(50)]
    assert all(0.0 <= draw <= 4.0 for draw in draws)
    assert len(set(draws)) > 40  # spread out, not one value
    assert min(draws) < 2.0 < max(draws)


async def test_consecutive_failures_double_the_wait_and_a_success_resets_it(
    server: FakeTraceServer, queue: TraceQueue
) -> None:
    server.respond((500, None), (500, None), (500, None), (200, None), (502, None))
    syncer = make_syncer(queue, server.url, base_delay_s=0.5, max_delay_s=60.0, rng=_Top())
    syncer.enqueue(trace(1))
    waits = [(await syncer.sync_once()).retry_after_s for _ in range(4)]
    syncer.enqueue(trace(2))
    after = (await syncer.sync_once()).retry_after_s
    await syncer.aclose()
    assert waits == [0.5, 1.0, 2.0, None]
    assert after == 0.5


@pytest.mark.parametrize("status", [400, 413, 422])
async def test_a_refused_batch_is_split_and_only_the_poison_trace_is_dropped(
    server: FakeTraceServer,
    queue: TraceQueue,
    caplog: pytest.LogCaptureFixture,
    status: int,
) -> None:
    def refuse_poison(traces: list[dict[str, Any]]) -> tuple[int, Any]:
        if any(item["workflowId"] == "poison" for item in traces):
            return status, {"error": {"code": "INVALID_INPUT", "message": "bad durationMs"}}
        return 200, None

    server.fallback = refuse_poison
    syncer = make_syncer(queue, server.url)
    sent = [trace(0), trace(1), trace(2, workflowId="poison"), trace(3), trace(4)]
    for item in sent:
        syncer.enqueue(item)
    with caplog.at_level(logging.WARNING):
        report = await syncer.sync_once()
    await syncer.aclose()
    assert report == SyncReport(sent=5, removed=5, dropped=1, statuses={"captured": 4})
    assert [len(batch) for batch in server.batches] == [5, 1, 1, 1, 1, 1]
    assert syncer.pending == 0
    [error] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert sent[2]["traceId"] in error.getMessage()
    assert "bad durationMs" in error.getMessage()


@pytest.mark.parametrize("status", [401, 403])
async def test_a_refused_api_key_keeps_every_trace_and_waits_the_maximum_delay(
    server: FakeTraceServer,
    queue: TraceQueue,
    caplog: pytest.LogCaptureFixture,
    status: int,
) -> None:
    server.fallback = lambda traces: (status, {"error": {"code": "UNAUTHORIZED", "message": "no"}})
    syncer = make_syncer(queue, server.url, max_delay_s=45.0)
    for n in range(3):
        syncer.enqueue(trace(n))
    with caplog.at_level(logging.ERROR):
        reports = [await syncer.sync_once() for _ in range(3)]
        with anyio.fail_after(LIMIT_S):
            left = await syncer.flush(600)  # gives up at once: waiting would not help
    await syncer.aclose()
    assert [r.retry_after_s for r in reports] == [45.0, 45.0, 45.0]
    assert left == 3
    assert syncer.pending == 3
    refusals = [r for r in caplog.records if "API key refused by the server" in r.getMessage()]
    assert [r.levelno for r in refusals] == [logging.ERROR]
    assert API_KEY not in caplog.text


async def test_every_status_is_final_and_rejections_are_logged_with_their_message(
    server: FakeTraceServer, queue: TraceQueue, caplog: pytest.LogCaptureFixture
) -> None:
    statuses = ["captured", "duplicate", "expired", "failed", "rejected"]

    def answer(traces: list[dict[str, Any]]) -> tuple[int, Any]:
        results = [
            {"traceId": t["traceId"], "workflowId": t["workflowId"], "status": s, "message": s}
            for t, s in zip(traces, statuses, strict=True)
        ]
        results[4]["message"] = "unknown workflow wf-4"
        return 200, {"results": results}

    server.respond(answer)
    syncer = make_syncer(queue, server.url)
    for n in range(5):
        syncer.enqueue(trace(n))
    with caplog.at_level(logging.INFO):
        report = await syncer.sync_once()
    await syncer.aclose()
    assert report.statuses == dict.fromkeys(statuses, 1)
    assert report.removed == 5
    assert syncer.pending == 0
    levels = {r.getMessage(): r.levelno for r in caplog.records}
    assert any("unknown workflow wf-4" in m and v == logging.WARNING for m, v in levels.items())
    assert any("expired" in m and v == logging.INFO for m, v in levels.items())


def pending_for(workflow: str, retry_after: object = 2) -> Responder:
    """Answers ``pending`` for the trace of ``workflow`` (another request holds it), and
    ``captured`` for the others."""

    def answer(traces: list[dict[str, Any]]) -> tuple[int, Any]:
        results = [
            {"traceId": t["traceId"], "workflowId": t["workflowId"], "status": "captured"}
            if t["workflowId"] != workflow
            else {
                "traceId": t["traceId"],
                "workflowId": workflow,
                "status": "pending",
                "message": "Another request is capturing this workflow",
                "retryAfterS": retry_after,
            }
            for t in traces
        ]
        return 200, {"results": results}

    return answer


async def test_a_pending_trace_stays_queued_and_is_sent_again_after_its_retry_after(
    server: FakeTraceServer, queue: TraceQueue, caplog: pytest.LogCaptureFixture
) -> None:
    server.respond(pending_for("wf-2", retry_after=2))
    syncer = make_syncer(queue, server.url, max_delay_s=60.0)
    for n in range(1, 4):
        syncer.enqueue(trace(n))
    with caplog.at_level(logging.INFO):
        first = await syncer.sync_once()
    assert first.statuses == {"captured": 2, "pending": 1}
    assert (first.removed, first.error, first.retry_after_s) == (2, None, 2.0)
    assert syncer.pending == 1
    assert any("being captured by another request" in r.getMessage() for r in caplog.records)
    second = await syncer.sync_once()  # the other request ended: a duplicate now
    await syncer.aclose()
    assert second.statuses == {"captured": 1}
    assert (second.removed, second.retry_after_s) == (1, None)
    assert syncer.pending == 0
    assert workflows(server) == ["wf-1", "wf-2", "wf-3", "wf-2"]


@pytest.mark.parametrize(
    ("retry_after", "expected_s"),
    [("5", 0.01), (-3, 0.01), (True, 0.01), (None, 0.01), ([1], 0.01), (1e300, 0.05), (0, 0.01)],
    ids=["text", "negative", "bool", "null", "list", "huge", "zero"],
)
async def test_a_pending_traces_retry_after_is_read_safely(
    server: FakeTraceServer, queue: TraceQueue, retry_after: object, expected_s: float
) -> None:
    server.respond(pending_for("wf-1", retry_after))
    syncer = make_syncer(queue, server.url)  # base 0.01 s, cap 0.05 s
    syncer.enqueue(trace(1))
    report = await syncer.sync_once()
    await syncer.aclose()
    assert report.retry_after_s == expected_s
    assert report.error is None
    assert syncer.pending == 1


async def test_the_background_sender_waits_before_sending_a_pending_trace_again(
    server: FakeTraceServer, queue: TraceQueue
) -> None:
    server.respond(pending_for("wf-1", 0.3), pending_for("wf-1", 0.3))
    syncer = make_syncer(queue, server.url, max_delay_s=5.0)
    async with syncer.running():
        syncer.enqueue(trace(1))
        await server.wait_until(lambda: len(server.batches) == 3, timeout_s=LIMIT_S)
    assert syncer.pending == 0
    gaps = [b - a for a, b in itertools.pairwise(server.arrivals)]
    assert min(gaps) >= 0.25, gaps  # not sent again at once: no busy loop


async def test_a_trace_the_answer_leaves_out_stays_queued(
    server: FakeTraceServer, queue: TraceQueue
) -> None:
    def second_only(traces: list[dict[str, Any]]) -> tuple[int, Any]:
        return 200, {"results": [{"traceId": traces[1]["traceId"], "status": "captured"}]}

    def without_ids(traces: list[dict[str, Any]]) -> tuple[int, Any]:
        return 200, {"results": [{"status": "duplicate"} for _ in traces]}

    server.respond(second_only, (200, "not the expected shape"), without_ids)
    syncer = make_syncer(queue, server.url)
    first, second = trace(1), trace(2)
    syncer.enqueue(first)
    syncer.enqueue(second)
    partial = await syncer.sync_once()
    malformed = await syncer.sync_once()
    final = await syncer.sync_once()
    await syncer.aclose()
    assert partial.removed == 1
    assert partial.error == "the server's answer has no status for 1 traces"
    assert malformed.removed == 0
    assert malformed.error == "the server's answer is not {'results': [...]}"
    assert final.statuses == {"duplicate": 1}  # an answer without ids: matched by position
    assert syncer.pending == 0
    assert server.trace_ids == [first["traceId"], second["traceId"], *[first["traceId"]] * 2]


async def test_a_server_that_does_not_answer_in_time_keeps_the_batch(
    server: FakeTraceServer, queue: TraceQueue
) -> None:
    server.respond((-1, None))  # hangs
    syncer = make_syncer(queue, server.url, request_timeout_s=0.3)
    syncer.enqueue(trace(1))
    with anyio.fail_after(LIMIT_S):
        slow = await syncer.sync_once()
        retried = await syncer.sync_once()
    await syncer.aclose()
    assert slow.removed == 0
    assert slow.error is not None
    assert "no answer" in slow.error
    assert retried.removed == 1
    assert len(set(server.trace_ids)) == 1


async def test_a_child_queued_before_its_parent_is_sent_after_it(
    server: FakeTraceServer, queue: TraceQueue
) -> None:
    parent = trace(1)
    child = trace(2, parentId=parent["traceId"])
    syncer = make_syncer(queue, server.url, batch_size=1)
    syncer.enqueue(child)
    syncer.enqueue(trace(3))
    syncer.enqueue(parent)
    with anyio.fail_after(LIMIT_S):
        assert await syncer.flush(LIMIT_S) == 0
    await syncer.aclose()
    assert workflows(server) == ["wf-1", "wf-2", "wf-3"]
    assert server.traces[1]["parentId"] == parent["traceId"]


async def test_secrets_are_scrubbed_before_the_trace_is_written_or_sent(
    server: FakeTraceServer, queue: TraceQueue, queue_path: Path
) -> None:
    key, token = "sk-live-4f9a8b7c6d5e4f3a2b1c0d9e", "3f9a1c7e5b2d8f40a6c1d2e3"
    syncer = make_syncer(queue, server.url)
    syncer.enqueue(
        trace(
            1,
            success=False,
            taskResults=[{"tool": "http:get", "args": {"api_key": key, "url": "https://x.io"}}],
            error=f"upstream said 401 to 'Authorization: Bearer {token}'",
        )
    )
    on_disk = b"".join(path.read_bytes() for path in queue_path.parent.iterdir())
    assert key.encode() not in on_disk
    assert token.encode() not in on_disk
    await syncer.sync_once()
    await syncer.aclose()
    [sent] = server.traces
    assert sent["taskResults"][0]["args"] == {"api_key": "[REDACTED]", "url": "https://x.io"}
    assert sent["error"] == "upstream said 401 to 'Authorization: Bearer [REDACTED]'"
    assert key not in json.dumps(sent)
    assert token not in json.dumps(sent)


HOSTILE: dict[str, Any] = {
    "not-a-mapping": "trace",
    "none": None,
    "list": [("workflowId", "wf")],
    "workflow-not-text": {"workflowId": 5, "success": True, "durationMs": 1},
    "workflow-empty": {"workflowId": "", "success": True, "durationMs": 1},
    "success-text": {"workflowId": "wf", "success": "yes", "durationMs": 1},
    "duration-nan": {"workflowId": "wf", "success": True, "durationMs": float("nan")},
    "duration-negative": {"workflowId": "wf", "success": True, "durationMs": -1},
    "duration-text": {"workflowId": "wf", "success": True, "durationMs": "12"},
    "duration-bool": {"workflowId": "wf", "success": True, "durationMs": True},
    "duration-huge-int": {"workflowId": "wf", "success": True, "durationMs": 10**400},
    "tasks-text": {"workflowId": "wf", "success": True, "durationMs": 1, "taskResults": "x"},
    "tasks-not-objects": {"workflowId": "wf", "success": True, "durationMs": 1, "taskResults": [1]},
    "error-number": {"workflowId": "wf", "success": False, "durationMs": 1, "error": 42},
    "trace-id-not-uuid": {"workflowId": "wf", "success": True, "durationMs": 1, "traceId": "x"},
    "parent-not-uuid": {"workflowId": "wf", "success": True, "durationMs": 1, "parentId": 12},
    "timestamp-text": {"workflowId": "wf", "success": True, "durationMs": 1, "timestamp": "now"},
    "timestamp-out-of-range": {
        "workflowId": "wf",
        "success": True,
        "durationMs": 1,
        "timestamp": "0001-01-01T00:00:00+05:00",
    },
    "key-not-text": {"workflowId": "wf", "success": True, "durationMs": 1, 5: "five"},
    "too-large": {"workflowId": "w" * (MAX_TRACE_BYTES + 10), "success": True, "durationMs": 1},
}


@pytest.mark.parametrize("name", list(HOSTILE))
async def test_a_hostile_trace_is_dropped_without_raising_and_others_still_arrive(
    server: FakeTraceServer, queue: TraceQueue, caplog: pytest.LogCaptureFixture, name: str
) -> None:
    syncer = make_syncer(queue, server.url)
    before, after = trace(1), trace(2)
    with caplog.at_level(logging.WARNING):
        syncer.enqueue(before)
        syncer.enqueue(HOSTILE[name])
        syncer.enqueue(after)
    assert "dropped a trace" in caplog.text
    assert syncer.pending == 2
    await syncer.sync_once()
    await syncer.aclose()
    assert server.trace_ids == [before["traceId"], after["traceId"]]


async def test_odd_but_valid_values_arrive_as_storable_json(
    server: FakeTraceServer, queue: TraceQueue
) -> None:
    syncer = make_syncer(queue, server.url)
    loop: dict[str, Any] = {"name": "loop"}
    loop["self"] = loop
    odd = trace(
        1,
        workflowId="wf\x00\ud800-ünïcode-🚀",
        taskResults=[
            {"value": object(), "items": {1, 2}, "text": "a\x00b\udc00c", "emoji": "🚀"},
            loop,
            *({"blob": "x" * 4000, "i": i} for i in range(200)),  # over 256 KiB before scrub
        ],
        durationMs=12.5,
        extra_field="left out",
    )
    syncer.enqueue(odd)
    await syncer.sync_once()
    await syncer.aclose()
    [sent] = server.traces
    assert sent["workflowId"] == "wf\ufffd\ufffd-ünïcode-🚀"
    first = sent["taskResults"][0]
    assert first["text"] == "a\ufffdb\ufffdc"
    assert first["emoji"] == "🚀"
    assert isinstance(first["value"], str)
    assert sorted(first["items"]) == [1, 2]
    assert "extra_field" not in sent
    assert len(json.dumps(sent).encode()) < MAX_TRACE_BYTES
    assert all(isinstance(item, dict) for item in sent["taskResults"])
    assert sent["taskResults"][1]["name"] == "loop"  # cut at the scrubber's depth bound


async def test_a_missing_trace_id_and_timestamp_are_added(
    server: FakeTraceServer, queue: TraceQueue
) -> None:
    syncer = make_syncer(queue, server.url)
    bare = {"workflowId": "wf", "success": True, "durationMs": 3}
    given_id = uuid.uuid4()
    syncer.enqueue(bare)
    syncer.enqueue({**bare, "traceId": str(given_id).upper(), "timestamp": "2025-06-01T12:00:00"})
    await syncer.sync_once()
    await syncer.aclose()
    first, second = server.traces
    assert uuid.UUID(first["traceId"]).version == 4
    stamped = datetime.fromisoformat(first["timestamp"])
    assert stamped.utcoffset() == timedelta(0)
    assert abs((datetime.now(UTC) - stamped).total_seconds()) < 600
    assert second["traceId"] == str(given_id)
    assert second["timestamp"] == "2025-06-01T12:00:00.000+00:00"
    assert first["taskResults"] == []


async def test_running_sends_in_the_background_and_flushes_at_exit(
    server: FakeTraceServer, queue: TraceQueue
) -> None:
    syncer = make_syncer(queue, server.url, poll_interval_s=60.0)
    async with syncer.running():
        for n in range(3):
            syncer.enqueue(trace(n))
        await server.wait_until(lambda: len(server.traces) >= 3)  # woken, not polled
        for n in range(3, 5):
            syncer.enqueue(trace(n))
    assert sorted(workflows(server)) == [f"wf-{n}" for n in range(5)]
    assert syncer.pending == 0


async def test_traces_left_by_an_earlier_process_are_sent_at_start(
    server: FakeTraceServer, queue_path: Path
) -> None:
    with TraceQueue(queue_path) as earlier:
        offline = make_syncer(earlier, server.url)
        left = [trace(n) for n in range(4)]
        for item in left:
            offline.enqueue(item)
    with TraceQueue(queue_path) as queue:
        syncer = make_syncer(queue, server.url, poll_interval_s=60.0)
        async with syncer.running():
            await server.wait_until(lambda: len(server.traces) >= 4)
    assert server.trace_ids == [item["traceId"] for item in left]


async def test_a_trace_queued_from_a_worker_thread_is_sent_at_the_next_poll(
    server: FakeTraceServer, queue: TraceQueue
) -> None:
    syncer = make_syncer(queue, server.url, poll_interval_s=0.1)
    async with syncer.running():
        await anyio.to_thread.run_sync(syncer.enqueue, trace(1))
        await server.wait_until(lambda: len(server.traces) >= 1)
    assert workflows(server) == ["wf-1"]


async def test_the_flush_at_exit_is_bounded_and_leaves_the_rest_on_disk(
    down_server: FakeTraceServer, queue_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with TraceQueue(queue_path) as queue:
        syncer = make_syncer(queue, down_server.url)
        started = time.monotonic()
        with caplog.at_level(logging.INFO), anyio.fail_after(LIMIT_S):
            async with syncer.running(flush_timeout_s=0.3):
                for n in range(5):
                    syncer.enqueue(trace(n))
        assert time.monotonic() - started < 10
    assert "5 traces left on disk" in caplog.text
    with TraceQueue(queue_path) as reopened:
        assert reopened.count() == 5


async def test_an_error_in_the_block_is_raised_unwrapped_after_the_flush(
    server: FakeTraceServer, queue: TraceQueue
) -> None:
    syncer = make_syncer(queue, server.url, poll_interval_s=60.0)

    async def fail_inside() -> None:
        async with syncer.running():
            syncer.enqueue(trace(1))
            raise LookupError("boom")

    with pytest.raises(LookupError, match="boom"):
        await fail_inside()
    assert workflows(server) == ["wf-1"]


async def test_a_queue_that_fails_never_reaches_the_caller(
    queue: TraceQueue, caplog: pytest.LogCaptureFixture
) -> None:
    syncer = make_syncer(queue, "http://127.0.0.1:9")
    queue.close()
    with caplog.at_level(logging.ERROR):
        syncer.enqueue(trace(1))
    assert "could not queue a trace" in caplog.text


@pytest.mark.parametrize(
    "url", ["ftp://pml.example.com", "pml.example.com", "http://", "http://[::1"]
)
def test_the_server_url_must_be_http(queue: TraceQueue, url: str) -> None:
    with pytest.raises(ConfigError):
        TraceSyncer(queue, base_url=url, api_key=API_KEY)


@pytest.mark.parametrize("key", ["", "pml_key\r\nX-Injected: 1", "clé"])
def test_the_api_key_must_be_header_safe(queue: TraceQueue, key: str) -> None:
    with pytest.raises(ConfigError):
        TraceSyncer(queue, base_url="http://127.0.0.1:9", api_key=key)
