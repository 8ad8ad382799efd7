"""The pieces of a shared MCP session that travel between replicas: ids, owners, replies.

    is_session_id(session_id)                     # 32 lowercase hex digits, else never looked up
    session_hash(session_id)                      # what the database keeps
    dispatcher = ReplicaDispatcher(read, write, tag=tag, on_initialized=record)
    reply = reply_of(body)                        # a client's answer to our request, if it is one
    tag_of(reply.id) == tag                       # which replica asked (and waits for it)

A 2025-11-25 session's server-to-client requests (elicitation) are answered by the client
in a new POST, which the load balancer may hand to any replica. Every replica numbers its
requests from ``tag << 32``, so the answer names the replica waiting for it: the replica
that receives it passes it on over PostgreSQL ``NOTIFY`` (``Notice``) when it is not its own.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, cast

import anyio
import mcp_types
from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.session import ServerSession
from mcp.shared.dispatcher import (
    CallOptions,
    DispatchContext,
    OnNotify,
    OnNotifyIntercept,
    OnRequest,
)
from mcp.shared.exceptions import NoBackChannelError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.message import MessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types import JSONRPCError, JSONRPCResponse, RequestId
from pydantic import ValidationError

from pml.gateway.notify import Context
from pml.storage.session_repo import SessionRecord

logger = logging.getLogger(__name__)

SESSION_ID: Final = re.compile(r"[0-9a-f]{32}")
TAG_BITS: Final = 20
COUNTER_BITS: Final = 32
# The largest JSON notice PostgreSQL carries is 8000 bytes; the envelope takes the rest.
MAX_RELAYED_REPLY: Final = 7000
NOTICE_KINDS: Final = frozenset({"reply", "closed"})

Reply = JSONRPCResponse | JSONRPCError
Initialized = Callable[[Connection], Awaitable[None]]


def is_session_id(value: str) -> bool:
    """Whether ``value`` has the shape of the session ids the SDK issues (a random UUID's 32
    lowercase hex digits); checked before any database lookup."""
    return SESSION_ID.fullmatch(value) is not None


def session_hash(session_id: str) -> str:
    """The stored form of a session id."""
    return hashlib.sha256(session_id.encode("ascii")).hexdigest()


def owner_hash(requestor: AuthorizationContext | None) -> str:
    """The stored form of a session's owner (the API key's digest and its scope)."""
    text = json.dumps(dict(requestor) if requestor is not None else None, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def new_tag() -> int:
    """A replica's tag: the high bits of every request id it sends (never 0)."""
    return secrets.randbelow((1 << TAG_BITS) - 1) + 1


def tag_of(request_id: RequestId | None) -> int | None:
    """The tag of the replica that sent the request ``request_id`` answers, if it is PML's."""
    if isinstance(request_id, str):
        try:
            request_id = int(request_id)
        except ValueError:
            return None
    if not isinstance(request_id, int) or request_id < 0:
        return None
    tag = request_id >> COUNTER_BITS
    return tag if 0 < tag < (1 << TAG_BITS) else None


def reply_of(body: bytes) -> Reply | None:
    """The JSON-RPC response or error ``body`` is, when it is one (not a request)."""
    if b'"method"' in body:  # requests and notifications: the fast path, nearly every POST
        return None
    try:
        data: object = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: deep nesting
        return None
    if not isinstance(data, dict) or "id" not in data:
        return None
    message = cast(dict[str, Any], data)
    try:
        if "error" in message:
            return JSONRPCError.model_validate(message, by_name=False)
        if "result" in message:
            return JSONRPCResponse.model_validate(message, by_name=False)
    except ValidationError:
        return None
    return None


@dataclass(frozen=True, slots=True)
class Notice:
    """What one replica tells the others about a session: a reply to pass on, or its end."""

    kind: Literal["reply", "closed"]
    session_hash: str
    tag: int = 0
    reply: Reply | None = None

    def payload(self) -> str:
        """The ``NOTIFY`` payload."""
        data: dict[str, Any] = {"kind": self.kind, "session": self.session_hash}
        if self.reply is not None:
            data["tag"] = self.tag
            data["reply"] = self.reply.model_dump(by_alias=True, mode="json", exclude_unset=True)
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def parse(cls, payload: str) -> Notice | None:
        """A notice read back, or None when ``payload`` is not one of ours."""
        try:
            data: object = json.loads(payload)
        except (ValueError, RecursionError):
            return None
        if not isinstance(data, dict):
            return None
        fields = cast(dict[str, Any], data)
        kind, hashed = fields.get("kind"), fields.get("session")
        if kind not in NOTICE_KINDS or not isinstance(hashed, str) or len(hashed) != 64:
            return None
        if kind == "closed":
            return cls("closed", hashed)
        tag, raw = fields.get("tag"), fields.get("reply")
        reply = reply_of(json.dumps(raw).encode()) if isinstance(raw, dict) else None
        if not isinstance(tag, int) or reply is None:
            return None
        return cls("reply", hashed, tag, reply)


class ReplicaDispatcher(JSONRPCDispatcher[TransportContext]):
    """The SDK's dispatcher for one session on one replica: request ids carry the replica's
    tag, a reply passed on by another replica can be delivered, and ``on_initialized``
    runs once the client's ``initialize`` succeeded, before its result is sent."""

    def __init__(
        self,
        read_stream: Any,
        write_stream: Any,
        *,
        tag: int,
        on_initialized: Initialized | None = None,
    ) -> None:
        super().__init__(read_stream, write_stream, inline_methods=frozenset({"initialize"}))
        self._next_id = tag << COUNTER_BITS
        self._on_initialized = on_initialized
        self.connection: Connection | None = None

    def deliver(self, reply: Reply) -> None:
        """Hand the waiting request its answer (a no-op when nothing waits for it)."""
        outcome = reply.result if isinstance(reply, JSONRPCResponse) else reply.error
        self._resolve_pending(reply.id, outcome)

    async def run(
        self,
        on_request: OnRequest,
        on_notify: OnNotify,
        on_notify_intercept: OnNotifyIntercept | None = None,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """The SDK's loop, with ``on_initialized`` called after a successful ``initialize``."""
        recorded = self._on_initialized

        async def on_request_recorded(
            dctx: DispatchContext[TransportContext],
            method: str,
            params: Mapping[str, Any] | None,
        ) -> dict[str, Any]:
            result = await on_request(dctx, method, params)
            if method == "initialize" and recorded is not None and self.connection is not None:
                await recorded(self.connection)
            return result

        await super().run(
            on_request_recorded, on_notify, on_notify_intercept, task_status=task_status
        )


class _StandaloneStream:
    """The request channel of a context that stands for a session's standalone stream: there
    is no request to answer on, so it carries nothing (the connection's own channel does)."""

    def __init__(self) -> None:
        self._never = anyio.Event()

    @property
    def transport(self) -> TransportContext:
        return TransportContext(kind="streamable-http", can_send_request=False)

    @property
    def can_send_request(self) -> bool:
        return False

    @property
    def request_id(self) -> RequestId | None:
        return None

    @property
    def message_metadata(self) -> MessageMetadata:
        return None

    @property
    def cancel_requested(self) -> anyio.Event:
        return self._never

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        raise NoBackChannelError(method)

    async def notify(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> None:
        logger.debug("dropped %s: a standalone stream context answers no request", method)

    async def progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        return None


def stream_context(connection: Connection, lifespan_state: Any) -> Context:
    """A handler context for ``connection``'s standalone (GET) stream, so that the replica
    holding that stream can be told to notify it like any session it served."""
    channel: DispatchContext[Any] = _StandaloneStream()
    return ServerRequestContext(
        session=ServerSession(channel, connection),
        lifespan_context=cast(dict[str, Any], lifespan_state or {}),
        protocol_version=connection.protocol_version,
        method="notifications/stream",
    )


def resume_handshake(connection: Connection, record: SessionRecord) -> None:
    """Make ``connection`` what the client's recorded handshake made it on another replica."""
    connection.client_params = mcp_types.InitializeRequestParams.model_validate(
        record.client, by_name=False
    )
    connection.protocol_version = record.protocol_version
    connection.initialized.set()
