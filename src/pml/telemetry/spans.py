"""Spans for a request's steps and its database work (installed by ``tracing.exporting``).

    spans = StepSpans(tracer)
    observe.add_observer(spans)          # each observed step becomes a span
    with database_spans(tracer):         # each statement run inside a span gets its own
        ...

A step's span is a child of the current span and becomes the current one, so nested steps
and the MCP SDK's own spans (its server span per inbound message, its client span per
request to an upstream, which carries ``traceparent`` in ``_meta``) nest under it. The
stdio fast lane answers ``tools/call`` without the SDK, so its ``tool_call`` step also gets
the server span the SDK would have made, under the client's ``_meta`` trace context.

Span attributes are the step's attributes under ``pml.`` plus ``pml.outcome``: names and
codes only, never arguments, results or error messages (which may quote arguments).
"""

from __future__ import annotations

import re
from collections.abc import Generator, Mapping
from contextlib import contextmanager
from contextvars import Token
from typing import Any, Final

import sqlalchemy as sa
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from sqlalchemy import event

from pml.telemetry.observe import Step

MAX_VALUE: Final = 256  # longest attribute value a step contributes (a tool name, a rule)
MAX_QUERY: Final = 1000  # longest statement shown (parameters are bound, never inlined)
TRACE_KEYS: Final = ("traceparent", "tracestate")
# Outcomes that are failures although nothing was raised (an upstream's isError, a run's
# error status, a timeout); upper-case outcomes are PML error codes.
FAILED_OUTCOMES: Final = frozenset({"error", "tool_error", "timeout", "cancelled"})
_ERROR_CODE = re.compile(r"^[A-Z][A-Z0-9_]*$")
_DB_SPAN = "_pml_span"


def failed(step: Step) -> bool:
    """Whether ``step`` ended in a failure its span should show as an error."""
    outcome = step.outcome
    return step.error is not None or outcome in FAILED_OUTCOMES or bool(_ERROR_CODE.match(outcome))


def remote_parent(carrier: Mapping[str, str]) -> otel_context.Context | None:
    """The W3C trace context a client sent (``traceparent``/``tracestate``), or ``None``
    when there is none or it is malformed."""
    if "traceparent" not in carrier:
        return None
    extracted = propagate.extract({key: carrier[key] for key in TRACE_KEYS if key in carrier})
    if not trace.get_current_span(extracted).get_span_context().is_valid:
        return None
    return extracted


class _Open:
    """What ``StepSpans.begin`` hands to ``end``: the spans opened, the context token and
    the attributes the span began with."""

    __slots__ = ("begun", "server", "span", "token")

    def __init__(
        self,
        span: trace.Span,
        token: Token[otel_context.Context],
        server: trace.Span | None,
        begun: dict[str, str],
    ) -> None:
        self.span = span
        self.token = token
        self.server = server
        self.begun = begun


class StepSpans:
    """The observer turning each step into a span (see the module)."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer

    def begin(self, step: Step) -> object:
        parent: otel_context.Context | None = None
        server: trace.Span | None = None
        if step.kind == "tool_call" and step.attributes.get("lane") == "stdio":
            server = self._stdio_server_span(step)
            parent = trace.set_span_in_context(server)
        begun = dict(step.attributes)
        span = self._tracer.start_span(step.kind, context=parent, attributes=_attributes(begun))
        token = otel_context.attach(trace.set_span_in_context(span, parent))
        return _Open(span, token, server, begun)

    def end(self, step: Step, token: object) -> None:
        if not isinstance(token, _Open):
            return  # begin failed; nothing was opened
        span = token.span
        try:
            begun = token.begun
            added = {k: v for k, v in step.attributes.items() if begun.get(k) != v}
            span.set_attributes({**_attributes(added), "pml.outcome": step.outcome[:MAX_VALUE]})
            if failed(step):
                span.set_status(Status(StatusCode.ERROR, step.outcome[:MAX_VALUE]))
                span.set_attribute("error.type", _error_type(step))
        finally:
            span.end()
            otel_context.detach(token.token)
            if token.server is not None:
                if failed(step):
                    token.server.set_attribute("error.type", _error_type(step))
                    token.server.set_status(Status(StatusCode.ERROR))
                token.server.end()

    def _stdio_server_span(self, step: Step) -> trace.Span:
        """The server span the SDK makes for a ``tools/call``, for a call it never saw."""
        tool = step.attributes.get("tool", "")[:MAX_VALUE]
        return self._tracer.start_span(
            f"tools/call {tool}",
            context=remote_parent(step.attributes),
            kind=SpanKind.SERVER,
            attributes={
                "mcp.method.name": "tools/call",
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool,
            },
        )


def _attributes(attributes: Mapping[str, str]) -> dict[str, str]:
    return {
        f"pml.{name}": value[:MAX_VALUE]
        for name, value in attributes.items()
        if name not in TRACE_KEYS
    }


def _error_type(step: Step) -> str:
    if step.error is not None and step.outcome in ("error", "cancelled"):
        return type(step.error).__qualname__
    return step.outcome[:MAX_VALUE]


# -- database work ---------------------------------------------------------------------------

_TARGET = re.compile(
    r"^\s*(?:SELECT\b.*?\bFROM|INSERT\s+(?:OR\s+\w+\s+)?INTO|UPDATE|DELETE\s+FROM)\s+\"?(\w+)",
    re.IGNORECASE | re.DOTALL,
)


def _operation(statement: str) -> tuple[str, str]:
    """The statement's first keyword and, when plain, its table: ``("SELECT", "pml_x")``."""
    words = statement.split(None, 1)
    operation = words[0].upper()[:32] if words else "SQL"
    found = _TARGET.match(statement[:MAX_QUERY])
    return operation, found.group(1) if found else ""


class _DatabaseSpans:
    """SQLAlchemy engine listeners: one client span per statement inside a recorded span."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer

    def before(
        self,
        conn: sa.Connection,
        _cursor: Any,
        statement: str,
        _parameters: Any,
        execution: Any,
        _many: bool,
    ) -> None:
        if execution is None or not trace.get_current_span().is_recording():
            return  # outside a request (start-up, background flushes): no orphan traces
        operation, table = _operation(statement)
        span = self._tracer.start_span(
            f"{operation} {table}" if table else operation,
            kind=SpanKind.CLIENT,
            attributes={
                "db.system.name": conn.dialect.name,
                "db.operation.name": operation,
                "db.query.text": statement[:MAX_QUERY],
                **({"db.collection.name": table} if table else {}),
            },
        )
        setattr(execution, _DB_SPAN, span)

    def after(
        self,
        _conn: sa.Connection,
        _cursor: Any,
        _statement: str,
        _parameters: Any,
        execution: Any,
        _many: bool,
    ) -> None:
        span: trace.Span | None = getattr(execution, _DB_SPAN, None)
        if span is not None:
            setattr(execution, _DB_SPAN, None)
            span.end()

    def errored(self, exception_context: sa.engine.ExceptionContext) -> None:
        execution = exception_context.execution_context
        span: trace.Span | None = getattr(execution, _DB_SPAN, None)
        if span is not None:
            setattr(execution, _DB_SPAN, None)
            error = exception_context.original_exception
            span.set_attribute("error.type", type(error).__name__)  # the DB-API class
            span.set_status(Status(StatusCode.ERROR))
            span.end()


@contextmanager
def database_spans(tracer: trace.Tracer) -> Generator[None]:
    """Give every statement of every engine (existing or new) a span while the block runs."""
    spans = _DatabaseSpans(tracer)
    listeners = (
        ("before_cursor_execute", spans.before),
        ("after_cursor_execute", spans.after),
        ("handle_error", spans.errored),
    )
    for name, listener in listeners:
        event.listen(sa.engine.Engine, name, listener)
    try:
        yield
    finally:
        for name, listener in listeners:
            event.remove(sa.engine.Engine, name, listener)
