"""``/mcp`` bodies nested too deep are refused before any parser sees them.

    if await refused_too_deep(body, send):        # the lane's first look at a POST
        return
    endpoint = DepthGuard(sdk_app)                # without the lane: the same check alone

Python's ``json`` and pydantic parse by recursion, and the SDK's transports use both: a body
nested past ``MAX_JSON_DEPTH`` levels (``pml.wire_json``) is answered here with HTTP 400 and
JSON-RPC's parse error (-32700, no id), as the SDK answers a body it cannot parse.
"""

from __future__ import annotations

from typing import Final

from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from mcp_types import PARSE_ERROR
from starlette.types import Receive, Scope, Send

from pml.gateway.fast_lane import dump_json
from pml.gateway.http_lane_wire import Body, Exchange, read_body
from pml.gateway.session_http import Asgi
from pml.wire_json import TOO_DEEP_MESSAGE, text_too_deep

TOO_DEEP_ANSWER: Final = dump_json(
    {"jsonrpc": "2.0", "id": None, "error": {"code": PARSE_ERROR, "message": TOO_DEEP_MESSAGE}}
)


async def refused_too_deep(body: Body, send: Send, max_body: int) -> bool:
    """Whether the (whole, not over-long) ``body`` was nested too deep, and so answered."""
    if not body.complete or len(body.data) > max_body or not text_too_deep(body.data):
        return False
    await Exchange(send, None).plain(400, TOO_DEEP_ANSWER)
    return True


class DepthGuard:
    """``sdk`` behind the depth check of POST bodies (the ``/mcp`` endpoint without the lane)."""

    def __init__(self, sdk: Asgi, max_body: int = DEFAULT_MAX_REQUEST_BODY_SIZE) -> None:
        self._sdk = sdk
        self._max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self._sdk(scope, receive, send)
            return
        body = await read_body(receive, self._max_body)
        if not await refused_too_deep(body, send, self._max_body):
            await self._sdk(scope, body.replayed(receive), send)
