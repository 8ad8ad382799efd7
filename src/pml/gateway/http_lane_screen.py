"""What the HTTP lane may answer: a POST's headers and body screened without the SDK.

    if not plain_post(request):                       # content type, Accept
        ...                                           # the SDK's path answers it
    call = plain_call(json_object_or_none)            # a plain tools/call, or None
    cancel = plain_cancel(message)                    # a notifications/cancelled, or None

Every check is a subset of what the SDK's streamable HTTP transport checks before it
dispatches: a request the lane declines goes to the SDK untouched, so a check here may be
stricter than the SDK's but never looser.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, cast

from mcp.server.streamable_http import check_accept_headers
from starlette.requests import Request

from pml.gateway.fast_lane import (
    ENVELOPE_KEYS,
    TRACE_META_KEYS,
    RequestId,
    keys_within,
    request_id_of,
)

CALL_MARK: Final = b'"tools/call"'
CANCEL_MARK: Final = b'"notifications/cancelled"'
REQUEST_KEYS: Final = frozenset({"jsonrpc", "id", "method", "params"})
NOTIFICATION_KEYS: Final = frozenset({"jsonrpc", "method", "params"})
CALL_PARAMS: Final = frozenset({"name", "arguments", "_meta"})
CANCEL_PARAMS: Final = frozenset({"requestId", "reason"})
MODERN_META: Final = ENVELOPE_KEYS | TRACE_META_KEYS
# Client capabilities under which an upstream may ask the client something during a call
# (elicitation/create, sampling/createMessage): only the SDK's path can carry the question.
MCP_PARAM_PREFIX: Final = "mcp-param-"


@dataclass(frozen=True, slots=True)
class PlainCall:
    """A ``tools/call`` the lane may answer: id, tool name, arguments and ``_meta``."""

    request_id: RequestId
    name: str
    arguments: dict[str, Any] | None
    meta: dict[str, Any] | None


def plain_post(request: Request) -> bool:
    """Whether the POST says JSON and accepts both answers the SDK may give (JSON or SSE)."""
    content_type = request.headers.get("content-type", "")
    if content_type.split(";")[0].strip().lower() != "application/json":
        return False
    has_json, has_sse = check_accept_headers(request)
    return has_json and has_sse


def has_param_headers(request: Request) -> bool:
    """Whether the request carries ``Mcp-Param-*`` headers (the SDK validates those)."""
    return any(name.startswith(MCP_PARAM_PREFIX) for name in request.headers)


def plain_call(message: object) -> PlainCall | None:
    """The ``tools/call`` ``message`` is, when it is a well-formed one with nothing but a
    name, object arguments and ``_meta``; else None (the SDK's path answers it)."""
    if not isinstance(message, dict):
        return None
    found = cast(dict[str, Any], message)
    if (
        found.get("jsonrpc") != "2.0"
        or found.get("method") != "tools/call"
        or not REQUEST_KEYS.issuperset(found)
    ):
        return None
    request_id = request_id_of(found)
    params = found.get("params")
    if request_id is None or not isinstance(params, dict):
        return None
    fields = cast(dict[str, Any], params)
    name, arguments, meta = fields.get("name"), fields.get("arguments"), fields.get("_meta")
    if (
        not CALL_PARAMS.issuperset(fields)
        or not isinstance(name, str)
        or not (arguments is None or isinstance(arguments, dict))
        or not (meta is None or isinstance(meta, dict))
    ):
        return None
    return PlainCall(
        request_id,
        name,
        cast("dict[str, Any] | None", arguments),
        cast("dict[str, Any] | None", meta),
    )


def plain_cancel(message: object) -> RequestId | None:
    """The request id a well-formed ``notifications/cancelled`` names, else None."""
    if not isinstance(message, dict):
        return None
    found = cast(dict[str, Any], message)
    params = found.get("params")
    if (
        found.get("jsonrpc") != "2.0"
        or found.get("method") != "notifications/cancelled"
        or not NOTIFICATION_KEYS.issuperset(found)
        or not isinstance(params, dict)
    ):
        return None
    fields = cast(dict[str, Any], params)
    reason = fields.get("reason")
    if not CANCEL_PARAMS.issuperset(fields) or not (reason is None or isinstance(reason, str)):
        return None
    return request_id_of({"id": fields.get("requestId")})


def session_meta_ok(meta: Mapping[str, Any] | None) -> bool:
    """A 2025-11-25 call's ``_meta``: absent or trace context only (a progress token or
    anything else takes the SDK's path)."""
    return meta is None or keys_within(meta, TRACE_META_KEYS)


def modern_meta_ok(meta: Mapping[str, Any] | None) -> bool:
    """A 2026-07-28 call's ``_meta``: the envelope and trace context, nothing else."""
    return keys_within(meta, MODERN_META)
