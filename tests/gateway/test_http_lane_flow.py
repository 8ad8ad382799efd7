"""What happens around a call the HTTP lane answers: audit, observed steps, the session it
belongs to, cancellation and slow calls (real uvicorn, real pool, in-process upstreams)."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Generator
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import pytest

from gateway.upstreams import Upstream, gateway_settings
from gateway.waiting_upstream import ENVELOPE, MODERN, Waiter
from pml.gateway import http_lane, http_lane_wire
from pml.gateway.http import running_http
from pml.gateway.keys import ApiKeys
from pml.gateway.server import Gateway, open_gateway
from pml.registry.scope import Scope
from pml.telemetry import observe
from pml.telemetry.observe import Step
from pml.upstream.pool import ClientPool

pytestmark = pytest.mark.anyio

WAIT_S = 10.0


@dataclass
class Served:
    gateway: Gateway
    lane_url: str
    sdk_url: str
    key: str
    prefix: str
    http: httpx.AsyncClient

    def headers(self, session: str | None = None, **extra: str) -> dict[str, str]:
        base = {
            "Authorization": f"Bearer {self.key}",
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        }
        if session is not None:
            base["Mcp-Session-Id"] = session
        return base | extra

    def modern_headers(self, name: str) -> dict[str, str]:
        return self.headers(
            **{"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": name}
        )

    async def open_session(self, url: str) -> str:
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "flow", "version": "1"},
            },
        }
        opened = await self.http.post(f"{url}/mcp", json=init, headers=self.headers())
        session = opened.headers["mcp-session-id"]
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        await self.http.post(f"{url}/mcp", json=note, headers=self.headers(session))
        return session


@pytest.fixture
def waiter() -> Waiter:
    return Waiter()


@pytest.fixture
async def served(sqlite_url: str, waiter: Waiter) -> AsyncGenerator[Served]:
    pool = ClientPool({"a": Upstream("a").server, "slow": waiter.server})
    settings = gateway_settings(sqlite_url, expose_upstream=True)
    async with open_gateway(settings, pool=pool) as gateway:
        key, record = await ApiKeys(gateway.db).create("acme", "webapp", user="ana")
        await gateway.tools.list_page(gateway.default_scope, None)  # as a client lists first
        async with (
            running_http(gateway) as lane_url,
            running_http(gateway, fast_lane=False) as sdk_url,
            httpx.AsyncClient(timeout=WAIT_S) as http,
        ):
            yield Served(gateway, lane_url, sdk_url, key, record.prefix, http)


@dataclass
class Steps:
    """An observer keeping the ``tool_call`` steps."""

    seen: list[Step] = field(default_factory=list[Step])

    def begin(self, step: Step) -> object:
        return None

    def end(self, step: Step, token: object) -> None:
        if step.kind == "tool_call":
            self.seen.append(step)


@pytest.fixture
def steps() -> Generator[Steps]:
    observer = Steps()
    observe.add_observer(observer)
    yield observer
    observe.remove_observer(observer)


def call(request_id: int, name: str, **params: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": params | {"name": name},
    }


async def test_a_lane_call_is_audited_and_observed_as_the_sdk_s_call_is(
    served: Served, steps: Steps
) -> None:
    audited: dict[str, list[tuple[Any, ...]]] = {}
    for side, url in (("lane", served.lane_url), ("sdk", served.sdk_url)):
        session = await served.open_session(url)
        seen: list[dict[str, Any]] = []
        remove = served.gateway.policy.audit.add_listener(seen.append)
        try:
            body = call(1, "a__echo", arguments={"text": "hi"})
            answer = await served.http.post(
                f"{url}/mcp", json=body, headers=served.headers(session)
            )
        finally:
            remove()
        assert answer.status_code == 200
        audited[side] = [
            (e["event"], e["scope"], e["actor"], e["decided_by"], sorted(e["details"]))
            for e in seen
        ]
    modern = call(2, "a__fail", arguments={}, _meta=ENVELOPE)
    failed = await served.http.post(
        f"{served.lane_url}/mcp", json=modern, headers=served.modern_headers("a__fail")
    )

    assert failed.json()["result"]["isError"] is True
    assert [event[0] for event in audited["lane"]].count("TOOL_CALL_END") == 1
    assert audited["lane"] == audited["sdk"]
    shown = [(s.attributes, s.outcome) for s in steps.seen]
    expected = {"tool": "a__echo", "lane": "mcp", "key": served.prefix, "user": "ana"}
    assert shown[0] == shown[1] == (expected, "ok")
    assert shown[2] == ({**expected, "tool": "a__fail"}, "tool_error")


async def test_a_session_that_only_called_through_the_lane_hears_of_tool_list_changes(
    served: Served,
) -> None:
    session = await served.open_session(served.lane_url)
    before = served.gateway.server.notifier.scopes()
    body = call(1, "a__echo", arguments={})
    await served.http.post(f"{served.lane_url}/mcp", json=body, headers=served.headers(session))

    assert Scope("acme", "webapp", "ana") not in before
    assert Scope("acme", "webapp", "ana") in served.gateway.server.notifier.scopes()


async def test_a_session_s_cancellation_stops_a_lane_call_which_ends_with_request_cancelled(
    served: Served, waiter: Waiter
) -> None:
    session = await served.open_session(served.lane_url)
    answers: list[httpx.Response] = []
    acknowledged: list[httpx.Response] = []
    url = f"{served.lane_url}/mcp"

    async def slow_call() -> None:
        body = call(41, "slow__wait", arguments={})
        answers.append(await served.http.post(url, json=body, headers=served.headers(session)))

    with anyio.fail_after(WAIT_S):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(slow_call)
            await waiter.started.wait()
            cancel = {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": 41, "reason": "user pressed stop"},
            }
            acknowledged.append(
                await served.http.post(url, json=cancel, headers=served.headers(session))
            )
        await waiter.cancelled.wait()

    assert acknowledged[0].status_code == 202
    assert acknowledged[0].headers["mcp-session-id"] == session
    assert answers[0].json() == {
        "jsonrpc": "2.0",
        "id": 41,
        "error": {"code": -32800, "message": "Request cancelled"},
    }


async def test_a_modern_client_that_leaves_cancels_its_lane_call(
    served: Served, waiter: Waiter
) -> None:
    body = call(5, "slow__wait", arguments={}, _meta=ENVELOPE)

    async def leave_after_start(scope: anyio.CancelScope) -> None:
        await waiter.started.wait()
        scope.cancel()  # closes the connection: the 2026-07-28 way to cancel

    with anyio.fail_after(WAIT_S):
        async with anyio.create_task_group() as tasks, httpx.AsyncClient() as leaving:
            tasks.start_soon(leave_after_start, tasks.cancel_scope)
            await leaving.post(
                f"{served.lane_url}/mcp", json=body, headers=served.modern_headers("slow__wait")
            )
        await waiter.cancelled.wait()

    assert waiter.cancelled.is_set()
    assert not waiter.release.is_set()


async def test_a_slow_lane_call_keeps_the_stream_alive_then_answers_as_an_sse_event(
    served: Served, waiter: Waiter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http_lane_wire, "WATCH_AFTER_S", 0.01)
    monkeypatch.setattr(http_lane_wire, "PING_INTERVAL_S", 0.05)
    body = call(9, "slow__wait", arguments={}, _meta=ENVELOPE)
    chunks: list[bytes] = []
    with anyio.fail_after(WAIT_S):
        async with served.http.stream(
            "POST",
            f"{served.lane_url}/mcp",
            content=json.dumps(body),
            headers=served.modern_headers("slow__wait"),
        ) as response:
            async for chunk in response.aiter_raw():
                chunks.append(chunk)
                if b": ping" in chunk:
                    waiter.release.set()

    text = b"".join(chunks).decode()
    events = [line[len("data: ") :] for line in text.splitlines() if line.startswith("data: ")]
    assert response.headers["content-type"] == "text/event-stream"
    assert ": ping" in text
    assert len(events) == 1
    answer = json.loads(events[0])
    assert answer["id"] == 9
    assert answer["result"]["content"] == [{"type": "text", "text": "done"}]


async def test_a_call_with_a_progress_token_is_left_to_the_sdk(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken: list[str] = []
    real = http_lane.lane_call

    async def counted(*args: Any, **kwargs: Any) -> dict[str, Any]:
        taken.append(str(args[2]))
        return await real(*args, **kwargs)

    monkeypatch.setattr(http_lane, "lane_call", counted)
    session = await served.open_session(served.lane_url)
    url = f"{served.lane_url}/mcp"
    with_token = call(1, "a__echo", arguments={}, _meta={"progressToken": "t-1"})
    plain = call(2, "a__echo", arguments={})
    by_sdk = await served.http.post(url, json=with_token, headers=served.headers(session))
    by_lane = await served.http.post(url, json=plain, headers=served.headers(session))

    assert by_sdk.headers["content-type"] == "text/event-stream"
    assert by_lane.headers["content-type"] == "application/json"
    assert taken == ["a__echo"]
