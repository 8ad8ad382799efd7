"""W3C trace context over HTTP: accepted from clients, sent to upstream servers.

    app.add_middleware(TraceContextMiddleware)            # a client's traceparent header
    http = httpx2.AsyncClient(event_hooks={"request": [send_trace_context]})

The MCP SDK already carries the context in ``params._meta`` both ways (its server span
takes a client's ``_meta.traceparent``; its client span puts one in every request to an
upstream). These add the HTTP header W3C defines, for clients and proxies that speak only
that: a request's ``traceparent`` header becomes the parent of its spans unless its
``_meta`` names one, and every HTTP request to an upstream carries the current span's.
A malformed header is ignored; the request is served as if it had none. Entry points
install these only while traces are exported (``tracing.active()``).
"""

from __future__ import annotations

from typing import Any, Final

import httpx2
from opentelemetry import context as otel_context
from opentelemetry import propagate
from starlette.types import ASGIApp, Receive, Scope, Send

from pml.telemetry.spans import remote_parent

_HEADERS: Final = {b"traceparent": "traceparent", b"tracestate": "tracestate"}


def trace_carrier(headers: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """The ``traceparent``/``tracestate`` of raw ASGI headers (a repeated traceparent,
    which W3C makes invalid, yields none)."""
    carrier: dict[str, str] = {}
    for raw_name, raw_value in headers:
        name = _HEADERS.get(raw_name.lower())
        if name is None:
            continue
        value = raw_value.decode("latin-1")
        if name in carrier:
            if name == "traceparent":
                return {}
            value = f"{carrier[name]},{value}"  # tracestate may be split over headers
        carrier[name] = value
    return carrier


class TraceContextMiddleware:
    """ASGI middleware: a request's ``traceparent`` header parents the spans it causes."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        carrier = trace_carrier(scope["headers"])
        parent = remote_parent(carrier) if carrier else None
        if parent is None:
            await self.app(scope, receive, send)
            return
        token = otel_context.attach(parent)
        try:
            await self.app(scope, receive, send)
        finally:
            otel_context.detach(token)


async def send_trace_context(request: httpx2.Request) -> None:
    """An httpx request hook: the current span's ``traceparent`` goes with the request."""
    setter: Any = request.headers
    propagate.inject(setter)
