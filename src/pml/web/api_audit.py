"""``GET /api/audit``: the audit events the caller's key may see (SPEC §10.6, §11).

    GET /api/audit?limit=100                     -> the newest 100 events, oldest first
    GET /api/audit?after_id=4711&event=POLICY_DENIED&event=PERMISSION_DENIED
    200 {"items": [{"id", "ts", "event", "actor", "scope", "org", "project",
                    "request_id", "details", "decided_by"}, ...],
         "next_after_id": 4790}                  # pass it back for what came after

The API key fixes the org and project: no parameter can reach another tenant's events.
Its role fixes whose: an ``agent`` key sees only the events recorded for its own user (the
``actor`` column), an ``admin`` key every user's events of its org/project.
Without ``after_id`` the newest ``limit`` events come back; with it, the first ``limit``
events after that id, so paging never skips one. ``next_after_id`` is the last item's id
(null when there are no items: ask again later with the same ``after_id``). Unknown or
malformed parameters get 400 with ``{"error": {"code": "INVALID_INPUT", ...}}``.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from pml.errors import InvalidInput, PmlError, Unauthorized
from pml.registry.scope import Principal
from pml.storage.audit_repo import AuditRepository
from pml.storage.database import Database
from pml.web.auth import PRINCIPAL_STATE_KEY

logger = logging.getLogger(__name__)

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
MAX_EVENTS = 32
MAX_AFTER_ID = 2**63 - 1
PARAMETERS = frozenset({"after_id", "limit", "event"})
_DIGITS = re.compile(r"[0-9]{1,19}")
_EVENT_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,63}")


def _error(error: PmlError, status: int) -> Response:
    return JSONResponse({"error": error.to_dict()}, status_code=status)


def _single(params: QueryParams, name: str) -> str | None:
    values = params.getlist(name)
    if len(values) > 1:
        raise InvalidInput(f"Give {name} at most once.", field=name)
    return values[0] if values else None


def _number(params: QueryParams, name: str, low: int, high: int) -> int | None:
    text = _single(params, name)
    if text is None:
        return None
    if _DIGITS.fullmatch(text) is None or not low <= int(text) <= high:
        raise InvalidInput(
            f"Invalid {name}: {text[:40]!r}. Use a whole number from {low} to {high}.",
            field=name,
        )
    return int(text)


def parse_query(params: QueryParams) -> dict[str, Any]:
    """``after_id``, ``limit`` and ``events`` from the query string, or ``INVALID_INPUT``."""
    unknown = sorted(set(params.keys()) - PARAMETERS)
    if unknown:
        raise InvalidInput(
            f"Unknown parameter: {unknown[0][:40]!r}. Use after_id, limit or event.",
            field=unknown[0][:40],
        )
    events = params.getlist("event")
    if len(events) > MAX_EVENTS:
        raise InvalidInput(f"Give event at most {MAX_EVENTS} times.", field="event")
    for name in events:
        if _EVENT_NAME.fullmatch(name) is None:
            raise InvalidInput(
                f"Invalid event: {name[:40]!r}. Use an event name such as POLICY_DENIED.",
                field="event",
            )
    limit = _number(params, "limit", 1, MAX_LIMIT)
    return {
        "after_id": _number(params, "after_id", 0, MAX_AFTER_ID),
        "limit": DEFAULT_LIMIT if limit is None else limit,
        "events": events or None,
    }


def audit_route(db: Database) -> Route:
    """The ``GET /api/audit`` route over ``db`` (mounted behind ``ApiKeyMiddleware``)."""
    repo = AuditRepository(db)

    async def audit(request: Request) -> Response:
        principal = getattr(request.state, PRINCIPAL_STATE_KEY, None)
        if not isinstance(principal, Principal):  # the middleware puts it there; never without
            return _error(Unauthorized("Missing API key"), 401)
        try:
            query = parse_query(request.query_params)
        except InvalidInput as error:
            return _error(error, 400)
        scope = principal.scope
        actor = None if principal.is_admin else scope.user
        try:
            rows = await repo.tail(org=scope.org, project=scope.project, actor=actor, **query)
        except PmlError as error:
            logger.warning("GET /api/audit failed: %s", error)
            return _error(error, 503)
        items = [row.to_dict() for row in rows]
        return JSONResponse({"items": items, "next_after_id": items[-1]["id"] if items else None})

    return Route("/api/audit", audit, methods=["GET"])
