"""ASGI helpers of the shared session manager: reading a request body and giving it back,
seeing the status an answer had, the caller's scope, and the SDK's style of refusal.

    body = await body_of(receive)                  # bounded already by the SDK's body limit
    await transport.handle_request(scope, replaying(body, receive), send)
    await refusal("Session not found", 404)(scope, receive, send)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import cast

import anyio
import mcp_types
from mcp.server.auth.middleware.bearer_auth import (
    AuthenticatedUser,
    AuthorizationContext,
    authorization_context,
)
from mcp.server.streamable_http import StreamableHTTPServerTransport
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from pml.registry.scope import Scope as CallerScope
from pml.web.auth import SCOPE_STATE_KEY

Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]
Requestor = AuthorizationContext | None  # who asks: the SDK's view of the API key, if any


def requestor_of(scope: Scope) -> Requestor:
    """The principal of the request's API key as the SDK compares session owners."""
    user = scope.get("user")
    return authorization_context(user) if isinstance(user, AuthenticatedUser) else None


def caller_of(scope: Scope) -> CallerScope | None:
    """The caller's scope the API-key middleware put on the request, if any."""
    state: object = scope.get("state")
    if not isinstance(state, dict):
        return None
    caller: object = cast(dict[str, object], state).get(SCOPE_STATE_KEY)
    return caller if isinstance(caller, CallerScope) else None


def refusal(message: str, status: int) -> Response:
    """A JSON-RPC error without an id, at an HTTP status (as the SDK answers)."""
    body = mcp_types.JSONRPCError(
        jsonrpc="2.0",
        id=None,
        error=mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message=message),
    )
    return Response(
        body.model_dump_json(by_alias=True, exclude_unset=True),
        status_code=status,
        media_type="application/json",
    )


async def body_of(receive: Receive) -> bytes:
    """The whole request body (already read and bounded by the SDK's body limit)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def replaying(body: bytes, receive: Receive) -> Receive:
    """``receive`` with ``body`` given back first (it was read to see what it is)."""
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        if pending:
            return pending.pop()
        return await receive()

    return replayed


async def status_of(app: Asgi, scope: Scope, receive: Receive, send: Send) -> int | None:
    """Let ``app`` answer; the HTTP status it answered with (None: no answer)."""
    status: int | None = None

    async def watching(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        await send(message)

    await app(scope, receive, watching)
    return status


def keep_alive(transport: StreamableHTTPServerTransport, timeout: float | None) -> None:
    """Push a session's idle deadline to a full ``timeout`` from now (never earlier)."""
    idle = transport.idle_scope
    if idle is not None and timeout is not None:
        idle.deadline = max(idle.deadline, anyio.current_time() + timeout)
