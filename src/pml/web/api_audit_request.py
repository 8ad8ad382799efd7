"""``GET /api/audit/requests/{request_id}``: one request's pipeline record (SPEC §11, §13).

    GET /api/audit/requests/4f2a9c01d3e5b7a9
    200 {"request_id", "scope", "actor", "started_at", "ended_at", "text", "router",
         "policy", "tools_offered", "round_trips", "tool_calls", "approvals", "permissions",
         "memory", "clarifications", "capabilities", "timing_ms", "outcome", "assembled",
         "truncated", "events"}

The record ``pml audit show --json`` prints (``pml.policy.pipeline_view``), read under the
rules of ``GET /api/audit``: the API key fixes the org and project, and an ``agent`` key
sees only the events recorded for its own user (an ``admin`` key every user's). A request
with no event the key may see is 404 ``NOT_FOUND``, whether it exists elsewhere or not; a
malformed id or any query parameter is 400 ``INVALID_INPUT``.
"""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from pml.errors import InvalidInput, NotFound, PmlError, Unauthorized
from pml.policy.pipeline_view import check_request_id, request_record
from pml.registry.scope import Principal
from pml.storage.audit_repo import AuditRepository
from pml.storage.database import Database
from pml.web.auth import PRINCIPAL_STATE_KEY

logger = logging.getLogger(__name__)

PATH = "/api/audit/requests/{request_id}"


def _error(error: PmlError, status: int) -> Response:
    return JSONResponse({"error": error.to_dict()}, status_code=status)


def audit_request_route(db: Database) -> Route:
    """The ``GET /api/audit/requests/{request_id}`` route over ``db`` (behind
    ``ApiKeyMiddleware``)."""
    repo = AuditRepository(db)

    async def one_request(request: Request) -> Response:
        principal = getattr(request.state, PRINCIPAL_STATE_KEY, None)
        if not isinstance(principal, Principal):  # the middleware puts it there; never without
            return _error(Unauthorized("Missing API key"), 401)
        try:
            if request.query_params:
                name = next(iter(request.query_params.keys()))[:40]
                raise InvalidInput(f"Unknown parameter: {name!r}. This takes none.", field=name)
            request_id = check_request_id(request.path_params.get("request_id"))
        except InvalidInput as error:
            return _error(error, 400)
        scope = principal.scope
        # the GET /api/audit rule: an agent key sees its own user's events only
        actor = None if principal.is_admin else scope.user
        try:
            record = await request_record(
                repo, org=scope.org, project=scope.project, request_id=request_id, actor=actor
            )
        except NotFound as error:
            return _error(error, 404)
        except PmlError as error:
            logger.warning("GET /api/audit/requests failed: %s", error)
            return _error(error, 503)
        return JSONResponse(record)

    return Route(PATH, one_request, methods=["GET"])
