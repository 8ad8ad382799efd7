"""``POST /api/traces`` on a real uvicorn with API keys, on SQLite and PostgreSQL: the hand-off
made over ``/mcp`` by a caller announcing itself as ``pml connect``, then its traces; bad
keys, bad bodies and oversized batches refused whole; an internal failure says nothing of
its cause (SPEC §9, §11)."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from execution.clientrouting import READ_INTENT, READ_NOTE, Hub, open_hub, trace
from gateway.upstreams import data_of
from pml.execution.capture import CaptureService
from pml.execution.clients import CLIENT_HEADER, SERVERS_HEADER
from pml.gateway.http import running_http
from pml.gateway.keys import ApiKeys
from pml.web import api_traces as traces_api

pytestmark = pytest.mark.anyio

TIMEOUT = httpx.Timeout(10.0)
CONNECT = {CLIENT_HEADER: "pml-connect/1.0", SERVERS_HEADER: "filesystem"}


@dataclass
class Served:
    url: str
    hub: Hub
    acme: str
    globex: str
    http: httpx.AsyncClient

    async def post(
        self, key: str | None, body: object = None, *, content: Any = None, **headers: str
    ) -> httpx.Response:
        sent = dict(headers)
        if key is not None:
            sent["Authorization"] = f"Bearer {key}"
        if content is None:
            content = json.dumps(body).encode()
        return await self.http.post(f"{self.url}/api/traces", content=content, headers=sent)

    async def results(self, traces: list[Any], key: str | None = None, **headers: str) -> list[Any]:
        response = await self.post(key or self.acme, {"traces": traces}, **headers)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == "application/json"
        return response.json()["results"]

    @asynccontextmanager
    async def mcp(self, key: str, headers: dict[str, str]) -> AsyncIterator[Client]:
        """An SDK client on ``/mcp`` with ``key`` and extra ``headers``."""
        sent = {"Authorization": f"Bearer {key}", **headers}
        async with create_mcp_http_client(headers=sent) as session:
            transport = streamable_http_client(f"{self.url}/mcp", http_client=session)
            async with Client(transport) as client:
                yield client

    async def hand_off(self, code: str = READ_NOTE) -> str:
        """``pml_execute`` over ``/mcp`` as ``pml connect``: the workflow id handed back."""
        async with self.mcp(self.acme, CONNECT) as client:
            answer = data_of(
                await client.call_tool("pml_execute", {"intent": READ_INTENT, "code": code})
            )
        assert answer["status"] == "execute_locally", answer
        return answer["workflowId"]


@pytest.fixture
async def served(database_url: str) -> AsyncGenerator[Served]:
    async with open_hub(database_url, routing={"local": ["filesystem"]}) as hub:
        keys = ApiKeys(hub.gateway.db)
        acme = (await keys.create("acme", "webapp", user="erwan"))[0]
        globex = (await keys.create("globex", "site", user="gina"))[0]
        async with running_http(hub.gateway) as url, httpx.AsyncClient(timeout=TIMEOUT) as http:
            yield Served(url, hub, acme, globex, http)


def _error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == code
    return body["error"]


@pytest.mark.parametrize("key", [None, "pml_not-a-real-key-000000000000000000", "x" * 600])
async def test_requests_without_a_valid_key_get_401_and_change_nothing(
    served: Served, key: str | None
) -> None:
    wid = await served.hand_off()
    response = await served.post(key, {"traces": [trace(wid)]})
    _error(response, 401, "UNAUTHORIZED")
    assert "results" not in response.text
    assert await served.hub.state(wid) is not None


async def test_a_pml_client_gets_the_hand_off_over_http_and_its_traces_end_it(
    served: Served,
) -> None:
    first, second = await served.hand_off(), await served.hand_off()
    results = await served.results(
        [
            trace(first, traceId="t-1"),
            trace("wf_unknown", traceId="t-2"),
            trace(second, traceId="t-3", success=False, error="boom"),
            {"workflowId": "wf_broken", "traceId": "t-4"},
            trace(first, traceId="t-5"),
        ]
    )
    assert [(r["traceId"], r["status"]) for r in results] == [
        ("t-1", "captured"),
        ("t-2", "expired"),
        ("t-3", "failed"),
        ("t-4", "rejected"),
        ("t-5", "duplicate"),
    ]
    assert results[0]["capabilityFqdn"].startswith("acme.webapp.")
    assert results[0]["created"] is True
    assert served.hub.sent() == []
    counts = await served.hub.counts()
    assert (counts["capabilities"], counts["traces"], counts["states"]) == (1, 2, 0)
    again = await served.results([trace(first), trace(second)])  # a retried batch
    assert [r["status"] for r in again] == ["duplicate", "duplicate"]


async def test_an_agent_over_http_is_told_to_run_pml_connect(served: Served) -> None:
    for headers in ({}, {CLIENT_HEADER: "not-pml/1.0", SERVERS_HEADER: "filesystem"}):
        async with served.mcp(served.acme, headers) as client:
            arguments = {"intent": READ_INTENT, "code": READ_NOTE}
            result = await client.call_tool("pml_execute", arguments)
        assert result.is_error is True
        assert result.structured_content is not None
        error = result.structured_content["error"]
        assert error["code"] == "CLIENT_TOOLS_REQUIRE_CLIENT"
        assert "pml connect" in error["message"]


async def test_another_tenants_key_cannot_end_a_workflow(served: Served) -> None:
    wid = await served.hand_off()
    [stolen] = await served.results([trace(wid)], key=served.globex)
    assert stolen["status"] == "rejected"
    assert await served.hub.state(wid) is not None
    [owned] = await served.results([trace(wid)])
    assert owned["status"] == "captured"
    [replayed] = await served.results([trace(wid)], key=served.globex)
    assert replayed["status"] == "rejected"


def _offline(workflow_id: str) -> dict[str, Any]:
    return trace(workflow_id, offline={"code": READ_NOTE, "intent": READ_INTENT})


async def test_an_offline_run_may_use_only_the_servers_the_client_announces(
    served: Served,
) -> None:
    refused = [
        ({}, "wf_c_no_header"),
        ({CLIENT_HEADER: "pml-connect/1.0", SERVERS_HEADER: "git"}, "wf_c_git"),
        ({CLIENT_HEADER: "garbage", SERVERS_HEADER: "filesystem"}, "wf_c_garbage"),
    ]
    for headers, wid in refused:
        [result] = await served.results([_offline(wid)], **headers)
        assert result["status"] == "rejected", (headers, result)
    assert (await served.hub.counts())["capabilities"] == 0
    [learned] = await served.results([_offline("wf_c_ok")], **CONNECT)
    assert learned["status"] == "captured"
    [again] = await served.results([_offline("wf_c_ok")], **CONNECT)
    assert again["status"] == "duplicate"


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"not json",
        b"\xff\xfe\x00garbage",
        b'{"traces": [',
        b"[]",
        b'"traces"',
        b"42",
        b"null",
        b"{}",
        b'{"traces": {}}',
        b'{"traces": "wf_1"}',
        b'{"traces": null}',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"traces": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    ],
    ids=[
        "empty",
        "text",
        "binary",
        "cut",
        "a-list",
        "a-string",
        "a-number",
        "null",
        "no-traces",
        "traces-an-object",
        "traces-a-string",
        "traces-null",
        "deeply-nested",
        "deeply-nested-traces",
    ],
)
async def test_a_body_that_is_not_an_object_with_a_list_of_traces_is_a_400(
    served: Served, content: bytes
) -> None:
    response = await served.post(served.acme, content=content)
    error = _error(response, 400, "INVALID_INPUT")
    assert error["field"] == "traces"


async def test_more_than_a_hundred_traces_is_a_413(served: Served) -> None:
    wid = await served.hand_off()
    batch = [trace(wid)] + [trace(f"wf_{n}") for n in range(100)]
    error = _error(await served.post(served.acme, {"traces": batch}), 413, "INVALID_INPUT")
    assert "101" in error["message"]
    assert await served.hub.state(wid) is not None


async def test_a_body_over_the_limit_is_a_413_whether_declared_or_streamed(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(traces_api, "MAX_BODY_BYTES", 1000)
    wid = await served.hand_off()
    body = json.dumps({"traces": [trace(wid, error="e" * 2000, success=False)]}).encode()
    _error(await served.post(served.acme, content=body), 413, "INVALID_INPUT")

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it comes
        for start in range(0, len(body), 100):
            yield body[start : start + 100]

    _error(await served.post(served.acme, content=chunks()), 413, "INVALID_INPUT")
    assert await served.hub.state(wid) is not None
    small = json.dumps({"traces": [trace(wid)]}).encode()
    assert len(small) < 1000
    response = await served.post(served.acme, content=small)
    assert response.status_code == 200
    assert response.json()["results"][0]["status"] == "captured"


async def test_an_unexpected_failure_is_a_500_that_tells_nothing_and_loses_nothing(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    wid = await served.hand_off()

    async def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("secret internals /srv/pml/capture.py")

    # Failure injection only: nothing else in these tests is replaced.
    monkeypatch.setattr(CaptureService, "capture", broken)
    response = await served.post(served.acme, {"traces": [trace(wid)]})
    error = _error(response, 500, "INTERNAL_ERROR")
    assert "retry" in error["message"]
    for leak in ("Traceback", "RuntimeError", "secret internals", "capture.py"):
        assert leak not in response.text
    monkeypatch.undo()
    assert await served.hub.state(wid) is not None  # put back: the retry captures it
    [retried] = await served.results([trace(wid)])
    assert retried["status"] == "captured"
