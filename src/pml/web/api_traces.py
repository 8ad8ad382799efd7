"""``POST /api/traces``: PML clients report the runs of code the gateway handed them (SPEC §9).

    POST /api/traces   {"traces": [{"workflowId": "wf_…", "success": true, "durationMs": 12.5,
                                    "taskResults": [...], "traceId": "…"}, ...]}
    200 {"results": [{"traceId", "workflowId", "status", "capabilityFqdn"?, "created"?,
                      "message"?, "retryAfterS"?}, ...]}   # one per trace, in order

``status`` is ``captured | duplicate | expired | failed | rejected``, or ``pending`` (see
``pml.execution.trace_ingest``). The API key fixes the scope: a trace of another caller's
workflow is ``rejected`` and changes nothing. A body that is not JSON, not an object with a
``traces`` list, or larger than ``MAX_BODY_BYTES`` gets 400 / 413 with
``{"error": {"code", "message"}}``; more than 100 traces gets 413, and so does a body with
more JSON values than 100 traces can hold (see below). Every status in a 200 but
``pending`` is final: the client drops those traces from its queue, and sends a pending one
again after its ``retryAfterS`` (another request holds that workflow). An unexpected
failure is a 500 and changes nothing that a retry cannot redo (a retried trace already
processed answers ``duplicate``).

Parsing costs per JSON value, not per byte, and holds the event loop (and the GIL: a
worker thread would not free the loop): 32 MiB of ``{},{},…`` made 8 million dicts, 0.9 GB
and a second of every tenant's time. So before anything is parsed the body is bounded by
its size (what 100 of the largest traces the PML client sends take), checked as it
streams in, and by its structure: the ``,`` ``:`` ``[`` ``{`` and strings outside its
strings, at most what 100 traces of 1 000 task results hold (``_check_values``: counted
at C speed, exactly only when a rough count including the strings is over). Measured
(fresh process): the costliest body that passes, 300 000 lists of three floats (4 MiB),
parses in 230 ms and 50 MB, about the largest legitimate batch (100 traces of 1 000 task
results, 20 MiB: 220 ms); the exact count of a 27 MiB body takes at most ~110 ms.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, cast

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from pml import wire_json
from pml.errors import InternalError, InvalidInput, PmlError, Unauthorized
from pml.execution.clients import client_from_headers
from pml.execution.trace_ingest import MAX_TRACES, TraceIngest
from pml.execution.trace_wire import MAX_TASKS
from pml.registry.scope import Scope

logger = logging.getLogger(__name__)

KIB = 1024
# The largest trace ``pml connect`` sends: it queues none whose compact JSON is over 256 KiB
# (``pml.client.trace_queue.MAX_TRACE_BYTES``) and posts them with a space after each ``,``
# and ``:`` (one per JSON token at most: under 16 KiB for 1 000 task results).
TRACE_BYTES = 256 * KIB + 16 * KIB
MAX_BODY_BYTES = MAX_TRACES * TRACE_BYTES + KIB  # 27 201 KiB, about 26.6 MiB
# What one trace's JSON structure (outside its strings) may hold. A task result has five
# fields: ten marks, one ``{``, the ``,`` after it, eight strings (16 quotes); the trace a
# dozen fields; the rest is room (``pml connect`` keeps up to 5 000 values of task results).
TRACE_PUNCTUATION = MAX_TASKS * 12 + 4 * KIB  # , : [ {
TRACE_CONTAINERS = MAX_TASKS + 2 * KIB  # [ { (a list is the costliest value to make)
TRACE_QUOTES = MAX_TASKS * 16 + 4 * KIB  # " (outside escapes)
MAX_PUNCTUATION = MAX_TRACES * TRACE_PUNCTUATION  # 1 609 600
MAX_CONTAINERS = MAX_TRACES * TRACE_CONTAINERS  # 304 800
MAX_QUOTES = MAX_TRACES * TRACE_QUOTES  # 2 009 600


@dataclass(slots=True)
class _Counts:
    """What a body holds, counted as it streams in (marks inside strings included)."""

    containers: int = 0
    marks: int = 0
    quotes: int = 0
    escapes: bool = False

    def add(self, chunk: bytes | bytearray) -> None:
        opened = chunk.count(b"[") + chunk.count(b"{")
        self.containers += opened
        self.marks += opened + chunk.count(b",") + chunk.count(b":")
        self.quotes += chunk.count(b'"')
        self.escapes = self.escapes or b"\\" in chunk

    def within(self) -> bool:
        return self.containers <= MAX_CONTAINERS and self.marks <= MAX_PUNCTUATION


def _error(error: PmlError, status: int) -> Response:
    return JSONResponse({"error": error.to_dict()}, status_code=status)


def _too_large() -> InvalidInput:
    limit = f"{MAX_BODY_BYTES / (1024 * 1024):.1f} MiB"
    return InvalidInput(
        f"Body too large (max: {limit}, {MAX_TRACES} traces of the largest size a PML "
        "client sends): send fewer traces per request",
        field="traces",
    )


def _too_many_values() -> InvalidInput:
    return InvalidInput(
        f"Too many JSON values in the body (outside strings at most {MAX_PUNCTUATION} of "
        f"the marks , : [ {{, {MAX_CONTAINERS} objects and arrays and {MAX_QUOTES // 2} "
        f"strings: what {MAX_TRACES} traces of {MAX_TASKS} task results need): "
        "send fewer traces per request",
        field="traces",
    )


async def _body(request: Request) -> bytearray:
    """The body; ``InvalidInput`` (a 413) once it is over ``MAX_BODY_BYTES`` (never read
    whole) or holds more JSON values than ``MAX_TRACES`` traces can (never parsed)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise _too_large()
    body = bytearray()
    counts = _Counts()
    async for chunk in request.stream():
        if len(body) + len(chunk) > MAX_BODY_BYTES:
            raise _too_large()
        counts.add(chunk)
        body += chunk
    _check_values(body, counts)
    return body


def _check_values(body: bytearray, counts: _Counts) -> None:
    """``InvalidInput`` when ``body``'s structure, outside its strings, is over the limits.

    The counts made while streaming include the marks inside strings: when they fit, the
    structure does (the usual case, nothing more to do). Otherwise the strings are taken
    out, at C speed, and the structure counted exactly: escapes first (a JSON escape is a
    backslash and one more character; pairs of backslashes before escaped quotes), then
    every other piece between quotes. Its cost is bounded by ``MAX_QUOTES``."""
    if counts.within():
        return
    if counts.quotes == 0:  # no strings: the counts were exact
        raise _too_many_values()
    plain = body.replace(b"\\\\", b"").replace(b'\\"', b"") if counts.escapes else body
    if plain.count(b'"') > MAX_QUOTES:
        raise _too_many_values()
    exact = _Counts()
    exact.add(b"".join(plain.split(b'"')[0::2]))
    if not exact.within():
        raise _too_many_values()


def _traces_of(body: bytes | bytearray) -> list[object]:
    try:
        document: object = wire_json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError):  # nested too deep: not a trace
        raise InvalidInput("The body is not JSON", field="traces") from None
    if not isinstance(document, dict):
        raise InvalidInput('Expected {"traces": [...]}', field="traces")
    traces = cast(dict[str, object], document).get("traces")
    if not isinstance(traces, list):
        raise InvalidInput('Expected {"traces": [...]}: a list of traces', field="traces")
    return cast(list[object], traces)


def traces_route(ingest: TraceIngest, scope_key: str) -> Route:
    """``POST /api/traces`` for ``ingest``; the caller's scope is at ``request.state``."""

    async def post_traces(request: Request) -> Response:
        scope = getattr(request.state, scope_key, None)
        if not isinstance(scope, Scope):
            return _error(Unauthorized("This request carries no authenticated scope"), 401)
        try:
            body = await _body(request)
        except ClientDisconnect:
            return Response(status_code=400)
        except InvalidInput as error:
            return _error(error, 413)
        try:
            traces = _traces_of(body)
        except InvalidInput as error:
            return _error(error, 400)
        if len(traces) > MAX_TRACES:
            message = f"Too many traces: {len(traces)} (max: {MAX_TRACES} per request)"
            return _error(InvalidInput(message, field="traces"), 413)
        try:
            client = client_from_headers(request.headers)
            results: list[dict[str, Any]] = await ingest.ingest(scope, traces, client)
        except PmlError as error:
            logger.warning("traces refused: %s", error.message)
            return _error(error, 400 if isinstance(error, InvalidInput) else 500)
        except Exception:
            logger.exception("traces could not be ingested")
            return _error(InternalError("The traces could not be stored; retry later"), 500)
        return JSONResponse({"results": results})

    return Route("/api/traces", post_traces, methods=["POST"])
