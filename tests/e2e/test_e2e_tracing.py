"""Traces of a real ``pml serve`` (``--stdio`` and ``--http``) at a local OTLP receiver.

Each test starts a ``pml serve`` process configured through ``[telemetry]`` or through the
standard ``OTEL_*`` variables, in front of an MCP server over streamable HTTP on loopback
that records what it receives (``recording_upstream``), and reads the spans the process
sent to an OTLP/HTTP receiver on loopback (``otlp_receiver``). The client sends W3C trace
context the two ways clients do: ``_meta.traceparent`` in the request (stdio, the SDK's
way) and a ``traceparent`` HTTP header.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import AsyncGenerator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, cast

import pytest
import tomli_w
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp_types import RequestParamsMeta

from e2e.support import (
    PML,
    HttpGateway,
    create_key,
    free_port,
    http_client,
    result_json,
    stop_process_tree,
    wait_healthy,
)
from telemetry.otlp_receiver import (
    ReceivedSpan,
    ancestors,
    by_trace,
    named,
    otlp_receiver,
    silent_endpoint,
    unreachable_endpoint,
)
from telemetry.recording_upstream import RecordingUpstream, recording_upstream

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

CLIENT_TRACE = "5b8efff798038103d269b633813fc60c"
CLIENT_SPAN = "eee19b7ec3c1b174"
TRACEPARENT = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
EXECUTE = {"intent": "echo a text", "code": 'said = await mcp.rec.echo(text="e2e")\nreturn said'}
REQUEST_STEPS = {"tool_call", "execute", "policy", "sandbox", "upstream_call"}
# pml itself needs a stop well inside the 2 s a stdio client waits before SIGTERM.
STOP_BOUND_S = 5.0


def write_config(
    workdir: Path, upstream: RecordingUpstream, telemetry: Mapping[str, Any] | None = None
) -> Path:
    data: dict[str, Any] = {
        "database_url": f"sqlite:///{workdir / 'pml.db'}",
        "scope": {"org": "acme", "project": "webapp", "user": "e2e"},
        "servers": {"rec": {"url": upstream.url}},
        "permissions": {"allow": ["*:*"]},
    }
    if telemetry is not None:
        data["telemetry"] = dict(telemetry)
    config = workdir / "pml.toml"
    config.write_text(tomli_w.dumps(data))
    return config


@asynccontextmanager
async def stdio_gateway(
    config: Path, log: Path, *, mode: str = "auto", env: Mapping[str, str] | None = None
) -> AsyncGenerator[Client]:
    """``pml serve --stdio`` under the SDK client, with ``env`` added to what it inherits."""
    params = StdioServerParameters(
        command=str(PML),
        args=["--config", str(config), "serve", "--stdio"],
        cwd=config.parent,
        env=dict(env or {}),
    )
    with log.open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode=mode) as client:
            yield client


@contextmanager
def http_gateway(config: Path, log: Path, env: Mapping[str, str]) -> Iterator[HttpGateway]:
    """``pml serve --http`` on a free loopback port with ``env`` over this environment."""
    port = free_port()
    with log.open("ab") as out:
        process = subprocess.Popen(
            [str(PML), "--config", str(config), "serve", "--http", f"127.0.0.1:{port}"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=config.parent,
            env={**os.environ, **env},
        )
    gateway = HttpGateway(process, port, log)
    try:
        wait_healthy(gateway)
        yield gateway
    finally:
        assert stop_process_tree(process) == []


def meta(values: dict[str, str]) -> RequestParamsMeta:
    """A request's ``_meta`` with trace context (the SDK types only its progress token)."""
    return cast(RequestParamsMeta, values)


def lane_server_span(spans: list[ReceivedSpan], trace_id: str) -> ReceivedSpan:
    found = [
        span
        for span in by_trace(spans, trace_id)
        if span.kind == "server" and span.name == "tools/call pml_execute"
    ]
    assert len(found) == 1, f"expected one pml_execute server span: {found}"
    return found[0]


def assert_one_request_trace(spans: list[ReceivedSpan], server: ReceivedSpan) -> ReceivedSpan:
    """The request's steps, the upstream client span and its statements hang off ``server``;
    returns the upstream client span."""
    trace = by_trace(spans, server.trace_id)
    names = {span.name for span in trace}
    assert names >= REQUEST_STEPS, f"missing steps: {REQUEST_STEPS - names}"
    for span in trace:
        if span.name in REQUEST_STEPS:
            assert "tools/call pml_execute" in ancestors(trace, span), span.name
    statements = [span for span in trace if span.attr("db.system.name") == "sqlite"]
    assert statements, "no database span in the request's trace"
    [upstream_span] = [s for s in named(trace, "MCP send tools/call echo") if s.kind == "client"]
    assert ancestors(trace, upstream_span)[:2] == ["upstream_call", "sandbox"]
    return upstream_span


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_stdio_pml_execute_is_one_trace_joining_the_clients_meta_context(
    tmp_path: Path, mode: str
) -> None:
    with otlp_receiver() as receiver, recording_upstream() as upstream:
        telemetry = {"traces": True, "otlp_endpoint": receiver.endpoint, "service_name": "e2e"}
        config = write_config(tmp_path, upstream, telemetry)
        async with stdio_gateway(config, tmp_path / "pml.log", mode=mode) as client:
            sent = meta({"traceparent": TRACEPARENT})
            traced = await client.call_tool("pml_execute", EXECUTE, meta=sent)
            hostile = meta({"traceparent": "00-zz-🙂-01' OR 1=1", "tracestate": "x" * 100_000})
            untraced = await client.call_tool("pml_execute", EXECUTE, meta=hostile)
        spans = receiver.snapshot()  # the gateway flushed its spans as it stopped
    assert result_json(traced)["status"] == "success"
    assert result_json(untraced)["status"] == "success"
    server = lane_server_span(spans, CLIENT_TRACE)
    assert server.parent_span_id == CLIENT_SPAN
    assert server.scope == "pml"  # made by the fast lane's step, not the SDK's dispatcher
    assert server.resource["service.name"] == "e2e"
    upstream_span = assert_one_request_trace(spans, server)
    first, second = upstream.calls
    expected = f"00-{CLIENT_TRACE}-{upstream_span.span_id}-"
    assert first.headers["traceparent"].startswith(expected)
    assert first.meta["traceparent"].startswith(expected)
    # the malformed context was ignored: the second call has a trace of its own
    assert not second.headers["traceparent"].startswith(f"00-{CLIENT_TRACE}-")
    roots = [s for s in named(spans, "tools/call pml_execute") if s.parent_span_id == ""]
    assert len(roots) == 1
    assert_one_request_trace(spans, roots[0])


async def test_http_pml_execute_is_one_trace_joining_the_clients_traceparent_header(
    tmp_path: Path,
) -> None:
    with otlp_receiver() as receiver, recording_upstream() as upstream:
        config = write_config(tmp_path, upstream)
        key = create_key(config, "acme", "webapp")["key"]
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_SERVICE_NAME": "pml-http-e2e",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }
        with http_gateway(config, tmp_path / "pml.log", env) as gateway:
            headers = {"traceparent": TRACEPARENT, "tracestate": "vendor=e2e"}
            async with http_client(gateway.mcp_url, key, extra_headers=headers) as client:
                traced = await client.call_tool("pml_execute", EXECUTE)
            bad = {"traceparent": "00-garbage' OR 1=1 --"}
            async with http_client(gateway.mcp_url, key, extra_headers=bad) as client:
                untraced = await client.call_tool("pml_execute", EXECUTE)

            def both_requests_arrived(spans: list[ReceivedSpan]) -> bool:
                return len(named(spans, "upstream_call")) >= 2

            # spans leave every 100 ms (OTEL_BSP_SCHEDULE_DELAY) while the gateway serves
            spans = await receiver.wait_for(both_requests_arrived)
    assert result_json(traced)["status"] == "success"
    assert result_json(untraced)["status"] == "success"
    server = lane_server_span(spans, CLIENT_TRACE)
    assert server.parent_span_id == CLIENT_SPAN
    assert server.scope == "mcp-python-sdk"  # the SDK's server span, under the header's
    assert server.resource["service.name"] == "pml-http-e2e"
    upstream_span = assert_one_request_trace(spans, server)
    first, second = upstream.calls
    assert first.headers["traceparent"].startswith(f"00-{CLIENT_TRACE}-{upstream_span.span_id}-")
    assert not second.headers["traceparent"].startswith(f"00-{CLIENT_TRACE}-")


async def test_an_unreachable_collector_is_warned_about_and_the_gateway_keeps_serving(
    tmp_path: Path,
) -> None:
    with unreachable_endpoint() as endpoint, recording_upstream() as upstream:
        config = write_config(tmp_path, upstream, {"traces": True, "otlp_endpoint": endpoint})
        env = {"OTEL_BSP_SCHEDULE_DELAY": "20", "OTEL_EXPORTER_OTLP_TIMEOUT": "300"}
        log = tmp_path / "pml.log"
        async with stdio_gateway(config, log, env=env) as client:
            for _ in range(3):
                result = await client.call_tool("pml_execute", EXECUTE)
                assert result_json(result)["status"] == "success"
            stopping = time.monotonic()
        stopped_in = time.monotonic() - stopping
    assert stopped_in < STOP_BOUND_S
    assert "traces: spans could not be sent to http://127.0.0.1:" in log.read_text()
    assert len(upstream.calls) == 3


async def test_a_collector_that_never_answers_delays_an_http_gateways_stop_a_bounded_time(
    tmp_path: Path,
) -> None:
    with silent_endpoint() as endpoint, recording_upstream() as upstream:
        config = write_config(tmp_path, upstream)
        key = create_key(config, "acme", "webapp")["key"]
        log = tmp_path / "pml.log"
        env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{endpoint}/v1/traces"}
        with http_gateway(config, log, env) as gateway:
            async with http_client(gateway.mcp_url, key) as client:
                result = await client.call_tool("pml_execute", EXECUTE)
            stopping = time.monotonic()
            gateway.process.terminate()
            returncode = gateway.process.wait(timeout=30)
            stopped_in = time.monotonic() - stopping
    assert result_json(result)["status"] == "success"
    assert returncode == 0, log.read_text()[-2000:]
    assert stopped_in < STOP_BOUND_S + 5.0  # uvicorn's own graceful stop comes first
    assert "the collector did not answer at shutdown" in log.read_text()


@pytest.mark.parametrize(
    ("telemetry", "field"),
    [
        ({"sample_ratio": 1.5}, "telemetry.sample_ratio"),
        ({"otlp_endpoint": "file:///etc/passwd"}, "telemetry.otlp_endpoint"),
        ({"traces": "sometimes"}, "telemetry.traces"),
    ],
)
def test_bad_telemetry_settings_stop_pml_serve_with_a_config_error(
    tmp_path: Path, telemetry: dict[str, Any], field: str
) -> None:
    with recording_upstream() as upstream:
        config = write_config(tmp_path, upstream, telemetry)
        done = subprocess.run(
            [str(PML), "--config", str(config), "serve", "--stdio"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            stdin=subprocess.DEVNULL,
            cwd=tmp_path,
        )
    assert done.returncode != 0
    assert field in done.stderr
    assert done.stdout == ""


def test_a_stdio_gateway_stopped_by_sigterm_still_sends_its_spans(tmp_path: Path) -> None:
    with otlp_receiver() as receiver, recording_upstream() as upstream:
        telemetry = {"traces": True, "otlp_endpoint": receiver.endpoint}
        config = write_config(tmp_path, upstream, telemetry)
        process = subprocess.Popen(
            [str(PML), "--config", str(config), "serve", "--stdio"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=config.parent,
        )
        try:
            assert process.stdin is not None
            assert process.stdout is not None
            lines = [
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {},
                        "clientInfo": {"name": "sigterm-test", "version": "1"},
                    },
                },
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "tools/call",
                    "params": {
                        "name": "pml_execute",
                        "arguments": EXECUTE,
                        "_meta": {"traceparent": TRACEPARENT},
                    },
                },
            ]
            for line in lines:
                process.stdin.write(json.dumps(line).encode() + b"\n")
            process.stdin.flush()
            answers = [json.loads(process.stdout.readline()) for _ in range(2)]
            assert answers[1]["id"] == 2
            assert "result" in answers[1]
            process.send_signal(signal.SIGTERM)  # stdin stays open: only the signal ends it
            assert process.wait(timeout=STOP_BOUND_S) == -signal.SIGTERM
        finally:
            stop_process_tree(process)
        spans = receiver.snapshot()
    steps = {span.name for span in by_trace(spans, CLIENT_TRACE)}
    assert steps >= REQUEST_STEPS, f"spans lost at SIGTERM: {REQUEST_STEPS - steps}"
