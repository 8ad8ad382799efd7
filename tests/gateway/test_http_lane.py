"""The HTTP fast lane against the SDK's path: the same requests, the same answers.

One gateway (real pool, in-process upstream servers, SQLite) is served twice on real
uvicorn: with the lane and without it (``fast_lane=False``: every request the SDK's way).
Each request is sent to both, raw over httpx, and the JSON-RPC answers are compared; a spy
on ``lane_call`` (the real function, counted) tells which requests the lane answered.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

import httpx
import mcp_types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from gateway.upstreams import UNICODE_TEXT, Upstream
from pml.gateway import http_lane
from pml.gateway.http import running_http
from pml.gateway.keys import ApiKeys
from pml.gateway.server import Gateway

pytestmark = pytest.mark.anyio

MODERN = "2026-07-28"
SESSION = "2025-11-25"
MCP_ACCEPT = "application/json, text/event-stream"
ENVELOPE = {
    mcp_types.PROTOCOL_VERSION_META_KEY: MODERN,
    mcp_types.CLIENT_INFO_META_KEY: {"name": "raw", "version": "1"},
    mcp_types.CLIENT_CAPABILITIES_META_KEY: {},
}


@dataclass
class LaneSpy:
    """Counts the calls the lane made (the real ``lane_call`` runs)."""

    names: list[str] = field(default_factory=list[str])


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> LaneSpy:
    seen = LaneSpy()
    real = http_lane.lane_call

    async def counted(*args: Any, **kwargs: Any) -> dict[str, Any]:
        seen.names.append(str(args[2]))
        return await real(*args, **kwargs)

    monkeypatch.setattr(http_lane, "lane_call", counted)
    return seen


@dataclass
class Side:
    """One served app (with or without the lane) and a raw client of it."""

    url: str
    key: str
    http: httpx.AsyncClient
    session: str | None = None

    def headers(self, **extra: str) -> dict[str, str]:
        base = {
            "Authorization": f"Bearer {self.key}",
            "Accept": MCP_ACCEPT,
            "Content-Type": "application/json",
        }
        return base | extra

    async def post(self, body: object, **headers: str) -> httpx.Response:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return await self.http.post(f"{self.url}/mcp", content=content, headers=headers)

    async def open_session(self, capabilities: dict[str, Any] | None = None) -> str:
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": SESSION,
                "capabilities": capabilities or {},
                "clientInfo": {"name": "lane-test", "version": "1"},
            },
        }
        opened = await self.post(init, **self.headers())
        assert opened.status_code == 200, opened.text
        self.session = opened.headers["mcp-session-id"]
        done = await self.post(
            {"jsonrpc": "2.0", "method": "notifications/initialized"}, **self.in_session()
        )
        assert done.status_code == 202
        return self.session

    def in_session(self, **extra: str) -> dict[str, str]:
        assert self.session is not None
        return self.headers(**{"Mcp-Session-Id": self.session, **extra})

    def modern(self, name: str = "tools/call", **extra: str) -> dict[str, str]:
        return self.headers(
            **{"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": name} | extra
        )


@dataclass
class Pair:
    lane: Side
    sdk: Side


@pytest.fixture
async def pair(gateway: Gateway) -> AsyncGenerator[Pair]:
    key = (await ApiKeys(gateway.db).create("acme", "webapp", user="erwan"))[0]
    await gateway.tools.list_page(gateway.default_scope, None)  # as a client lists first
    async with (
        running_http(gateway) as lane_url,
        running_http(gateway, fast_lane=False) as sdk_url,
        httpx.AsyncClient(timeout=10.0) as http,
    ):
        yield Pair(Side(lane_url, key, http), Side(sdk_url, key, http))


def answer_of(response: httpx.Response) -> Any:
    """The JSON-RPC message of an answer, whether sent as JSON or as SSE events."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        events = [
            json.loads(line[len("data:") :])
            for line in response.text.splitlines()
            if line.startswith("data:") and line[len("data:") :].strip()
        ]
        answers = [event for event in events if "id" in event]
        assert len(answers) == 1, events
        return answers[0]
    return response.json() if response.content else None


def call(request_id: Any, name: Any, arguments: Any = None, **params: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, **params}
    if arguments is not None:
        body["arguments"] = arguments
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": body}


def modern_call(request_id: Any, name: str, arguments: Any = None, **meta: Any) -> dict[str, Any]:
    return call(request_id, name, arguments, _meta=ENVELOPE | meta)


async def both_sessions(pair: Pair, body: object, **extra: str) -> tuple[Any, Any]:
    """The same request in a session of each app: (lane answer, SDK answer), statuses equal."""
    for side in (pair.lane, pair.sdk):
        if side.session is None:
            await side.open_session()
    by_lane = await pair.lane.post(body, **pair.lane.in_session(**extra))
    by_sdk = await pair.sdk.post(body, **pair.sdk.in_session(**extra))
    assert by_lane.status_code == by_sdk.status_code, (by_lane.text, by_sdk.text)
    return answer_of(by_lane), answer_of(by_sdk)


async def both_modern(pair: Pair, body: object, name: str = "a__echo") -> tuple[Any, Any]:
    by_lane = await pair.lane.post(body, **pair.lane.modern(name))
    by_sdk = await pair.sdk.post(body, **pair.sdk.modern(name))
    assert by_lane.status_code == by_sdk.status_code, (by_lane.text, by_sdk.text)
    return answer_of(by_lane), answer_of(by_sdk)


# -- the same answers -------------------------------------------------------------------------


@pytest.mark.parametrize("tool", ["a__echo", "a__fail", "a__mixed"])
async def test_a_session_s_pass_through_call_is_answered_by_the_lane_as_the_sdk_answers(
    pair: Pair, spy: LaneSpy, upstreams: dict[str, Upstream], tool: str
) -> None:
    arguments = {"text": UNICODE_TEXT, "nested": {"list": [1, 2.5, None]}}
    by_lane, by_sdk = await both_sessions(pair, call(7, tool, arguments))
    direct = await pair.lane.post(call(8, tool, arguments), **pair.lane.in_session())

    assert by_lane == by_sdk
    assert by_lane["id"] == 7
    assert "result" in by_lane
    assert spy.names == [tool, tool]
    assert direct.headers["content-type"] == "application/json"
    assert direct.headers["mcp-session-id"] == pair.lane.session
    assert len(upstreams["a"].calls) == 3


@pytest.mark.parametrize("tool", ["a__echo", "a__fail", "a__mixed"])
async def test_a_modern_pass_through_call_is_answered_by_the_lane_as_the_sdk_answers(
    pair: Pair, spy: LaneSpy, tool: str
) -> None:
    by_lane, by_sdk = await both_modern(pair, modern_call("x-1", tool, {"text": "é"}), tool)

    assert by_lane == by_sdk
    assert by_lane["result"]["resultType"] == "complete"
    assert spy.names == [tool]


async def test_the_gateway_s_own_tools_are_answered_by_the_lane_as_the_sdk_answers(
    pair: Pair, spy: LaneSpy
) -> None:
    in_session = await both_sessions(pair, call(3, "cap_list", {}))
    modern = await both_modern(pair, modern_call(4, "cap_list", {}), "cap_list")
    refused = await both_sessions(pair, call(5, "cap_lookup", {"name": 12}))

    assert in_session[0] == in_session[1]
    assert modern[0] == modern[1]
    assert refused[0] == refused[1]
    assert refused[0]["result"]["isError"] is True
    assert spy.names == ["cap_list", "cap_list", "cap_lookup"]


async def test_the_sdk_client_gets_the_same_results_through_the_lane(
    pair: Pair, spy: LaneSpy
) -> None:
    results: dict[tuple[str, str], Any] = {}
    for mode in ("legacy", "auto"):
        for side, url in (("lane", pair.lane.url), ("sdk", pair.sdk.url)):
            auth = {"Authorization": f"Bearer {pair.lane.key}"}
            async with (
                create_mcp_http_client(headers=auth) as http,
                Client(streamable_http_client(f"{url}/mcp", http_client=http), mode=mode) as c,
            ):
                answer = await c.call_tool("b__mixed", {"text": UNICODE_TEXT})
                results[(mode, side)] = answer.model_dump(exclude={"meta"})

    assert results[("legacy", "lane")] == results[("legacy", "sdk")]
    assert results[("auto", "lane")] == results[("auto", "sdk")]
    assert spy.names == ["b__mixed", "b__mixed"]


# -- what the lane leaves to the SDK -----------------------------------------------------------


async def test_unknown_tools_and_calls_with_a_progress_token_go_to_the_sdk(
    pair: Pair, spy: LaneSpy
) -> None:
    unknown = await both_sessions(pair, call(1, "a__nope", {}))
    modern_unknown = await both_modern(pair, modern_call(2, "nope__nope", {}), "nope__nope")
    progress = await both_sessions(pair, call(3, "a__echo", {}, _meta={"progressToken": "p1"}))
    modern_progress = await both_modern(pair, modern_call(4, "a__echo", {}, progressToken=9))

    assert unknown[0] == unknown[1]
    assert modern_unknown[0] == modern_unknown[1]
    assert progress[0] == progress[1]
    assert "result" in progress[0]
    assert modern_progress[0] == modern_progress[1]
    assert "result" in modern_progress[0]
    assert spy.names == []


async def test_a_client_that_may_be_asked_something_keeps_the_sdk_s_path(
    pair: Pair, spy: LaneSpy
) -> None:
    await pair.lane.open_session({"elicitation": {}})
    in_session = await pair.lane.post(call(1, "a__echo", {}), **pair.lane.in_session())
    sampling = modern_call(2, "a__echo", {})
    sampling["params"]["_meta"][mcp_types.CLIENT_CAPABILITIES_META_KEY] = {"sampling": {}}
    modern = await pair.lane.post(sampling, **pair.lane.modern("a__echo"))

    assert "result" in answer_of(in_session)
    assert "result" in answer_of(modern)
    assert spy.names == []


HOSTILE_BODIES: list[Any] = [
    b"{not json",
    b"",
    b"\xff\xfe\x00",
    b'"tools/call"',
    [call(1, "a__echo", {})],
    call(True, "a__echo", {}),
    call(1.5, "a__echo", {}),
    call(None, "a__echo", {}),
    call(1, 42, {}),
    call(1, "a__echo", ["not", "an", "object"]),
    call(1, "a__echo", "text"),
    {"jsonrpc": "1.0", "id": 1, "method": "tools/call", "params": {"name": "a__echo"}},
    {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": ["a__echo"]},
    {"jsonrpc": "2.0", "id": 1, "method": "tools/call"},
    {**call(1, "a__echo", {}), "extra": "field"},
    call(1, "a__echo", {}, extra="param"),
    call(1, "a__echo\u0000'; DROP TABLE x;--", {}),
    call(1, "a__echo", {"text": "\ud800 lone surrogate"}),
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a__echo","arguments":'
    + b"[" * 5000
    + b"]" * 5000
    + b"}}",
]


@pytest.mark.parametrize("body", HOSTILE_BODIES)
async def test_hostile_bodies_get_the_same_answer_with_and_without_the_lane(
    pair: Pair, spy: LaneSpy, body: object
) -> None:
    in_session = await both_sessions(pair, body)
    modern = await both_modern(pair, with_envelope(body))

    assert _comparable(in_session[0]) == _comparable(in_session[1])
    assert _comparable(modern[0]) == _comparable(modern[1])
    taken = spy.names
    assert taken in ([], ["a__echo", "a__echo"])  # only well-formed calls are the lane's
    if taken:
        assert "result" in in_session[0]
        assert "result" in modern[0]


def with_envelope(body: object) -> object:
    """``body`` with the 2026-07-28 envelope in its params' ``_meta`` (when it has params)."""
    if not isinstance(body, dict) or not isinstance(body.get("params"), dict):
        return body
    params: dict[str, Any] = body["params"]
    return {**body, "params": {**params, "_meta": ENVELOPE}}


def _comparable(answer: Any) -> Any:
    """An answer without the SDK's pydantic error text, which names the input it quotes."""
    if isinstance(answer, dict) and isinstance(answer.get("error"), dict):
        error: dict[str, Any] = answer["error"]
        return {**answer, "error": {"code": error["code"]}}
    return answer


async def test_a_body_over_the_size_limit_is_refused_as_the_sdk_refuses_it(
    pair: Pair, spy: LaneSpy
) -> None:
    huge = json.dumps(call(1, "a__echo", {"text": "x" * (4 * 1024 * 1024 + 10)})).encode()
    by_lane = await pair.lane.post(huge, **pair.lane.modern())
    by_sdk = await pair.sdk.post(huge, **pair.sdk.modern())

    assert by_lane.status_code == by_sdk.status_code == 413
    assert spy.names == []


async def test_wrong_sessions_and_wrong_headers_are_the_sdk_s_to_refuse(
    pair: Pair, spy: LaneSpy, gateway: Gateway
) -> None:
    await pair.lane.open_session()
    other_key = (await ApiKeys(gateway.db).create("acme", "webapp", user="eve"))[0]
    body = call(1, "a__echo", {})
    cases = {
        "unknown session": pair.lane.in_session(**{"Mcp-Session-Id": "0" * 32}),
        "malformed session": pair.lane.in_session(**{"Mcp-Session-Id": "../../etc"}),
        "another key": pair.lane.in_session(Authorization=f"Bearer {other_key}"),
        "no json accepted": pair.lane.in_session(Accept="text/event-stream"),
        "form body": pair.lane.in_session(**{"Content-Type": "text/plain"}),
        "foreign host": pair.lane.in_session(Host="evil.example:80"),
        "foreign origin": pair.lane.in_session(Origin="http://evil.example"),
        "modern without envelope headers": pair.lane.headers(**{"MCP-Protocol-Version": MODERN}),
    }
    statuses = {}
    for case, headers in cases.items():
        statuses[case] = (await pair.lane.post(body, **headers)).status_code

    assert statuses == {
        "unknown session": 404,
        "malformed session": 404,
        "another key": 404,
        "no json accepted": 406,
        "form body": 400,
        "foreign host": 421,
        "foreign origin": 403,
        "modern without envelope headers": 400,
    }
    assert spy.names == []


async def test_a_call_without_a_key_is_refused_401_before_the_lane(
    pair: Pair, spy: LaneSpy, upstreams: dict[str, Upstream]
) -> None:
    headers = pair.lane.modern()
    del headers["Authorization"]
    response = await pair.lane.post(modern_call(1, "a__echo", {}), **headers)

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "UNAUTHORIZED"
    assert spy.names == []
    assert upstreams["a"].calls == []
