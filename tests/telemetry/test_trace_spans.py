"""Steps and database statements as spans: nesting, attributes, errors, trace context.

The observer and the database listeners run on an SDK tracer provider recording into
memory; what reaches a real collector is the business of ``test_tracing``.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest
import sqlalchemy as sa
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, SpanKind, StatusCode

from pml.errors import NotFound, StorageError
from pml.storage.database import Database
from pml.telemetry import observe
from pml.telemetry.spans import StepSpans, database_spans

CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"


@pytest.fixture
def recorded() -> Generator[tuple[InMemorySpanExporter, TracerProvider]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spans = StepSpans(provider.get_tracer("pml"))
    observe.add_observer(spans)
    try:
        yield exporter, provider
    finally:
        observe.remove_observer(spans)
        provider.shutdown()


def finished(recorded: tuple[InMemorySpanExporter, TracerProvider]) -> list[ReadableSpan]:
    return list(recorded[0].get_finished_spans())


def one(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    found = [span for span in spans if span.name == name]
    assert len(found) == 1, f"expected one {name} span in {[s.name for s in spans]}"
    return found[0]


def context_of(span: ReadableSpan) -> SpanContext:
    assert span.context is not None
    return span.context


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def test_each_step_is_a_span_nested_under_the_step_around_it(
    recorded: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    with observe.step("tool_call", tool="pml_execute", lane="mcp"), observe.step("execute"):
        with observe.step("policy", source="pml_execute"):
            pass
        with observe.step("sandbox"), observe.step("upstream_call", server="t", tool="now"):
            pass
    spans = finished(recorded)
    ids = {span.name: context_of(span).span_id for span in spans}
    assert parent_id(one(spans, "tool_call")) is None
    assert parent_id(one(spans, "execute")) == ids["tool_call"]
    assert parent_id(one(spans, "policy")) == ids["execute"]
    assert parent_id(one(spans, "sandbox")) == ids["execute"]
    assert parent_id(one(spans, "upstream_call")) == ids["sandbox"]
    assert len({context_of(span).trace_id for span in spans}) == 1


def test_step_attributes_are_named_under_pml_with_the_outcome(
    recorded: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    with observe.step("policy", source="pml_execute") as step:
        step.set(intent="read", rule="policy:read")
    span = one(finished(recorded), "policy")
    assert dict(span.attributes or {}) == {
        "pml.source": "pml_execute",
        "pml.intent": "read",
        "pml.rule": "policy:read",
        "pml.outcome": "ok",
    }
    assert span.status.status_code is StatusCode.UNSET


@pytest.mark.parametrize("outcome", ["success", "approval_required", "execute_locally", "ok"])
def test_answers_that_are_not_failures_leave_the_status_unset(
    recorded: tuple[InMemorySpanExporter, TracerProvider], outcome: str
) -> None:
    with observe.step("execute", mode="code") as step:
        step.outcome = outcome
    span = one(finished(recorded), "execute")
    assert span.status.status_code is StatusCode.UNSET
    assert (span.attributes or {})["pml.outcome"] == outcome


@pytest.mark.parametrize("outcome", ["tool_error", "error", "timeout", "UPSTREAM_UNAVAILABLE"])
def test_failed_outcomes_are_error_spans(
    recorded: tuple[InMemorySpanExporter, TracerProvider], outcome: str
) -> None:
    with observe.step("upstream_call", server="s", tool="t") as step:
        step.outcome = outcome
    span = one(finished(recorded), "upstream_call")
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})["error.type"] == outcome


def test_a_raised_error_is_an_error_span_with_its_code_never_its_message(
    recorded: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    secret = "password=hunter2 in the arguments"
    with pytest.raises(NotFound), observe.step("execute", mode="code"):
        raise NotFound(f"no capability for {secret}")
    with pytest.raises(RuntimeError), observe.step("sandbox"):
        raise RuntimeError(secret)
    spans = finished(recorded)
    execute, sandbox = one(spans, "execute"), one(spans, "sandbox")
    assert (execute.attributes or {})["error.type"] == "NOT_FOUND"
    assert (sandbox.attributes or {})["error.type"] == "RuntimeError"
    for span in spans:
        assert span.status.status_code is StatusCode.ERROR
        assert secret not in repr(span.to_json())


def test_long_and_hostile_attribute_values_are_cut_and_trace_context_is_not_copied(
    recorded: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    hostile = "'; DROP TABLE x; --\u202e日本🙂" * 1000
    with observe.step("tool_call", tool=hostile, lane="mcp", traceparent=TRACEPARENT):
        pass
    attributes = dict(one(finished(recorded), "tool_call").attributes or {})
    assert attributes["pml.tool"] == hostile[:256]
    assert not any("trace" in name for name in attributes)


def test_a_stdio_tool_call_gets_a_server_span_under_the_clients_trace_context(
    recorded: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    context = {"traceparent": TRACEPARENT, "tracestate": "vendor=abc"}
    with (
        observe.step("tool_call", tool="pml_execute", lane="stdio", user="u", **context) as call,
        observe.step("execute", mode="code"),
    ):
        call.outcome = "tool_error"
    spans = finished(recorded)
    server, tool_call = one(spans, "tools/call pml_execute"), one(spans, "tool_call")
    assert server.kind is SpanKind.SERVER
    assert context_of(server).trace_id == int(CLIENT_TRACE, 16)
    assert parent_id(server) == int(CLIENT_SPAN, 16)
    assert server.parent is not None
    assert server.parent.is_remote
    assert dict(server.attributes or {}) == {
        "mcp.method.name": "tools/call",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "pml_execute",
        "error.type": "tool_error",
    }
    assert server.status.status_code is StatusCode.ERROR
    assert parent_id(tool_call) == context_of(server).span_id
    assert parent_id(one(spans, "execute")) == context_of(tool_call).span_id
    assert context_of(server).trace_state.get("vendor") == "abc"


MALFORMED_TRACEPARENTS = [
    "",
    "garbage",
    "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # all-zero trace id
    "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  # all-zero span id
    "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # version ff is invalid
    "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",  # upper case
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",  # no flags
    "00-日本語-🙂-01",
    "00-" + "a" * 100_000,
    "\x00\n\r" * 10,
]


@pytest.mark.parametrize("traceparent", MALFORMED_TRACEPARENTS)
def test_a_malformed_traceparent_is_ignored_and_the_call_starts_its_own_trace(
    recorded: tuple[InMemorySpanExporter, TracerProvider], traceparent: str
) -> None:
    with observe.step("tool_call", tool="t", lane="stdio", traceparent=traceparent):
        pass
    server = one(finished(recorded), "tools/call t")
    assert server.parent is None
    assert context_of(server).trace_id != int(CLIENT_TRACE, 16)


def test_a_stdio_call_without_trace_context_is_a_root_server_span(
    recorded: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    with observe.step("tool_call", tool="t", lane="stdio"):
        pass
    spans = finished(recorded)
    assert one(spans, "tools/call t").parent is None
    assert parent_id(one(spans, "tool_call")) == context_of(one(spans, "tools/call t")).span_id


# -- database statements -----------------------------------------------------------------------


@pytest.mark.anyio
async def test_statements_inside_a_step_get_client_spans_and_others_none(
    recorded: tuple[InMemorySpanExporter, TracerProvider], db: Database
) -> None:
    tracer = recorded[1].get_tracer("pml")
    with database_spans(tracer):
        async with db.read() as conn:
            await conn.execute(sa.text("SELECT 1"))  # outside any step: no span
        with observe.step("execute", mode="code"):
            async with db.read() as conn:
                await conn.execute(sa.text("SELECT count(*) FROM capability_records"))
            await db.first(sa.text("SELECT 2 FROM capability_records"), {})
    with observe.step("policy", source="x"):  # listeners removed: no span
        async with db.read() as conn:
            await conn.execute(sa.text("SELECT 3"))
    spans = finished(recorded)
    statements = [span for span in spans if span.kind is SpanKind.CLIENT]
    # SQLite transactions are begun by an explicit BEGIN statement (storage.database)
    selects = [span for span in statements if span.name != "BEGIN"]
    assert [span.name for span in selects] == ["SELECT capability_records"] * 2
    execute = one(spans, "execute")
    for span in statements:
        assert parent_id(span) == context_of(execute).span_id
        attributes = dict(span.attributes or {})
        assert attributes["db.system.name"] == db.dialect
    for span in selects:
        attributes = dict(span.attributes or {})
        assert attributes["db.operation.name"] == "SELECT"
        assert attributes["db.collection.name"] == "capability_records"
        assert str(attributes["db.query.text"]).startswith("SELECT")


@pytest.mark.anyio
async def test_a_failed_statement_is_an_error_span(
    recorded: tuple[InMemorySpanExporter, TracerProvider], db: Database
) -> None:
    tracer = recorded[1].get_tracer("pml")
    with (
        database_spans(tracer),
        observe.step("execute", mode="code"),
        pytest.raises(StorageError, match="no_such_table"),
    ):
        async with db.read() as conn:
            await conn.execute(sa.text("SELECT * FROM no_such_table"))
    failed = one(finished(recorded), "SELECT no_such_table")
    assert failed.status.status_code is StatusCode.ERROR
    expected = "OperationalError" if db.dialect == "sqlite" else "ProgrammingError"
    assert (failed.attributes or {})["error.type"] == expected
