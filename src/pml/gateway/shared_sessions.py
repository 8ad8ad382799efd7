"""2025-11-25 MCP sessions that every replica serves: no load-balancer stickiness needed.

    manager = SharedSessionManager(server, db=db, notifier=notifier, security_settings=None)
    app = mcp_app(server, db=db, notifier=notifier, tools=tools)   # pml.gateway.http_lane_app

The SDK keeps a session in the memory of the process that opened it; behind a round-robin
load balancer the next request of that session reaches another replica, which answers 404.
Here a session is recorded in the database when its client's ``initialize`` succeeds
(before the result is sent): the SHA-256 of its id, the digest of its owner (the API key
that opened it), the negotiated protocol version and the client's initialize params. A
replica that gets a request for a session it does not hold looks it up, checks that the
request's key is the owner's, and adopts it: a local copy, already initialized as the
client negotiated it. So:

- requests, tool calls and their streamed answers work on whichever replica gets them;
- the standalone GET stream is served where it lands, and that replica tells the client of
  tool-list changes (every replica hears every change through PostgreSQL ``LISTEN``);
- a client's answer to a server request (elicitation) is passed, over ``NOTIFY``, to the
  replica whose call waits for it (``pml.gateway.session_wire``);
- ``DELETE`` ends the session on every replica; a session unused for the idle timeout
  (30 minutes) on every replica ends too. A replica that stops or dies costs only the
  requests it was serving: the others go on serving its sessions.

Sessions are capped per API key and per process (``pml.gateway.session_caps``); 2026-07-28
requests carry no session and are served by the SDK's stateless path as before.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
from collections.abc import AsyncGenerator, Generator
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, Unpack

import anyio
import mcp_types
from anyio.abc import TaskStatus
from mcp.server.connection import Connection
from mcp.server.runner import serve_connection
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp.shared.exceptions import MCPError
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from pml.errors import InvalidInput, LimitExceeded, PmlError
from pml.gateway.notify import ToolListNotifier
from pml.gateway.replica_link import TOUCH_INTERVAL_S, ReplicaLink
from pml.gateway.session_caps import CappedSessionManager, SessionCaps
from pml.gateway.session_http import (
    Requestor,
    body_of,
    caller_of,
    keep_alive,
    refusal,
    replaying,
    requestor_of,
    status_of,
)
from pml.gateway.session_wire import (
    Notice,
    ReplicaDispatcher,
    Reply,
    is_session_id,
    new_tag,
    owner_hash,
    reply_of,
    resume_handshake,
    session_hash,
    stream_context,
    tag_of,
)
from pml.registry.scope import Scope as CallerScope
from pml.storage.database import Database
from pml.storage.session_repo import McpSessionStore, SessionRecord

logger = logging.getLogger(__name__)

MAX_CLIENT_PARAMS: Final = 64 * 1024  # bytes of initialize params kept for other replicas
NOT_THE_OWNER: Final = "refused a request for MCP session %s…: not its owner's key"
NOT_RECORDED: Final = "The session could not be opened; retry"


@dataclass(slots=True)
class _Held:
    """A session this replica holds: its hash and, once running, its connection."""

    hash: str
    dispatcher: ReplicaDispatcher | None = None
    connection: Connection | None = None
    opened_by: tuple[str, CallerScope] | None = None  # owner hash and scope, when opened here
    adopted: SessionRecord | None = None
    streams: int = 0
    refused: bool = False  # its initialize was answered with an error: not a session
    tracked: bool = False  # told to the notifier by a request the HTTP lane answered


class SharedSessionManager(CappedSessionManager):
    """The SDK's session manager, with sessions recorded in the database (see module)."""

    def __init__(
        self,
        app: Any,
        *,
        db: Database,
        notifier: ToolListNotifier,
        security_settings: Any = None,
        touch_interval_s: float = TOUCH_INTERVAL_S,
        **caps: Unpack[SessionCaps],
    ) -> None:
        super().__init__(app, security_settings=security_settings, **caps)
        self._store = McpSessionStore(db)
        self._link = ReplicaLink(db, self._store, touch_interval_s=touch_interval_s)
        self._notifier = notifier
        self._tag = new_tag()
        self._held: dict[str, _Held] = {}
        self._by_hash: dict[str, str] = {}

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncGenerator[None]:
        """The SDK's run, plus keeping records fresh and hearing the other replicas."""
        idle_s = self.session_idle_timeout
        async with super().run(), self._link.running(self._noticed, self._streaming, idle_s=idle_s):
            yield

    async def _handle_stateful_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        session_id = Headers(scope=scope).get(MCP_SESSION_ID_HEADER)
        if session_id is None:
            await super()._handle_stateful_request(scope, receive, send)  # a new session
            return
        try:
            transport = await self._session_for(session_id, requestor_of(scope))
        except LimitExceeded as error:
            await refusal(error.message, 503)(scope, receive, send)
            return
        except PmlError as error:
            logger.warning("MCP session not checked: %s", error)
            await refusal("Sessions cannot be checked now; retry", 503)(scope, receive, send)
            return
        if transport is None:
            await refusal("Session not found", 404)(scope, receive, send)
            return
        if scope["method"] == "POST":
            body = await body_of(receive)
            reply = reply_of(body)
            tag = tag_of(reply.id) if reply is not None else None
            if reply is not None and tag is not None and tag != self._tag:
                await (await self._pass_on(session_id, tag, reply))(scope, receive, send)
                return
            receive = replaying(body, receive)
        await self._serve(session_id, transport, scope, receive, send)

    async def _serve(
        self,
        session_id: str,
        transport: StreamableHTTPServerTransport,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        held = self._held.get(session_id)
        is_stream = scope["method"] == "GET"
        if held is not None:
            self._link.used(held.hash)
            if is_stream:
                held.streams += 1
                self._track_stream(held, scope)
        try:
            await transport.handle_request(scope, receive, send)
        finally:
            if held is not None and is_stream:
                held.streams -= 1
        if transport.is_terminated:  # the client ended the session (DELETE)
            await self._discard_session(session_id, transport)
            if held is not None:
                await self._link.ended(held.hash)

    async def _session_for(
        self, session_id: str, requestor: Requestor
    ) -> StreamableHTTPServerTransport | None:
        """The session's transport here (adopted from the database if need be), or None
        when it is unknown, ended or another key's; StorageError when the check fails,
        LimitExceeded when this replica holds ``max_sessions`` already."""
        transport = self._server_instances.get(session_id)
        if transport is not None:
            if requestor != self._session_owners.get(session_id):
                logger.warning(NOT_THE_OWNER, session_id[:8])
                return None
            return transport
        if not is_session_id(session_id):
            return None
        record = await self._store.find(session_hash(session_id), idle_s=self.session_idle_timeout)
        if record is None:
            return None
        if not hmac.compare_digest(record.owner_hash, owner_hash(requestor)):
            logger.warning(NOT_THE_OWNER, session_id[:8])
            return None
        return await self._adopt(session_id, requestor, record)

    async def _adopt(
        self, session_id: str, requestor: Requestor, record: SessionRecord
    ) -> StreamableHTTPServerTransport:
        async with self._session_creation_lock:
            transport = self._server_instances.get(session_id)
            if transport is not None:
                return transport  # adopted meanwhile by a concurrent request
            if self.max_sessions is not None and len(self._server_instances) >= self.max_sessions:
                raise LimitExceeded("Too many open sessions on this replica; retry")
            transport = StreamableHTTPServerTransport(
                mcp_session_id=session_id,
                is_json_response_enabled=self.json_response,
                event_store=self.event_store,
                security_settings=self.security_settings,
                retry_interval=self.retry_interval,
                idle_timeout=self.session_idle_timeout,
            )
            self._server_instances[session_id] = transport
            if requestor is not None:
                self._session_owners[session_id] = requestor
            self._count(session_id, requestor)  # over the key's cap maybe: it exists already
            self._count_org(session_id, record.scope.org)
            self._hold(session_id, _Held(record.session_hash, adopted=record))
            assert self._task_group is not None
            try:
                await self._task_group.start(partial(self._run_session, transport))
            except BaseException:
                await self._discard_session(session_id, transport)
                raise
        logger.info("adopted MCP session %s… opened on another replica", session_id[:8])
        return transport

    async def _serve_opening_request(
        self,
        http_transport: StreamableHTTPServerTransport,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        """The SDK's opening of a session, on a dispatcher that records the handshake."""
        session_id = http_transport.mcp_session_id
        assert session_id is not None
        assert self._task_group is not None
        caller = caller_of(scope)
        held = _Held(session_hash(session_id))
        if caller is not None:
            held.opened_by = (owner_hash(requestor_of(scope)), caller)
        self._hold(session_id, held)
        established = False
        try:
            await self._task_group.start(partial(self._run_session, http_transport))
            status = await status_of(http_transport.handle_request, scope, receive, send)
            established = status is not None and status < 400 and not held.refused
        finally:
            if not established:
                await self._discard_session(session_id, http_transport)

    async def _run_session(
        self,
        transport: StreamableHTTPServerTransport,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        session_id = transport.mcp_session_id
        assert session_id is not None
        held = self._held[session_id]
        async with transport.connect() as (read_stream, write_stream):
            recorder = partial(self._record, held) if held.opened_by is not None else None
            dispatcher = ReplicaDispatcher(
                read_stream, write_stream, tag=self._tag, on_initialized=recorder
            )
            connection = Connection.for_loop(dispatcher, session_id=session_id)
            if held.adopted is not None:
                resume_handshake(connection, held.adopted)
            dispatcher.connection = held.connection = connection
            held.dispatcher = dispatcher
            task_status.started()
            try:
                idle_scope = transport.idle_scope or anyio.CancelScope()
                with idle_scope:
                    await serve_connection(
                        self.app,
                        dispatcher,
                        connection=connection,
                        lifespan_state=self._lifespan_state,
                    )
                if idle_scope.cancelled_caught:
                    logger.info("MCP session %s… idle on this replica", session_id[:8])
            except Exception:  # the session's own top level: log it, never the whole server
                logger.exception("MCP session %s… crashed", session_id[:8])
            finally:
                await self._discard_session(session_id, transport)

    async def _record(self, held: _Held, connection: Connection) -> None:
        """Record the handshake the client just made, before its result is sent."""
        params = connection.client_params
        if params is None or held.opened_by is None:
            return
        client = params.model_dump(by_alias=True, mode="json", exclude_none=True)
        held.refused = True  # until recorded
        if len(json.dumps(client)) > MAX_CLIENT_PARAMS:
            raise MCPError(
                mcp_types.INVALID_PARAMS,
                f"initialize params larger than {MAX_CLIENT_PARAMS // 1024} KiB are not accepted",
            )
        owner, caller = held.opened_by
        record = SessionRecord(held.hash, owner, caller, connection.protocol_version, client)
        try:
            await self._store.record(record)
        except PmlError as error:
            logger.warning("MCP session not recorded: %s", error)
            raise MCPError(mcp_types.INTERNAL_ERROR, NOT_RECORDED) from None
        held.refused = False

    @contextlib.contextmanager
    def lane_session(
        self, session_id: str, requestor: Requestor, caller: CallerScope
    ) -> Generator[Connection | None]:
        """The connection of a session held here, initialised and ``requestor``'s, for a
        request the HTTP lane answers itself (None: the SDK's path decides, as for a session
        held elsewhere). The session counts as used, and as a caller's, while the block runs."""
        transport = self._server_instances.get(session_id)
        held = self._held.get(session_id)
        connection = held.connection if held is not None else None
        if (
            transport is None
            or held is None
            or connection is None
            or transport.is_terminated
            or not connection.initialize_accepted
            or requestor != self._session_owners.get(session_id)
        ):
            yield None
            return
        if not held.tracked:  # what the SDK's handler does for a call (tools/list_changed)
            self._notifier.track(stream_context(connection, self._lifespan_state), caller)
            held.tracked = True
        self._link.used(held.hash)
        keep_alive(transport, self.session_idle_timeout)
        try:
            yield connection
        finally:
            keep_alive(transport, self.session_idle_timeout)

    def _hold(self, session_id: str, held: _Held) -> None:
        self._held[session_id] = held
        self._by_hash[held.hash] = session_id

    async def _discard_session(
        self, session_id: str, transport: StreamableHTTPServerTransport
    ) -> None:
        if self._server_instances.get(session_id) in (transport, None):
            held = self._held.pop(session_id, None)
            if held is not None:
                self._by_hash.pop(held.hash, None)
        await super()._discard_session(session_id, transport)

    def _track_stream(self, held: _Held, scope: Scope) -> None:
        """The replica holding a session's GET stream is the one that can notify it."""
        caller = caller_of(scope)
        if held.connection is not None and caller is not None:
            self._notifier.track(stream_context(held.connection, self._lifespan_state), caller)

    async def _pass_on(self, session_id: str, tag: int, reply: Reply) -> Response:
        """A reply for another replica's request: sent there; 202 once it is on its way."""
        held = self._held.get(session_id)
        if held is None:
            return refusal("Session not found", 404)
        try:
            await self._link.pass_on(held.hash, tag, reply)
        except InvalidInput as error:
            return refusal(error.message, 413)
        except PmlError as error:
            logger.warning("reply not passed to the waiting replica: %s", error)
            return refusal("The reply could not be passed on; retry", 503)
        return Response(status_code=202)

    async def _noticed(self, notice: Notice) -> None:
        """Another replica's notice: an answer to one of our requests, or a session's end."""
        session_id = self._by_hash.get(notice.session_hash)
        held = self._held.get(session_id) if session_id is not None else None
        if session_id is None or held is None:
            return
        if notice.kind == "closed":
            transport = self._server_instances.get(session_id)
            if transport is not None:
                await self._discard_session(session_id, transport)
            return
        if notice.tag == self._tag and notice.reply is not None and held.dispatcher is not None:
            held.dispatcher.deliver(notice.reply)

    def _streaming(self) -> set[str]:
        return {held.hash for held in self._held.values() if held.streams}
