"""Upstream answers too deep for the SDK to parse, turned back into errors for their calls.

    item = readable(await read_stream.receive())   # in the session's read stream

The SDK parses an upstream's messages with pydantic, which stops at 200 levels of nesting.
On stdio it then hands the session the parse failure instead of the message, and the call
the message answered would wait for its timeout. ``readable`` turns such a failure (for a
message nested more than ``MAX_JSON_DEPTH`` levels) into a JSON-RPC error for the same
request, its ``id`` read from the message's outline: the call raises ``TOOL_ERROR`` at once.
"""

from __future__ import annotations

import logging
from typing import Any, Final, cast

import mcp_types
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from pml.wire_json import MAX_JSON_DEPTH, outline, text_too_deep

logger = logging.getLogger(__name__)

TOO_DEEP_MESSAGE: Final = f"the result is nested more than {MAX_JSON_DEPTH} levels deep"


def readable(item: SessionMessage | Exception) -> SessionMessage | Exception:
    """``item`` from a session's read stream, with a response too deep to parse turned into
    a JSON-RPC error for the same request (anything else is left as it is)."""
    if not isinstance(item, ValidationError):
        return item
    errors = item.errors(include_url=False)
    line = errors[0].get("input") if len(errors) == 1 else None
    if errors[0]["type"] != "json_invalid" or not isinstance(line, str | bytes):
        return item
    if not text_too_deep(line, MAX_JSON_DEPTH):
        return item
    try:
        envelope: object = outline(line, keep=1)
    except ValueError:
        return item
    request_id = cast("dict[str, Any]", envelope).get("id") if isinstance(envelope, dict) else None
    if isinstance(request_id, bool) or not isinstance(request_id, int | str):
        logger.warning("an upstream message nested too deep was dropped (no request id)")
        return item
    logger.warning("an upstream answer nested too deep was refused (request %r)", request_id)
    error = mcp_types.ErrorData(code=mcp_types.INTERNAL_ERROR, message=TOO_DEEP_MESSAGE)
    return SessionMessage(mcp_types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))
