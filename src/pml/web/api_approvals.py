"""``/api/approvals``: a person's approvals over HTTP, for ``admin`` keys (SPEC §10.5, §11).

    GET  /api/approvals                  200 {"items": [{"workflowId", "tool", ...}, ...]}
    GET  /api/approvals/wf_3f2a...       200 {"workflowId", "status": "pending", ...}
    POST /api/approvals/wf_3f2a...   {"approved": true, "grant": "session"}   (or false)
    200 {"workflowId", "status": "approved", "grant": "session", "decidedBy": "user:ana", ...}

An approval is a person's decision, so only an ``admin`` key may list, show or decide
approvals (of its own org and project, any user's); an ``agent`` key gets 403 ``FORBIDDEN``
and changes nothing. Approving issues the grant to the user whose run waits; that run
resumes when its agent calls ``continue_workflow`` (the agent cannot decide it itself).
Unknown, expired and other tenants' workflows are 404 ``NOT_FOUND``; a workflow someone
already decided is 409 ``ALREADY_DECIDED``. A body that is not ``{"approved": bool,
"grant"?: "once"|"session"|"always"}`` is 400.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from pml import wire_json
from pml.errors import Forbidden, InvalidInput, PmlError, Unauthorized
from pml.execution.approval_desk import GRANT_LIFETIMES, ApprovalDesk, Decision
from pml.registry.fqdn import message_value
from pml.registry.scope import Principal
from pml.web.auth import PRINCIPAL_STATE_KEY

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 4096
STATUS_OF_ERROR = {
    "UNAUTHORIZED": 401,
    "FORBIDDEN": 403,
    "NOT_FOUND": 404,
    "ALREADY_DECIDED": 409,
    "INVALID_INPUT": 400,
}


def _error(error: PmlError) -> Response:
    status = STATUS_OF_ERROR.get(error.code, 500)
    if status == 500:
        logger.error("approvals API failed: %s", error.message)
    return JSONResponse({"status": "error", "error": error.to_dict()}, status_code=status)


def admin_of(request: Request) -> Principal:
    """The request's principal when its key may decide approvals, else the refusal."""
    principal = getattr(request.state, PRINCIPAL_STATE_KEY, None)
    if not isinstance(principal, Principal):  # the middleware puts it there; never serve without
        raise Unauthorized("Missing API key")
    if not principal.is_admin:
        raise Forbidden(
            "Approvals are decided by a person: this needs an admin API key "
            "(pml keys create ... --role admin); agent keys cannot list, show or decide them"
        )
    return principal


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if len(raw) > MAX_BODY_BYTES:
        raise InvalidInput(f"Body too large (max {MAX_BODY_BYTES} bytes)", field="body")
    try:
        data = wire_json.loads(raw or b"null")
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nested too deep
        raise InvalidInput("Body must be a JSON object", field="body") from None
    if not isinstance(data, dict):
        raise InvalidInput("Body must be a JSON object", field="body")
    return data  # pyright: ignore[reportUnknownVariableType]


def decision_of_body(body: dict[str, Any]) -> Decision:
    """``{"approved": bool, "grant"?: ...}`` as a decision (``INVALID_INPUT`` otherwise)."""
    unknown = sorted(set(body) - {"approved", "grant"})
    if unknown:
        name = message_value(unknown[0], 40)
        raise InvalidInput(f"Unknown field: {name!r}", field=name)
    approved = body.get("approved")
    if not isinstance(approved, bool):
        raise InvalidInput("approved must be true or false", field="approved")
    grant = body.get("grant", "once")
    if grant not in GRANT_LIFETIMES:
        raise InvalidInput(f"grant must be one of: {', '.join(GRANT_LIFETIMES)}", field="grant")
    if not approved:
        if "grant" in body:
            raise InvalidInput("A denial takes no grant", field="grant")
        return "deny"
    return grant  # pyright: ignore[reportReturnType]


def approvals_routes(desk: ApprovalDesk) -> list[Route]:
    """The routes (behind ``ApiKeyMiddleware``)."""

    async def listing(request: Request) -> Response:
        try:
            principal = admin_of(request)
            if request.query_params:
                raise InvalidInput("GET /api/approvals takes no parameters", field="query")
            scope = principal.scope
            items = await desk.pending(scope.org, scope.project)
        except PmlError as error:
            return _error(error)
        return JSONResponse({"items": items})

    async def show(request: Request) -> Response:
        try:
            scope = admin_of(request).scope
            workflow_id = request.path_params["workflow_id"]
            found = await desk.show(workflow_id, org=scope.org, project=scope.project)
        except PmlError as error:
            return _error(error)
        return JSONResponse(found)

    async def decide(request: Request) -> Response:
        try:
            principal = admin_of(request)
            decision = decision_of_body(await _body(request))
            scope = principal.scope
            decided = await desk.decide(
                request.path_params["workflow_id"],
                decision,
                org=scope.org,
                project=scope.project,
                decided_by=f"user:{scope.user}",
                actor=scope.user,
            )
        except PmlError as error:
            return _error(error)
        return JSONResponse(decided)

    return [
        Route("/api/approvals", listing, methods=["GET"]),
        Route("/api/approvals/{workflow_id}", show, methods=["GET"]),
        Route("/api/approvals/{workflow_id}", decide, methods=["POST"]),
    ]
