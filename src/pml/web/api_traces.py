"""``POST /api/traces``: PML clients report the runs of code the gateway handed them (SPEC §9).

    POST /api/traces   {"traces": [{"workflowId": "wf_…", "success": true, "durationMs": 12.5,
                                    "taskResults": [...], "traceId": "…"}, ...]}
    200 {"results": [{"traceId", "workflowId", "status", "capabilityFqdn"?, "created"?,
                      "message"?, "retryAfterS"?}, ...]}   # one per trace, in order

``status`` is ``captured | duplicate | expired | failed | rejected``, or ``pending`` (see
``pml.execution.trace_ingest``). The API key fixes the scope: a trace of another caller's
workflow is ``rejected`` and changes nothing. A body that is not JSON, not an object with a
``traces`` list, or larger than ``MAX_BODY_BYTES`` gets 400 / 413 with
``{"error": {"code", "message"}}``; more than 100 traces gets 413. Every status in a 200 but
``pending`` is final: the client drops those traces from its queue, and sends a pending one
again after its ``retryAfterS`` (another request holds that workflow). An unexpected
failure is a 500 and changes nothing that a retry cannot redo (a retried trace already
processed answers ``duplicate``).
"""

from __future__ import annotations

import logging
from typing import Any, cast

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from pml import wire_json
from pml.errors import InternalError, InvalidInput, PmlError, Unauthorized
from pml.execution.clients import client_from_headers
from pml.execution.trace_ingest import MAX_TRACES, TraceIngest
from pml.registry.scope import Scope

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 32 * 1024 * 1024


def _error(error: PmlError, status: int) -> Response:
    return JSONResponse({"error": error.to_dict()}, status_code=status)


async def _body(request: Request) -> bytes | None:
    """The body, or None when it is larger than ``MAX_BODY_BYTES`` (never read whole)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _traces_of(body: bytes) -> list[object]:
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
        if body is None:
            limit = f"{MAX_BODY_BYTES // (1024 * 1024)} MiB"
            return _error(InvalidInput(f"Body too large (max: {limit})", field="traces"), 413)
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
