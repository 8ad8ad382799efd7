"""The HTTP fast lane: plain ``tools/call`` POSTs to ``/mcp`` answered without the SDK.

    lane = HttpCallLane(tools, manager, server_info=server.server_info_stamp, security=security)
    Route("/mcp", endpoint=LaneEndpoint(lane, StreamableHTTPASGIApp(manager)))

A pass-through call is the gateway's hot path, and the SDK's streamable HTTP transport
spends more on one than the upstream does (a dispatcher and memory streams per request, an
SSE response for a 2025-11-25 session). The lane answers, behind the same API-key check, a
POST that is a plain ``tools/call`` — a listed pass-through tool or one of the gateway's own,
a name, object arguments and at most the 2026-07-28 envelope or trace context in ``_meta`` —
in either protocol generation:

- 2026-07-28: the per-request envelope checked as the SDK checks it (routing headers,
  ``Mcp-Method``/``Mcp-Name``, ``Mcp-Param-*`` against the tool's schema);
- 2025-11-25: a session this replica holds, initialised, opened with the request's key
  (``SharedSessionManager.lane_session``: it counts as used and gets ``tools/list_changed``).

It calls the tool as the SDK's handler would (``fast_lane.lane_call``: the policy gate,
audit, usage, the ``tool_call`` step with ``lane="mcp"``, the ``pml connect`` client and the
key's prefix) and answers ``application/json``, shaped for the protocol version as the SDK
shapes it. A call still running after 15 s commits to ``text/event-stream`` with keep-alive
pings, as the SDK does. Cancellation: a 2026-07-28 client closes the stream; a session posts
``notifications/cancelled`` for a lane call (answered ``202``; the call gets ``-32800``).

A body nested more than ``MAX_JSON_DEPTH`` levels is refused first, whatever it is: HTTP 400
with JSON-RPC's parse error (``pml.gateway.http_lane_depth``). Everything else reaches the SDK
untouched (the body is given back): other methods, a progress token or other ``_meta``,
unknown tools, bodies that are not one JSON object or exceed the SDK's size limit, odd
headers, sessions held elsewhere or not initialised, and calls that may ask the client
something (a client declaring elicitation or sampling, for a pass-through tool or one that
may wait for approval).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Mapping
from contextlib import AbstractContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final, Protocol, cast

import anyio
from mcp.server.connection import Connection
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, REQUEST_CANCELLED
from mcp.server.transport_security import (
    DEFAULT_MAX_REQUEST_BODY_SIZE,
    TransportSecurityMiddleware,
    TransportSecuritySettings,
)
from mcp.shared.inbound import (
    MCP_PROTOCOL_VERSION_HEADER,
    InboundLadderRejection,
    classify_inbound_request,
    find_duplicated_routing_header,
    find_invalid_x_mcp_header,
    validate_mcp_param_headers,
    x_mcp_header_map,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from pml.execution.clients import calling_as, client_from_headers
from pml.gateway.client_asks import may_ask
from pml.gateway.fast_lane import RequestId, dump_json, json_object, lane_call, result_message
from pml.gateway.http_lane_depth import refused_too_deep
from pml.gateway.http_lane_screen import (
    CALL_MARK,
    CANCEL_MARK,
    PlainCall,
    has_param_headers,
    modern_meta_ok,
    plain_call,
    plain_cancel,
    plain_post,
    session_meta_ok,
)
from pml.gateway.http_lane_wire import Exchange, read_body, watching
from pml.gateway.session_http import Asgi, Requestor, caller_of, requestor_of
from pml.gateway.tools import GatewayTools
from pml.registry.scope import Principal
from pml.registry.scope import Scope as CallerScope
from pml.web.auth import PRINCIPAL_STATE_KEY

logger = logging.getLogger(__name__)

MAX_SCHEMAS: Final = 4096  # input schemas whose x-mcp-header check is remembered
Flight = tuple[str, RequestId]  # (session id, request id) of a session's lane call


class LaneSessions(Protocol):
    """The sessions the lane may answer for (``SharedSessionManager``)."""

    def lane_session(
        self, session_id: str, requestor: Requestor, caller: CallerScope
    ) -> AbstractContextManager[Connection | None]:
        """The session's connection while the block runs, or None (the SDK decides)."""
        ...


@dataclass(frozen=True, slots=True)
class _Target:
    """Where a call goes: a pass-through ``(server, tool)``, or None for the gateway's own."""

    pass_through: tuple[str, str] | None


class HttpCallLane:
    """Answers plain ``tools/call`` POSTs (see the module)."""

    def __init__(
        self,
        tools: GatewayTools,
        sessions: LaneSessions,
        *,
        server_info: dict[str, Any],
        security: TransportSecuritySettings | None,
        max_body: int = DEFAULT_MAX_REQUEST_BODY_SIZE,
    ) -> None:
        self._tools = tools
        self._sessions = sessions
        self._server_info = dict(server_info)
        self._security = TransportSecurityMiddleware(security)
        self._max_body = max_body
        self._in_flight: dict[Flight, anyio.CancelScope] = {}
        self._annotations: dict[int, tuple[Mapping[str, Any], bool]] = {}

    async def serve(self, scope: Scope, receive: Receive, send: Send, sdk: Asgi) -> None:
        """Answer the request here when it is a plain call, else hand it to ``sdk``."""
        caller = caller_of(scope)
        if scope["type"] != "http" or scope["method"] != "POST":
            await sdk(scope, receive, send)
            return
        request = Request(scope)
        if self._declared_too_long(request):
            await sdk(scope, receive, send)
            return
        read = await read_body(receive, self._max_body)
        replay = read.replayed(receive)
        body = read.data
        if await refused_too_deep(read, send, self._max_body):  # before any parser
            return
        too_long = len(body) > self._max_body
        if (
            caller is None
            or not plain_post(request)
            or not read.complete
            or too_long
            or (CALL_MARK not in body and CANCEL_MARK not in body)
        ):
            await sdk(scope, replay, send)
            return
        version = request.headers.get(MCP_PROTOCOL_VERSION_HEADER)
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            taken = await self._modern(request, body, caller, receive, send)
        else:
            taken = await self._in_session(request, body, caller, receive, send)
        if not taken:
            await sdk(scope, replay, send)

    def _declared_too_long(self, request: Request) -> bool:
        declared = request.headers.get("content-length")
        return declared is not None and (not declared.isdigit() or int(declared) > self._max_body)

    # -- the two generations ------------------------------------------------------------------

    async def _modern(
        self, request: Request, body: bytes, caller: CallerScope, receive: Receive, send: Send
    ) -> bool:
        """A 2026-07-28 call, checked as the SDK's single-exchange entry checks it."""
        message = json_object(body)  # stricter than the SDK's json.loads: no lone surrogates
        call = plain_call(message)
        if call is None or not modern_meta_ok(call.meta) or has_param_headers(request):
            return False
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.scope["headers"]]
        if find_duplicated_routing_header(headers) is not None:
            return False
        assert message is not None  # a plain call is an object
        route = classify_inbound_request(message, headers=dict(headers))
        if isinstance(route, InboundLadderRejection):
            return False
        target = self._target(call, route.client_capabilities)
        if target is None or not self._params_agree(call, request):
            return False
        if await self._security.validate_request(request, is_post=True) is not None:
            return False
        exchange = Exchange(send, None)
        await self._answer(request, call, target, caller, route.protocol_version, receive, exchange)
        return True

    async def _in_session(
        self, request: Request, body: bytes, caller: CallerScope, receive: Receive, send: Send
    ) -> bool:
        """A call (or a cancellation of one) in a 2025-11-25 session held here."""
        session_id = request.headers.get(MCP_SESSION_ID_HEADER)
        if session_id is None:
            return False
        message = json_object(body)  # the SDK's parser on this wire
        cancelled = plain_cancel(message) if CANCEL_MARK in body else None
        call = plain_call(message) if cancelled is None else None
        if cancelled is None and (call is None or not session_meta_ok(call.meta)):
            return False
        requestor = requestor_of(request.scope)
        with self._sessions.lane_session(session_id, requestor, caller) as connection:
            if connection is None:
                return False
            if cancelled is not None:
                return await self._cancel(request, (session_id, cancelled), send)
            assert call is not None
            params = connection.client_params
            target = self._target(call, params.capabilities if params is not None else None)
            flight = (session_id, call.request_id)
            if target is None or flight in self._in_flight:
                return False
            if await self._security.validate_request(request, is_post=True) is not None:
                return False
            exchange = Exchange(send, session_id)
            async with self._flying(flight) as scope:
                await self._answer(
                    request,
                    call,
                    target,
                    caller,
                    connection.protocol_version,
                    receive,
                    exchange,
                    cancel=scope,
                )
            return True

    async def _cancel(self, request: Request, flight: Flight, send: Send) -> bool:
        """``notifications/cancelled`` for one of the lane's calls: ``202``, and it stops."""
        scope = self._in_flight.get(flight)
        if scope is None:
            return False  # not ours: the SDK's dispatcher may know the request
        if await self._security.validate_request(request, is_post=True) is not None:
            return False
        scope.cancel()
        await Exchange(send, flight[0]).plain(202, b"")
        return True

    # -- the call --------------------------------------------------------------------------------

    def _target(self, call: PlainCall, capabilities: object) -> _Target | None:
        """Where ``call`` goes, when the lane may make it (None: the SDK's path)."""
        pass_through = self._tools.pass_through_target(call.name)
        if pass_through is None and not self._tools.is_gateway_tool(call.name):
            return None  # unknown here: the SDK's path says so (or finds it after a refresh)
        asks = pass_through is not None or self._tools.may_wait(call.name)
        if asks and may_ask(capabilities):
            return None
        return _Target(pass_through)

    def _params_agree(self, call: PlainCall, request: Request) -> bool:
        """The SDK's ``Mcp-Param-*`` check for a call with arguments (none are sent here)."""
        if not call.arguments:
            return True
        schema = self._tools.input_schema(call.name)
        if schema is None or not self._annotated(schema):
            return True
        return validate_mcp_param_headers(schema, call.arguments, request.headers) is None

    def _annotated(self, schema: Mapping[str, Any]) -> bool:
        """Whether ``schema`` declares ``x-mcp-header`` parameters (remembered per schema)."""
        known = self._annotations.get(id(schema))
        if known is not None and known[0] is schema:
            return known[1]
        if len(self._annotations) >= MAX_SCHEMAS:
            self._annotations.clear()
        # The SDK validates only a valid schema that declares some (x_mcp_header_map).
        annotated = find_invalid_x_mcp_header(schema) is None and bool(x_mcp_header_map(schema))
        self._annotations[id(schema)] = (schema, annotated)
        return annotated

    @asynccontextmanager
    async def _flying(self, flight: Flight) -> AsyncGenerator[anyio.CancelScope]:
        scope = anyio.CancelScope()
        self._in_flight[flight] = scope
        try:
            yield scope
        finally:
            self._in_flight.pop(flight, None)

    async def _answer(
        self,
        request: Request,
        call: PlainCall,
        target: _Target,
        caller: CallerScope,
        version: str,
        receive: Receive,
        exchange: Exchange,
        *,
        cancel: anyio.CancelScope | None = None,
    ) -> None:
        """Make the call and answer it (nothing when a 2026-07-28 client went away)."""
        modern = cancel is None
        scope = cancel if cancel is not None else anyio.CancelScope()
        key = _key_of(request)
        result: dict[str, Any] | None = None
        async with watching(exchange, receive, cancel_on_leave=scope if modern else None):
            with scope, calling_as(client_from_headers(request.headers), key):
                result = await lane_call(
                    self._tools,
                    caller,
                    call.name,
                    target.pass_through,
                    call.arguments,
                    lane="mcp",
                    key=key or "",
                )
        if result is not None:
            await exchange.finish(
                result_message(call.request_id, version, result, self._server_info)
            )
        elif not modern:  # this wire ends a cancelled request with an error (as the SDK)
            error = {"code": REQUEST_CANCELLED, "message": "Request cancelled"}
            await exchange.finish(
                dump_json({"jsonrpc": "2.0", "id": call.request_id, "error": error})
            )


def _key_of(request: Request) -> str | None:
    state: object = request.scope.get("state")
    principal = (
        cast(dict[str, object], state).get(PRINCIPAL_STATE_KEY) if isinstance(state, dict) else None
    )
    return principal.key_prefix if isinstance(principal, Principal) else None


class LaneEndpoint:
    """The ``/mcp`` endpoint: the lane first, the SDK's session manager for the rest."""

    def __init__(self, lane: HttpCallLane, sdk: Asgi) -> None:
        self._lane = lane
        self._sdk = sdk

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._lane.serve(scope, receive, send, self._sdk)
