"""``GET /api/capabilities`` and ``GET /api/capabilities/{fqdn}`` (SPEC §6.5, §11): what
``cap_list`` and ``cap_whois`` answer, over plain HTTP, for the scope of the caller's key.

    GET /api/capabilities?pattern=fs:*&tags=io,json&sort_by=name&limit=20
    200 {"items": [{"fqdn", "display_name", "tags", "visibility", "usage_count", ...}, ...],
         "total": 42}                             # the same JSON as cap_list {...}
    GET /api/capabilities?archived=true           # the archived ones instead (cap_list's)
    GET /api/capabilities/acme.webapp.fs.read_json.a7f3
    200 {"fqdn": ..., "code": ..., "aliases": [...], "version_count": 2, "tool_usage": ...}
    404 {"error": {"code": "NOT_FOUND", "message": "Capability not found: acme.webapp..."}}

The answers come from :class:`pml.registry.tools.CapTools`, the code behind the MCP tools,
so filters, order, paging, visibility and errors are theirs: a capability the key's scope
cannot see is missing (404), a malformed FQDN is 400 as ``cap_whois`` says. The query
string is read strictly: booleans ``true|false|1|0``, numbers as ASCII digits, ``tags``
repeated or comma-separated, every other parameter at most once. Unknown or malformed
parameters, control characters (NUL included) and values over 256 characters get 400 with
``{"error": {"code": "INVALID_INPUT", ...}}`` before any query runs.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from pml.errors import InternalError, InvalidInput, PmlError, Unauthorized
from pml.registry.scope import Scope
from pml.registry.service import CapabilityRegistry
from pml.registry.tools import CapTools
from pml.web.auth import SCOPE_STATE_KEY

logger = logging.getLogger(__name__)

TEXTS = ("pattern", "created_by", "visibility", "sort_by", "order")
BOOLEANS = ("named_only", "unnamed_only", "archived")
NUMBERS = ("limit", "offset")
PARAMETERS = frozenset((*TEXTS, *BOOLEANS, *NUMBERS, "tags"))
BOOLEAN_VALUES = {"true": True, "1": True, "false": False, "0": False}
MAX_VALUE_LENGTH = 256
MAX_TAGS = 32
STATUS_OF_ERROR = {
    "INVALID_INPUT": 400,
    "INVALID_NAME": 400,
    "UNAUTHORIZED": 401,
    "FORBIDDEN": 403,  # the key's role may not do this (purge needs an admin key)
    "PERMISSION_DENIED": 403,  # visible, but owned by another project
    "NOT_FOUND": 404,
    "VERSION_NOT_FOUND": 404,
    "NAME_TAKEN": 409,
    "LIMIT_EXCEEDED": 409,  # the project is at its capability quota (a restore)
    "STORAGE_ERROR": 503,  # the database is down or refused: not the caller's fault
}
_DIGITS = re.compile(r"[0-9]{1,19}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _error(error: PmlError, status: int) -> Response:
    return JSONResponse({"error": error.to_dict()}, status_code=status)


def _check_values(params: QueryParams) -> None:
    unknown = sorted(set(params.keys()) - PARAMETERS)
    if unknown:
        raise InvalidInput(
            f"Unknown parameter: {unknown[0][:40]!r}. Use {', '.join(sorted(PARAMETERS))}.",
            field=unknown[0][:40],
        )
    for name, value in params.multi_items():
        if len(value) > MAX_VALUE_LENGTH:
            raise InvalidInput(
                f"{name} is too long (at most {MAX_VALUE_LENGTH} characters).", field=name
            )
        if _CONTROL.search(value) is not None:
            raise InvalidInput(f"{name} must not contain control characters.", field=name)


def _single(params: QueryParams, name: str) -> str | None:
    values = params.getlist(name)
    if len(values) > 1:
        raise InvalidInput(f"Give {name} at most once.", field=name)
    return values[0] if values else None


def _boolean(name: str, text: str) -> bool:
    value = BOOLEAN_VALUES.get(text)
    if value is None:
        raise InvalidInput(f"Invalid {name}: {text[:40]!r}. Use true, false, 1 or 0.", field=name)
    return value


def _number(name: str, text: str) -> int:
    # ASCII digits only: int() would also take "+1", " 1", "1_0" and fullwidth digits.
    if _DIGITS.fullmatch(text) is None:
        raise InvalidInput(
            f"Invalid {name}: {text[:40]!r}. Use a whole number written in digits.", field=name
        )
    return int(text)


def _tags(params: QueryParams) -> list[str]:
    tags = [tag for value in params.getlist("tags") for tag in value.split(",")]
    if len(tags) > MAX_TAGS:
        raise InvalidInput(f"Give at most {MAX_TAGS} tags.", field="tags")
    if "" in tags:
        raise InvalidInput(
            "Invalid tags: a tag is empty. Use tags=a,b or tags=a&tags=b.",
            field="tags",
        )
    return tags


def parse_list_query(params: QueryParams) -> dict[str, Any]:
    """The ``cap_list`` arguments the query string gives, or ``INVALID_INPUT``.

    Only the parameters present are returned: ``cap_list`` applies its own defaults, and
    checks ranges and choices (``limit`` 1-500, ``sort_by``, ``visibility``...) itself.
    """
    _check_values(params)
    arguments: dict[str, Any] = {}
    for name in (*TEXTS, *BOOLEANS, *NUMBERS):
        text = _single(params, name)
        if text is None:
            continue
        if name in BOOLEANS:
            arguments[name] = _boolean(name, text)
        elif name in NUMBERS:
            arguments[name] = _number(name, text)
        else:
            arguments[name] = text
    if "tags" in params:
        arguments["tags"] = _tags(params)
    return arguments


def scope_of(request: Request) -> Scope:
    scope = getattr(request.state, SCOPE_STATE_KEY, None)
    if not isinstance(scope, Scope):  # the middleware puts it there; never serve without
        raise Unauthorized("Missing API key")
    return scope


async def answer(
    request: Request, what: str, run: Callable[[], Awaitable[dict[str, Any]]]
) -> Response:
    """``run()``'s JSON, or its error with the HTTP status of its code."""
    try:
        return JSONResponse(await run())
    except PmlError as error:
        status = STATUS_OF_ERROR.get(error.code, 500)
        if status >= 500:
            logger.warning("%s %s failed: %s", request.method, what, error)
        return _error(error, status)
    except Exception:  # the HTTP edge: log it, answer without a traceback
        logger.exception("%s %s failed unexpectedly", request.method, what)
        return _error(InternalError(f"Internal error while answering {what}"), 500)


def capabilities_routes(registry: CapabilityRegistry) -> list[Route]:
    """The two routes over ``registry`` (mounted behind ``ApiKeyMiddleware``)."""
    tools = CapTools(registry)

    async def list_capabilities(request: Request) -> Response:
        async def run() -> dict[str, Any]:
            scope = scope_of(request)
            return await tools.list(scope, parse_list_query(request.query_params))

        return await answer(request, "/api/capabilities", run)

    async def whois(request: Request) -> Response:
        async def run() -> dict[str, Any]:
            scope = scope_of(request)
            extra = sorted(request.query_params.keys())
            if extra:
                raise InvalidInput(
                    f"Unknown parameter: {extra[0][:40]!r}. This endpoint takes none.",
                    field=extra[0][:40],
                )
            return await tools.whois(scope, {"fqdn": request.path_params["fqdn"]})

        return await answer(request, "/api/capabilities/{fqdn}", run)

    return [
        Route("/api/capabilities", list_capabilities, methods=["GET"]),
        # ``path``: a value with a slash is still answered here (as cap_whois answers it)
        Route("/api/capabilities/{fqdn:path}", whois, methods=["GET"]),
    ]
