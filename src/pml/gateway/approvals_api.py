"""``POST /api/approvals/{workflow_id}``: approve or refuse a run waiting for approval
(SPEC §10.4, §11) — the same as ``pml_execute {continue_workflow: ...}``.

    POST /api/approvals/wf_3f2a...   {"approved": true, "grant": "session"}
    200 {"status": "success", "result": ..., ...}       the resumed run's answer
    200 {"status": "approval_required", ...}            it reached another call to approve
    403 {"status": "error", "error": {"code": "PERMISSION_DENIED", ...}}   refused
    404 {"status": "error", "error": {"code": "NOT_FOUND", ...}}  unknown, expired, or
                                                         another user's workflow

The API key fixes who approves: only the user who started the workflow can resume it.
A body that is not ``{"approved": bool, "grant"?: "once"|"session"|"always"}`` is 400.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from pml.errors import InvalidInput, PmlError, Unauthorized
from pml.gateway.schemas import ExecuteParams
from pml.gateway.tools import Executor
from pml.registry.scope import Scope

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 4096
STATUS_OF_ERROR = {"NOT_FOUND": 404, "PERMISSION_DENIED": 403, "POLICY_DENIED": 403}


def _error(error: PmlError, status: int) -> Response:
    return JSONResponse({"status": "error", "error": error.to_dict()}, status_code=status)


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if len(raw) > MAX_BODY_BYTES:
        raise InvalidInput(f"Body too large (max {MAX_BODY_BYTES} bytes)", field="body")
    try:
        data = json.loads(raw or b"null")
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nested too deep
        raise InvalidInput("Body must be a JSON object", field="body") from None
    if not isinstance(data, dict):
        raise InvalidInput("Body must be a JSON object", field="body")
    return data  # pyright: ignore[reportUnknownVariableType]


def approvals_route(executor: Executor, scope_key: str) -> Route:
    """The route, resuming workflows through ``executor`` (behind ``ApiKeyMiddleware``)."""

    async def approve(request: Request) -> Response:
        scope = getattr(request.state, scope_key, None)
        if not isinstance(scope, Scope):  # the middleware puts it there; never serve without
            return _error(Unauthorized("Missing API key"), 401)
        workflow_id = request.path_params["workflow_id"]
        try:
            body = await _body(request)
            unknown = sorted(set(body) - {"approved", "grant"})
            if unknown:
                raise InvalidInput(f"Unknown field: {unknown[0][:40]!r}", field=unknown[0][:40])
            params = ExecuteParams.model_validate(
                {
                    "intent": f"approval of {workflow_id[:80]}",
                    "continue_workflow": {"workflow_id": workflow_id, **body},
                }
            )
        except PmlError as error:
            return _error(error, 400)
        except ValueError as error:  # pydantic's ValidationError
            first = str(error).splitlines()[1:2] or ["invalid body"]
            return _error(InvalidInput(f"Invalid body: {first[0]}", field="body"), 400)
        try:
            answer = await executor.execute(scope, params)
        except PmlError as error:
            return _error(error, STATUS_OF_ERROR.get(error.code, 422))
        return JSONResponse(answer)

    return Route("/api/approvals/{workflow_id}", approve, methods=["POST"])
