"""``GET /api/audit``: the audit events the caller's key may see (SPEC §10.6, §11).

    GET /api/audit?limit=100                     -> the newest 100 events, oldest first
    GET /api/audit?after_id=4711&event=POLICY_DENIED&event=PERMISSION_DENIED
    GET /api/audit?tool=filesystem:write_file&decided_by=user:ana&since=2026-11-01T00:00Z
    GET /api/audit?before_id=4711                # the page before (older events)
    200 {"items": [{"id", "ts", "event", "actor", "scope", "org", "project",
                    "request_id", "details", "decided_by"}, ...],
         "next_after_id": 4790}                  # pass it back for what came after

The API key fixes the org and project: no parameter can reach another tenant's events.
Its role fixes whose: an ``agent`` key sees only the events recorded for its own user (the
``actor`` column), an ``admin`` key every user's events of its org/project.
Without a cursor the newest ``limit`` events come back; with ``after_id``, the first
``limit`` events after that id, so paging never skips one; with ``before_id``, the newest
``limit`` before it (the dashboard's Older page). The dashboard's filters are here too:
``user`` (the actor; an agent key only ever sees its own), ``tool`` (``server:tool``),
``capability`` (an FQDN), ``decided_by``, ``request_id``, each an exact match, and
``since`` (included) / ``until`` (excluded), ISO 8601 with a time zone.
``next_after_id`` is the last item's id (null when there are no items: ask again later
with the same ``after_id``). Unknown or malformed parameters get 400 with
``{"error": {"code": "INVALID_INPUT", ...}}``.
"""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from pml.errors import InvalidInput, PmlError, Unauthorized
from pml.registry.scope import Principal
from pml.storage.audit_repo import TEXT_LIMITS, AuditQuery, AuditRepository
from pml.storage.database import Database
from pml.web.auth import PRINCIPAL_STATE_KEY

logger = logging.getLogger(__name__)

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
MAX_EVENTS = 32
MAX_AFTER_ID = 2**63 - 1
TEXT_PARAMETERS = {  # parameter -> the column it matches
    "user": "actor",
    "tool": "tool",
    "capability": "capability",
    "decided_by": "decided_by",
    "request_id": "request_id",
}
TIME_PARAMETERS = ("since", "until")
PARAMETERS = frozenset(
    {"after_id", "before_id", "limit", "event", *TEXT_PARAMETERS, *TIME_PARAMETERS}
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
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
            f"Unknown parameter: {unknown[0][:40]!r}. Use {', '.join(sorted(PARAMETERS))}.",
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


def parse_search(params: QueryParams) -> tuple[dict[str, Any], AuditQuery]:
    """``parse_query``'s cursor and limit, ``before_id``, and the filters as a search."""
    base = parse_query(params)
    before_id = _number(params, "before_id", 0, MAX_AFTER_ID)
    if before_id is not None and base["after_id"] is not None:
        raise InvalidInput("Give after_id or before_id, not both.", field="before_id")
    texts: dict[str, str] = {}
    for name, column in TEXT_PARAMETERS.items():
        value = _single(params, name)
        if value is None:
            continue
        if not value or len(value) > TEXT_LIMITS[column] or _CONTROL.search(value):
            raise InvalidInput(
                f"Invalid {name}: 1 to {TEXT_LIMITS[column]} characters, no control characters.",
                field=name,
            )
        texts[column] = value
    times: dict[str, datetime] = {}
    for name in TIME_PARAMETERS:
        value = _single(params, name)
        if value is not None:
            times[name] = _instant(name, value)
    cursor = {"limit": base["limit"], "after_id": base["after_id"], "before_id": before_id}
    query = AuditQuery(
        events=tuple(base["events"] or ()),
        actor=texts.get("actor"),
        tool=texts.get("tool"),
        capability=texts.get("capability"),
        decided_by=texts.get("decided_by"),
        request_id=texts.get("request_id"),
        since=times.get("since"),
        until=times.get("until"),
    )
    return cursor, query


def _instant(name: str, text: str) -> datetime:
    problem = (
        f"Invalid {name}: {text[:40]!r}. Use ISO 8601 with a time zone, e.g. 2026-11-01T00:00Z."
    )
    if len(text) > 40:
        raise InvalidInput(problem, field=name)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InvalidInput(problem, field=name) from None
    if moment.tzinfo is None:
        raise InvalidInput(problem, field=name)
    return moment.astimezone(UTC)


def audit_route(db: Database) -> Route:
    """The ``GET /api/audit`` route over ``db`` (mounted behind ``ApiKeyMiddleware``)."""
    repo = AuditRepository(db)

    async def audit(request: Request) -> Response:
        principal = getattr(request.state, PRINCIPAL_STATE_KEY, None)
        if not isinstance(principal, Principal):  # the middleware puts it there; never without
            return _error(Unauthorized("Missing API key"), 401)
        try:
            cursor, query = parse_search(request.query_params)
        except InvalidInput as error:
            return _error(error, 400)
        scope = principal.scope
        if not principal.is_admin:  # an agent key sees its own user's events, whatever it asks
            if query.actor not in (None, scope.user):
                return JSONResponse({"items": [], "next_after_id": None})
            query = replace(query, actor=scope.user)
        try:
            rows = await repo.search(org=scope.org, project=scope.project, where=query, **cursor)
        except PmlError as error:
            logger.warning("GET /api/audit failed: %s", error)
            return _error(error, 503)
        items = [row.to_dict() for row in rows]
        return JSONResponse({"items": items, "next_after_id": items[-1]["id"] if items else None})

    return Route("/api/audit", audit, methods=["GET"])
