"""``POST /api/traces`` refuses, before parsing, a body that would cost more to parse than
the largest legitimate batch, and still takes that batch from the real PML client, on a
real uvicorn (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from execution.clientrouting import Hub, open_hub, trace
from gateway.test_traces_api import Served, _error  # pyright: ignore[reportPrivateUsage]
from pml.client.outgoing import prepare_trace
from pml.client.syncer import MAX_BATCH, TraceSyncer
from pml.client.trace_queue import MAX_TRACE_BYTES, TraceQueue
from pml.gateway.http import running_http
from pml.gateway.keys import ApiKeys
from pml.web import api_traces

pytestmark = pytest.mark.anyio

TIMEOUT = httpx.Timeout(60.0)
MiB = 1024 * 1024


@pytest.fixture
async def served(database_url: str) -> AsyncGenerator[Served]:
    async with open_hub(database_url, routing={"local": ["filesystem"]}) as hub:
        keys = ApiKeys(hub.gateway.db)
        acme = (await keys.create("acme", "webapp", user="erwan"))[0]
        globex = (await keys.create("globex", "site", user="gina"))[0]
        async with running_http(hub.gateway) as url, httpx.AsyncClient(timeout=TIMEOUT) as http:
            yield Served(url, hub, acme, globex, http)


def spam(unit: bytes, count: int) -> bytes:
    return b'{"traces":[' + b",".join([unit] * count) + b"]}"


async def nothing_changed(hub: Hub, workflow_id: str) -> None:
    assert await hub.state(workflow_id) is not None
    counts = await hub.counts()
    assert (counts["capabilities"], counts["traces"]) == (0, 0)


def test_one_largest_trace_always_fits_and_a_full_batch_of_them_too() -> None:
    assert MAX_BATCH * MAX_TRACE_BYTES < api_traces.MAX_BODY_BYTES < 27 * MiB
    per_trace = min(api_traces.MAX_PUNCTUATION, api_traces.MAX_CONTAINERS)
    assert per_trace > api_traces.TRACE_BYTES  # a trace all of brackets still passes alone


@pytest.mark.parametrize(
    ("unit", "count"),
    [
        (b"{}", 4_000_000),  # 11 MiB, 4 million dicts: the flood of empty objects, smaller
        (b"[0.5,0.5]", 400_000),  # lists are the costliest values to make
        (b"0", 2_000_000),  # no container, only values
        (b'["x",0.5]', 400_000),  # strings too: counted exactly outside them, still over
    ],
)
async def test_a_body_of_too_many_values_is_a_413_before_it_is_parsed_and_changes_nothing(
    served: Served, unit: bytes, count: int
) -> None:
    wid = await served.hand_off()
    body = spam(unit, count)
    assert len(body) < api_traces.MAX_BODY_BYTES  # under the size limit: the count refuses it
    with anyio.fail_after(20):
        response = await served.post(served.acme, content=body)
    error = _error(response, 413, "INVALID_INPUT")
    assert error["field"] == "traces"
    assert "Too many JSON values" in error["message"]  # not "Too many traces: ...": unparsed
    assert str(api_traces.MAX_PUNCTUATION) in error["message"]
    await nothing_changed(served.hub, wid)


async def test_the_red_teams_32_mib_body_is_a_413_by_its_size(served: Served) -> None:
    wid = await served.hand_off()
    body = spam(b"{}", 32 * MiB // 3)
    with anyio.fail_after(20):
        response = await served.post(served.acme, content=body)
    error = _error(response, 413, "INVALID_INPUT")
    assert "Body too large (max: 26.6 MiB" in error["message"]
    await nothing_changed(served.hub, wid)


def largest_trace(workflow_id: str) -> dict[str, Any]:
    """A trace whose queued JSON is just under the client's ``MAX_TRACE_BYTES``: the largest
    ``pml connect`` sends (it scrubs task results down to 256, but sends an offline run's
    code as written)."""
    tasks = [
        {"tool": "filesystem:read_text_file", "argsDigest": f"d{n:015d}", "durationMs": 1.5}
        for n in range(256)
    ]
    offline = {"code": "", "intent": "read the note"}
    sent: dict[str, Any] = trace(workflow_id, taskResults=tasks, offline=offline)

    def size(value: dict[str, Any]) -> int:
        text = json.dumps(prepare_trace(value), ensure_ascii=False, separators=(",", ":"))
        return len(text.encode())

    line = 'note = {"a": [1, 2], "b": "x"}\n'
    room = MAX_TRACE_BYTES - size(sent) - 64
    offline["code"] = line * (room // (len(json.dumps(line)) - 2))  # as JSON escapes it
    assert MAX_TRACE_BYTES - 1024 < size(sent) <= MAX_TRACE_BYTES
    return sent


async def test_the_pml_client_sends_its_largest_batch_in_one_request(
    served: Served, tmp_path: Path
) -> None:
    wid = await served.hand_off()
    posted: list[int] = []

    async def seen(request: httpx.Request) -> None:
        posted.append(len(request.content))

    hooks = {"request": [seen]}
    async with httpx.AsyncClient(event_hooks=hooks, trust_env=False) as http:
        with TraceQueue(tmp_path / "traces.db") as queue:
            syncer = TraceSyncer(
                queue, base_url=served.url, api_key=served.acme, http=http, request_timeout_s=120
            )
            syncer.enqueue(trace(wid))
            for index in range(MAX_BATCH - 1):
                syncer.enqueue(largest_trace(f"wf_offline_{index}"))
            assert syncer.pending == MAX_BATCH
            with anyio.fail_after(180):
                report = await syncer.sync_once()

    assert report.error is None, report
    assert len(posted) == 1  # one request: not refused, not split
    assert 24 * MiB < posted[0] <= api_traces.MAX_BODY_BYTES
    assert (report.sent, report.removed, report.dropped) == (MAX_BATCH, MAX_BATCH, 0)
    assert sum(report.statuses.values()) == MAX_BATCH
    assert report.statuses["captured"] >= 1, report.statuses
    assert await served.hub.state(wid) is None
