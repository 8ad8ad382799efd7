"""One trace per request, through a real gateway: from the client's context to the upstream.

The gateway runs in-process on an SQLite file with two upstreams: ``a`` in-process and
``rec``, an MCP server over streamable HTTP on loopback that records the headers and
``_meta`` it receives. Spans go to a local OTLP receiver; each test reads the trace the
request made once ``tracing.exporting`` has flushed it.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import mcp_types
import pytest
from mcp import Client

from gateway.upstreams import Upstream, gateway_settings
from pml.config import ServerSettings
from pml.gateway.http import running_http
from pml.gateway.keys import ApiKeys
from pml.gateway.server import Gateway, open_gateway
from pml.sections_ops import TelemetrySettings
from pml.telemetry import tracing
from pml.upstream.pool import ClientPool
from telemetry.otlp_receiver import ReceivedSpan, Receiver, ancestors, by_trace, named
from telemetry.otlp_receiver import otlp_receiver as start_receiver
from telemetry.recording_upstream import RecordingUpstream, recording_upstream

pytestmark = pytest.mark.anyio

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
SNIPPET = 'said = await mcp.rec.echo(text="traced")\nreturn said'
EXECUTE = {"intent": "echo a text", "code": SNIPPET}
ENVELOPE = {
    mcp_types.PROTOCOL_VERSION_META_KEY: "2026-07-28",
    mcp_types.CLIENT_INFO_META_KEY: {"name": "raw", "version": "1"},
    mcp_types.CLIENT_CAPABILITIES_META_KEY: {},
}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with start_receiver() as started:
        yield started


@pytest.fixture
def upstream() -> Iterator[RecordingUpstream]:
    with recording_upstream() as started:
        yield started


@asynccontextmanager
async def gateway_on(tmp_path: Path, upstream: RecordingUpstream) -> AsyncGenerator[Gateway]:
    settings = gateway_settings(f"sqlite:///{tmp_path / 'pml.db'}", expose_upstream=True)
    pool = ClientPool({"a": Upstream("a").server, "rec": ServerSettings(url=upstream.url)})
    async with open_gateway(settings, pool=pool) as gateway:
        yield gateway


def traced(receiver: Receiver) -> TelemetrySettings:
    return TelemetrySettings(traces=True, otlp_endpoint=receiver.endpoint)


def server_span(spans: list[ReceivedSpan], tool: str) -> ReceivedSpan:
    found = [s for s in named(spans, f"tools/call {tool}") if s.kind == "server"]
    assert len(found) == 1, f"expected one server span for {tool}: {found}"
    return found[0]


async def raw_call(
    url: str, key: str, name: str, arguments: dict[str, Any], headers: Any = None, meta: Any = None
) -> dict[str, Any]:
    """A 2026-07-28 ``tools/call`` posted by hand (no SDK client adding its own context)."""
    params = {"name": name, "arguments": arguments, "_meta": {**ENVELOPE, **(meta or {})}}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    sent: list[tuple[str, str | bytes]] = [
        ("Accept", "application/json, text/event-stream"),
        ("Authorization", f"Bearer {key}"),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", name),
        *(headers or []),
    ]
    async with httpx.AsyncClient(timeout=30) as http:
        raw = [(k.encode(), v if isinstance(v, bytes) else v.encode("latin-1")) for k, v in sent]
        response = await http.post(f"{url}/mcp", json=body, headers=raw)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    assert "result" in answer, answer
    return answer["result"]


async def test_a_pml_execute_call_is_one_trace_from_the_server_span_to_the_http_upstream(
    tmp_path: Path, receiver: Receiver, upstream: RecordingUpstream
) -> None:
    with tracing.exporting(traced(receiver), {}):
        async with gateway_on(tmp_path, upstream) as gateway, Client(gateway.server) as client:
            result = await client.call_tool("pml_execute", EXECUTE)
    assert not result.is_error, result
    spans = receiver.snapshot()
    server = server_span(spans, "pml_execute")
    trace = by_trace(spans, server.trace_id)
    chain = {span.name: ancestors(trace, span) for span in trace if span.scope == "pml"}
    assert chain["tool_call"][0] == "tools/call pml_execute"
    assert chain["execute"][0] == "tool_call"
    assert chain["policy"][0] == "execute"
    assert chain["sandbox"][0] == "execute"
    assert chain["upstream_call"][:2] == ["sandbox", "execute"]
    [client_span] = [s for s in named(trace, "MCP send tools/call echo") if s.kind == "client"]
    assert ancestors(trace, client_span)[0] == "upstream_call"
    statements = [s for s in trace if s.attr("db.system.name") == "sqlite"]
    assert statements, "no database span in the request's trace"
    assert all("tool_call" in ancestors(trace, s) for s in statements)
    # W3C context reached the HTTP upstream both ways: the header and _meta (SEP-414)
    [call] = upstream.calls
    expected = f"00-{server.trace_id}-{client_span.span_id}-"
    assert call.headers["traceparent"].startswith(expected)
    assert call.meta["traceparent"].startswith(expected)


async def test_without_traces_nothing_goes_to_the_upstream_or_the_collector(
    tmp_path: Path, receiver: Receiver, upstream: RecordingUpstream
) -> None:
    async with gateway_on(tmp_path, upstream) as gateway, Client(gateway.server) as client:
        result = await client.call_tool("pml_execute", EXECUTE)
    assert not result.is_error, result
    [call] = upstream.calls
    assert "traceparent" not in call.headers
    assert "traceparent" not in call.meta
    assert receiver.snapshot() == []


async def test_a_clients_traceparent_header_parents_its_http_requests_spans(
    tmp_path: Path, receiver: Receiver, upstream: RecordingUpstream
) -> None:
    with tracing.exporting(traced(receiver), {}):
        async with gateway_on(tmp_path, upstream) as gateway, running_http(gateway) as url:
            key = (await ApiKeys(gateway.db).create("acme", "webapp", user="erwan"))[0]
            headers = [("traceparent", TRACEPARENT), ("tracestate", "vendor=1")]
            result = await raw_call(url, key, "pml_execute", EXECUTE, headers)
    assert result["structuredContent"]["status"] == "success"
    spans = receiver.snapshot()
    server = server_span(spans, "pml_execute")
    assert (server.trace_id, server.parent_span_id) == (CLIENT_TRACE, CLIENT_SPAN)
    trace = {span.name for span in by_trace(spans, CLIENT_TRACE)}
    assert {"tool_call", "execute", "sandbox", "upstream_call"} <= trace
    assert upstream.calls[0].headers["traceparent"].startswith(f"00-{CLIENT_TRACE}-")


async def test_trace_context_in_meta_wins_over_the_header(
    tmp_path: Path, receiver: Receiver, upstream: RecordingUpstream
) -> None:
    in_meta = "00-11111111111111111111111111111111-2222222222222222-01"
    with tracing.exporting(traced(receiver), {}):
        async with gateway_on(tmp_path, upstream) as gateway, running_http(gateway) as url:
            key = (await ApiKeys(gateway.db).create("acme", "webapp", user="erwan"))[0]
            headers = [("traceparent", TRACEPARENT)]
            meta = {"traceparent": in_meta}
            await raw_call(url, key, "a__echo", {"text": "x"}, headers, meta)
    server = server_span(receiver.snapshot(), "a__echo")
    assert (server.trace_id, server.parent_span_id) == ("1" * 32, "2" * 16)


HOSTILE_HEADERS: list[list[tuple[str, str | bytes]]] = [
    [("traceparent", "garbage")],
    [("traceparent", "00-" + "0" * 32 + "-" + CLIENT_SPAN + "-01")],
    [("traceparent", TRACEPARENT.upper())],
    [("traceparent", "00-日本語-🙂-01".encode())],
    [("traceparent", "00-" + "f" * 6000)],
    [("traceparent", TRACEPARENT), ("traceparent", TRACEPARENT)],  # repeated: invalid
    [("tracestate", "vendor=only-a-tracestate")],
    [("traceparent", "' OR 1=1; --")],
]


@pytest.mark.parametrize("headers", HOSTILE_HEADERS)
async def test_a_malformed_traceparent_header_is_ignored_and_the_request_served(
    tmp_path: Path,
    receiver: Receiver,
    upstream: RecordingUpstream,
    headers: list[tuple[str, str | bytes]],
) -> None:
    with tracing.exporting(traced(receiver), {}):
        async with gateway_on(tmp_path, upstream) as gateway, running_http(gateway) as url:
            key = (await ApiKeys(gateway.db).create("acme", "webapp", user="erwan"))[0]
            result = await raw_call(url, key, "a__echo", {"text": "x"}, headers)
    assert result["structuredContent"] == {"server": "a", "tool": "echo", "args": {"text": "x"}}
    server = server_span(receiver.snapshot(), "a__echo")
    assert server.parent_span_id == ""
    assert server.trace_id != CLIENT_TRACE


@pytest.mark.parametrize(
    "meta", [{"traceparent": "garbage"}, {"traceparent": 42}, {"traceparent": ["x"]}]
)
async def test_malformed_trace_context_in_meta_is_ignored_and_the_request_served(
    tmp_path: Path, receiver: Receiver, upstream: RecordingUpstream, meta: dict[str, Any]
) -> None:
    with tracing.exporting(traced(receiver), {}):
        async with gateway_on(tmp_path, upstream) as gateway, running_http(gateway) as url:
            key = (await ApiKeys(gateway.db).create("acme", "webapp", user="erwan"))[0]
            headers = [("traceparent", TRACEPARENT)]
            result = await raw_call(url, key, "a__echo", {"text": "x"}, headers, meta)
    assert result["isError"] is False
    server = server_span(receiver.snapshot(), "a__echo")
    assert server.trace_id == CLIENT_TRACE  # the header still counts
