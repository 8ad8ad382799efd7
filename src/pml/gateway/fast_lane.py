"""The stdio fast lane: plain ``tools/call`` requests answered without the SDK's dispatcher.

    lane = ToolCallLane(tools, scope, server_info=server.server_info_stamp,
                           write=pipes.write_line)
    await serve_on_pipes(server, pipes, lane=lane)

A plain ``tools/call`` is the gateway's hot path. The lane reads it from the raw line and
answers it itself: a listed pass-through tool (``server__tool``) through
``GatewayTools.call_pass_through``, which hands the upstream result on as the server's
JSON object; one of the gateway's own tools (``pml_execute``, ``cap_*``, ...) through
``GatewayTools.call_tool`` — the same gate and errors as the SDK path. The result is shaped
for the client's protocol version by the SDK's own result surface: what the SDK server
would have sent, minus its per-request machinery (dispatcher, tracing middleware).

A call's ``_meta`` may carry W3C trace context (``traceparent``, ``tracestate``): the lane
hands it to its ``tool_call`` step, whose span (when traces are exported) joins the
client's trace as the SDK's server span would. Anything else goes to the SDK server
untouched: the opening request (it decides the protocol generation), any request before a
2025-11-25 session is initialised, requests the 2026-07-28 envelope check refuses, progress
tokens or other ``_meta``, unknown tools, ids already in flight. ``notifications/cancelled``
for a request of the lane cancels it (and, as the protocol asks, nothing is answered).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal, cast

import anyio
import anyio.abc
import mcp_types
import pydantic_core
from mcp.shared.inbound import InboundLadderRejection, classify_inbound_request
from mcp_types import methods as sdk_methods
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from pml.errors import PmlError
from pml.gateway.client_asks import envelope_may_ask
from pml.gateway.tools import GatewayTools
from pml.registry.scope import Scope
from pml.telemetry import observe

logger = logging.getLogger(__name__)

ENVELOPE_KEYS: Final = frozenset(
    {
        mcp_types.PROTOCOL_VERSION_META_KEY,
        mcp_types.CLIENT_INFO_META_KEY,
        mcp_types.CLIENT_CAPABILITIES_META_KEY,
    }
)
# W3C trace context a client may put in a call's _meta (SEP-414); longer values are ignored.
TRACE_META_KEYS: Final = frozenset({"traceparent", "tracestate"})
MAX_TRACE_META: Final = 512
_CALL_MARK: Final = b'"tools/call"'
_LIST_MARK: Final = b'"tools/list"'
_CANCEL_MARK: Final = b'"notifications/cancelled"'

Era = Literal["opening", "handshake", "session", "modern"]
RequestId = int | str


class ToolCallLane:
    """Answers plain ``tools/call`` lines of one stdio connection (see module)."""

    def __init__(
        self,
        tools: GatewayTools,
        scope: Scope,
        *,
        server_info: Mapping[str, Any],
        write: Callable[[bytes], None],
        session_tracked: Callable[[], bool] = lambda: False,
    ) -> None:
        self._tools = tools
        self._session_tracked = session_tracked
        self._scope = scope
        self._server_info = dict(server_info)
        self._write = write
        self._era: Era = "opening"
        self._initialize_id: RequestId | None = None
        self._session_version: str | None = None
        self._in_flight: dict[RequestId, anyio.CancelScope] = {}
        self._session_elicits = False

    def take(self, line: bytes, tasks: anyio.abc.TaskGroup) -> bool:
        """Whether the lane answers ``line`` (in a task of ``tasks``); else the server does."""
        if self._era in ("opening", "handshake"):
            self._watch_opening(line)
            return False
        if _CALL_MARK in line:
            return self._take_call(line, tasks)
        if _LIST_MARK in line:
            return self._take_list(line, tasks)
        if _CANCEL_MARK in line and self._in_flight:
            return self._take_cancel(line)
        return False

    def sent(self, message: mcp_types.JSONRPCMessage) -> None:
        """Learn the session's version from the server's answer to ``initialize``."""
        if (
            self._era == "handshake"
            and isinstance(message, mcp_types.JSONRPCResponse)
            and message.id == self._initialize_id
        ):
            version = message.result.get("protocolVersion")
            if isinstance(version, str):
                self._session_version = version
                self._era = "session"

    # -- what the lane accepts ------------------------------------------------------------------

    def _watch_opening(self, line: bytes) -> None:
        """The first request decides the generation, as in the SDK's server runner."""
        message = json_object(line)
        if message is None or not isinstance(message.get("method"), str) or "id" not in message:
            return  # notifications and noise before the first request decide nothing
        if self._era == "handshake":
            return  # a second request while the handshake is pending: still the server's
        if message["method"] == "initialize":
            self._era = "handshake"
            self._initialize_id = request_id_of(message)
            self._session_elicits = declares_elicitation(message.get("params"), "capabilities")
        else:
            self._era = "modern"

    def _request(
        self, line: bytes, method: str, no_params: dict[str, Any] | None
    ) -> tuple[dict[str, Any], RequestId, dict[str, Any]] | None:
        """``(message, id, params)`` of a JSON-RPC request for ``method`` with an id not in
        flight and object params (``no_params`` stands for absent ones), else None."""
        message = json_object(line)
        if message is None or message.get("jsonrpc") != "2.0" or message.get("method") != method:
            return None
        request_id = request_id_of(message)
        params = message.get("params", no_params)
        if request_id is None or request_id in self._in_flight or not isinstance(params, dict):
            return None
        return message, request_id, cast("dict[str, Any]", params)

    def _take_call(self, line: bytes, tasks: anyio.abc.TaskGroup) -> bool:
        found = self._request(line, "tools/call", None)
        if found is None:
            return False
        message, request_id, params = found
        version = self._version_of(message, params, traced=True)
        name, arguments = params.get("name"), params.get("arguments")
        if (
            version is None
            or not isinstance(name, str)
            or not (arguments is None or isinstance(arguments, dict))
            or not set(params).issubset({"name", "arguments", "_meta"})
        ):
            return False
        target = self._tools.pass_through_target(name)
        if target is None and not self._tools.is_gateway_tool(name):
            return False
        if target is None and self._tools.may_wait(name) and self._elicits(params):
            return False  # may ask the person (elicitation/create): the server's full path
        may_reach_client = target is not None or self._tools.may_wait(name)
        if may_reach_client and self._era != "session" and envelope_may_ask(params.get("_meta")):
            return False  # an upstream may ask this client something: the server relays it
        call_arguments = cast("dict[str, Any] | None", arguments)
        scope = anyio.CancelScope()
        self._in_flight[request_id] = scope
        trace = trace_context(params.get("_meta"))
        tasks.start_soon(
            self._answer, request_id, version, name, target, call_arguments, scope, trace
        )
        return True

    def _take_list(self, line: bytes, tasks: anyio.abc.TaskGroup) -> bool:
        """A plain ``tools/list`` (a cursor at most), once the SDK server has seen the session.

        A 2025-11-25 session's first list goes to the server, which remembers the connection
        for ``tools/list_changed``; later lists, and every 2026-07-28 list, are answered here
        from the pre-serialised tools.
        """
        found = self._request(line, "tools/list", {})
        if found is None:
            return False
        message, request_id, params = found
        cursor = params.get("cursor")
        if not set(params).issubset({"cursor", "_meta"}) or not (
            cursor is None or isinstance(cursor, str)
        ):
            return False
        version = self._version_of(message, params)
        if version is None or (self._era == "session" and not self._session_tracked()):
            return False
        scope = anyio.CancelScope()
        self._in_flight[request_id] = scope
        tasks.start_soon(self._answer_list, request_id, version, cursor, scope)
        return True

    async def _answer_list(
        self, request_id: RequestId, version: str, cursor: str | None, scope: anyio.CancelScope
    ) -> None:
        try:
            with scope:
                try:
                    items, next_cursor = await self._tools.list_page_json(self._scope, cursor)
                except PmlError as error:
                    code = (
                        mcp_types.INVALID_PARAMS
                        if error.code == "INVALID_INPUT"
                        else (mcp_types.INTERNAL_ERROR)
                    )
                    failure = {"code": code, "message": error.message}
                    self._write(dump_json({"jsonrpc": "2.0", "id": request_id, "error": failure}))
                    return
                self._write(self._list_response(request_id, version, items, next_cursor))
        finally:
            self._in_flight.pop(request_id, None)

    def _list_response(
        self, request_id: RequestId, version: str, items: list[str], next_cursor: str | None
    ) -> bytes:
        """The ``tools/list`` answer, spliced from pre-serialised tools (no re-validation)."""
        rest: dict[str, Any] = {}
        if next_cursor is not None:
            rest["nextCursor"] = next_cursor
        if version in MODERN_PROTOCOL_VERSIONS:
            rest |= {
                "ttlMs": 0,
                "cacheScope": "private",
                "resultType": "complete",
                "_meta": {mcp_types.SERVER_INFO_META_KEY: dict(self._server_info)},
            }
        tail = json.dumps(rest, ensure_ascii=False, separators=(",", ":"))[1:-1]
        head = json.dumps(request_id)
        body = ",".join(items)
        text = f'{{"jsonrpc":"2.0","id":{head},"result":{{"tools":[{body}]'
        return (text + (f",{tail}" if tail else "") + "}}").encode()

    def _elicits(self, params: dict[str, Any]) -> bool:
        """Whether the client of this call declared elicitation (session or this request)."""
        if self._era == "session":
            return self._session_elicits
        return declares_elicitation(params.get("_meta"), mcp_types.CLIENT_CAPABILITIES_META_KEY)

    def _version_of(
        self, message: dict[str, Any], params: dict[str, Any], *, traced: bool = False
    ) -> str | None:
        """The request's protocol version, or ``None`` when the server must see it
        (``traced``: trace context in ``_meta`` is the lane's too)."""
        meta = params.get("_meta")
        also = TRACE_META_KEYS if traced else frozenset[str]()
        if self._era == "session":
            return self._session_version if meta is None or keys_within(meta, also) else None
        if not keys_within(meta, ENVELOPE_KEYS | also):
            return None
        route = classify_inbound_request(message)
        if isinstance(route, InboundLadderRejection):
            return None
        return route.protocol_version

    def _take_cancel(self, line: bytes) -> bool:
        message = json_object(line)
        if message is None or message.get("method") != "notifications/cancelled":
            return False
        params = message.get("params")
        request_id = params.get("requestId") if isinstance(params, dict) else None  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        scope = self._in_flight.get(request_id) if isinstance(request_id, int | str) else None
        if scope is None:
            return False
        scope.cancel()
        return True

    # -- the answer -----------------------------------------------------------------------------

    async def _answer(
        self,
        request_id: RequestId,
        version: str,
        name: str,
        target: tuple[str, str] | None,
        arguments: dict[str, Any] | None,
        scope: anyio.CancelScope,
        trace: dict[str, str],
    ) -> None:
        try:
            result: dict[str, Any] | None = None
            with scope:
                result = await lane_call(
                    self._tools, self._scope, name, target, arguments, lane="stdio", **trace
                )
            if result is not None:  # a cancelled request is not answered
                self._write(result_message(request_id, version, result, self._server_info))
        finally:
            self._in_flight.pop(request_id, None)


async def lane_call(
    tools: GatewayTools,
    scope: Scope,
    name: str,
    target: tuple[str, str] | None,
    arguments: dict[str, Any] | None,
    **attributes: str,
) -> dict[str, Any]:
    """One ``tools/call`` answered by a lane: a pass-through ``target`` through
    ``call_pass_through`` (the upstream's JSON object), else the gateway's own tool; observed as
    the ``tool_call`` step with ``attributes`` (``lane``, trace context, ``key``). Never raises
    for a failed call: failures are ``isError`` results, as on the SDK path."""
    with observe.step("tool_call", tool=name, user=scope.user, **attributes) as step:
        if target is not None:
            server, tool = target
            answer = await tools.call_pass_through(scope, server, tool, arguments)
            if answer.get("isError") is True:
                step.outcome = "tool_error"
            return answer
        result = await tools.call_tool(scope, name, arguments)
        if result.is_error:
            step.outcome = "tool_error"
        return result.model_dump(mode="json", by_alias=True, exclude_none=True)


def result_message(
    request_id: RequestId, version: str, result: dict[str, Any], server_info: Mapping[str, Any]
) -> bytes:
    """The JSON-RPC answer carrying ``result`` as the SDK server shapes it for ``version``
    (its own result surface; 2026-07-28 results get ``resultType`` and the server stamp)."""
    modern = version in MODERN_PROTOCOL_VERSIONS
    if modern and "resultType" not in result:  # a 2025 upstream's results are complete
        result = {**result, "resultType": "complete"}
    try:
        shaped = sdk_methods.serialize_server_result("tools/call", version, result)
    except (ValidationError, ValueError, KeyError):
        logger.exception("upstream result not valid for protocol %s", version)
        error = {
            "code": mcp_types.INTERNAL_ERROR,
            "message": "Handler returned an invalid result",
        }
        return dump_json({"jsonrpc": "2.0", "id": request_id, "error": error})
    if modern:
        meta = shaped.get("_meta")
        if not isinstance(meta, dict):
            shaped["_meta"] = {mcp_types.SERVER_INFO_META_KEY: dict(server_info)}
        elif meta.get(mcp_types.SERVER_INFO_META_KEY) is None:  # pyright: ignore[reportUnknownMemberType]
            shaped["_meta"] = {**meta, mcp_types.SERVER_INFO_META_KEY: dict(server_info)}
    return dump_json({"jsonrpc": "2.0", "id": request_id, "result": shaped})


def keys_within(meta: object, allowed: frozenset[str]) -> bool:
    return isinstance(meta, dict) and set(cast("dict[str, Any]", meta)).issubset(allowed)


def trace_context(meta: object) -> dict[str, str]:
    """The string ``traceparent``/``tracestate`` of a call's ``_meta`` (others ignored)."""
    if not isinstance(meta, dict):
        return {}
    found = cast("dict[str, Any]", meta)
    return {
        key: value
        for key in TRACE_META_KEYS
        if isinstance(value := found.get(key), str) and len(value) <= MAX_TRACE_META
    }


def json_object(line: bytes) -> dict[str, Any] | None:
    """The JSON object ``line`` is (None for anything else). Parsed as the SDK parses
    messages: a lone surrogate (``"\\ud800"``) is not valid text, and could not be answered."""
    try:
        value: object = pydantic_core.from_json(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None  # pyright: ignore[reportUnknownVariableType]


def request_id_of(message: Mapping[str, Any]) -> RequestId | None:
    value = message.get("id")
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    return value


def dump_json(message: dict[str, Any]) -> bytes:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()


def declares_elicitation(holder: object, key: str) -> bool:
    """Whether ``holder[key]`` is a client-capabilities object declaring elicitation."""
    if not isinstance(holder, dict):
        return False
    found = cast("dict[str, Any]", holder).get(key)
    return isinstance(found, dict) and "elicitation" in found
