"""A local OTLP/HTTP trace receiver for the tracing tests: a collector on loopback.

    with otlp_receiver() as receiver:          # http://127.0.0.1:PORT, a thread serving
        ... export to receiver.endpoint ...
        spans = await receiver.wait_for(lambda spans: any(s.name == "tool_call" for s in spans))

It decodes each ``POST /v1/traces`` body (``ExportTraceServiceRequest`` protobuf, gzip or
deflate as the exporter sends it) with ``opentelemetry-proto`` into plain ``ReceivedSpan``
values and answers 200 like a collector. ``unreachable_endpoint`` and ``silent_endpoint``
give collectors that refuse connections or accept them and never answer.
"""

from __future__ import annotations

import gzip
import socket
import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import anyio.to_thread
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
STATUSES = {0: "unset", 1: "ok", 2: "error"}
WAIT_S = 20.0


@dataclass(frozen=True, slots=True)
class ReceivedSpan:
    """One span as a collector received it."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: str
    status: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    scope: str
    start_ns: int
    end_ns: int

    def attr(self, name: str) -> Any:
        return self.attributes.get(name)


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    return getattr(value, kind) if kind is not None else None


def _attributes(pairs: Any) -> dict[str, Any]:
    items: list[KeyValue] = list(pairs)
    return {pair.key: _value(pair.value) for pair in items}


def decode(body: bytes) -> list[ReceivedSpan]:
    """The spans of one OTLP/HTTP protobuf export request."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans: list[ReceivedSpan] = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        kind=KINDS.get(span.kind, str(span.kind)),
                        status=STATUSES.get(span.status.code, str(span.status.code)),
                        attributes=_attributes(span.attributes),
                        resource=resource,
                        scope=scope_spans.scope.name,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                    )
                )
    return spans


@dataclass
class Receiver:
    """What the receiver got so far; ``wait_for`` blocks (bounded) until a condition holds."""

    endpoint: str = ""
    spans: list[ReceivedSpan] = field(default_factory=list[ReceivedSpan])
    requests: list[dict[str, str]] = field(default_factory=list[dict[str, str]])
    changed: threading.Condition = field(default_factory=threading.Condition)

    def add(self, headers: dict[str, str], spans: list[ReceivedSpan]) -> None:
        with self.changed:
            self.requests.append(headers)
            self.spans.extend(spans)
            self.changed.notify_all()

    def snapshot(self) -> list[ReceivedSpan]:
        with self.changed:
            return list(self.spans)

    def wait_for_sync(
        self, done: Callable[[list[ReceivedSpan]], bool], timeout_s: float = WAIT_S
    ) -> list[ReceivedSpan]:
        """The spans once ``done(spans)`` holds; AssertionError after ``timeout_s``."""
        with self.changed:
            if not self.changed.wait_for(lambda: done(list(self.spans)), timeout=timeout_s):
                names = sorted({span.name for span in self.spans})
                raise AssertionError(f"spans never satisfied the test; received: {names}")
            return list(self.spans)

    async def wait_for(
        self, done: Callable[[list[ReceivedSpan]], bool], timeout_s: float = WAIT_S
    ) -> list[ReceivedSpan]:
        """``wait_for_sync`` from async code, without blocking the event loop."""
        return await anyio.to_thread.run_sync(self.wait_for_sync, done, timeout_s)


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            encoding = (self.headers.get("Content-Encoding") or "").lower()
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            if self.path != "/v1/traces":
                self.send_response(404)
                self.end_headers()
                return
            headers = {name.lower(): value for name, value in self.headers.items()}
            receiver.add(headers, decode(body))
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            del format, args  # quiet: the tests assert on what was received

    return Handler


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """A receiver on a free loopback port, served from a thread until the block ends."""
    receiver = Receiver()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(receiver))
    server.daemon_threads = True
    receiver.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextmanager
def unreachable_endpoint() -> Iterator[str]:
    """A loopback URL nothing listens on (connections are refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    yield f"http://127.0.0.1:{port}"


@contextmanager
def silent_endpoint() -> Iterator[str]:
    """A loopback URL that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def by_trace(spans: list[ReceivedSpan], trace_id: str) -> list[ReceivedSpan]:
    return [span for span in spans if span.trace_id == trace_id]


def named(spans: list[ReceivedSpan], name: str) -> list[ReceivedSpan]:
    return [span for span in spans if span.name == name]


def parent_of(spans: list[ReceivedSpan], span: ReceivedSpan) -> ReceivedSpan | None:
    return next((other for other in spans if other.span_id == span.parent_span_id), None)


def ancestors(spans: list[ReceivedSpan], span: ReceivedSpan) -> list[str]:
    """The names from ``span``'s parent up to its trace's root (bounded by the span count)."""
    names: list[str] = []
    current: ReceivedSpan | None = span
    for _ in range(len(spans)):
        current = parent_of(spans, current) if current is not None else None
        if current is None:
            break
        names.append(current.name)
    return names
