"""The SDK's session manager with its caps answered as PML errors: per API key, per
organisation, and for all.

    manager = CappedSessionManager(server, sessions_per_key=64)   # SharedSessionManager's base

One API key holds at most ``sessions_per_key`` 2025-11-25 sessions in a process (``[limits]``;
adopted ones count too); one more session from it is answered ``429`` with ``Retry-After``
and ``RATE_LIMITED``, exactly as the key's rate limit answers (``pml.limits.refusal``), and
other keys are unaffected. All the keys of one organisation together hold at most
``sessions_per_org`` (0: no such cap), answered the same way: an organisation with many keys
cannot take the places of the others. All keys together hold at most ``max_sessions`` (the
SDK's 10 000); past it, ``503`` with ``Retry-After`` and ``BUSY`` in the same JSON-RPC shape,
instead of the SDK's bare ``-32603``. Either way nothing is opened or stored.

A session counts from its admission (under the SDK's creation lock, so concurrent openings
cannot both take the last place) until ``_discard_session``, which every end goes through:
DELETE, the idle timeout, a refused or failed opening, a crash, another replica's close.
The count is the set of the key's session ids the SDK still holds, so an end seen twice
frees one place once, and no end can leave a place taken.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import AsyncGenerator
from typing import Any, Final, TypedDict

import anyio
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import (
    DEFAULT_MAX_SESSIONS,
    DEFAULT_SESSION_IDLE_TIMEOUT,
    StreamableHTTPSessionManager,
)
from starlette.datastructures import Headers
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from pml.errors import Busy, RateLimited
from pml.gateway.session_http import Requestor, caller_of, requestor_of
from pml.gateway.session_wire import owner_hash
from pml.limits.refusal import retry_after_header, too_many_requests
from pml.sections_limits import SESSIONS_PER_KEY, SESSIONS_PER_ORG
from pml.telemetry.metrics import count_rate_limited

logger = logging.getLogger(__name__)

JSONRPC_BUSY: Final = -32053  # PML's JSON-RPC code for a 503 BUSY (as -32029 for a 429)
FULL_RETRY_S: Final = 60.0  # when all keys together hold max_sessions: try again then
SESSIONS_LIMIT: Final = "sessions_per_key"
ORG_SESSIONS_LIMIT: Final = "sessions_per_org"


class SessionCaps(TypedDict, total=False):
    """The caps a ``CappedSessionManager`` takes (each has a default)."""

    sessions_per_key: int
    sessions_per_org: int
    session_idle_timeout: float | None
    max_sessions: int | None


class CappedSessionManager(StreamableHTTPSessionManager):
    """The SDK's stateful session manager with per-key and global caps (see the module)."""

    def __init__(
        self,
        app: Any,
        *,
        security_settings: Any = None,
        sessions_per_key: int = SESSIONS_PER_KEY,
        sessions_per_org: int = SESSIONS_PER_ORG,
        session_idle_timeout: float | None = DEFAULT_SESSION_IDLE_TIMEOUT,
        max_sessions: int | None = DEFAULT_MAX_SESSIONS,
    ) -> None:
        if isinstance(sessions_per_key, bool) or sessions_per_key < 1:
            raise ValueError(f"sessions_per_key must be at least 1, not {sessions_per_key!r}")
        if isinstance(sessions_per_org, bool) or sessions_per_org < 0:
            raise ValueError(f"sessions_per_org must be 0 or more, not {sessions_per_org!r}")
        super().__init__(
            app,
            security_settings=security_settings,
            session_idle_timeout=session_idle_timeout,
            max_sessions=max_sessions,
        )
        self.sessions_per_key = sessions_per_key
        self.sessions_per_org = sessions_per_org
        self._key_of: dict[str, str] = {}  # session id → its owner's digest
        self._of_key: dict[str, set[str]] = {}  # owner's digest → its session ids held here
        self._org_of: dict[str, str] = {}  # session id → its organisation
        self._of_org: dict[str, set[str]] = {}  # organisation → its session ids held here

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncGenerator[None]:
        """The SDK's run; its sessions all end with it, and so do their counts."""
        try:
            async with super().run():
                yield
        finally:
            self._key_of.clear()
            self._of_key.clear()
            self._org_of.clear()
            self._of_org.clear()

    def open_sessions(self, requestor: Requestor) -> int:
        """How many sessions of ``requestor``'s key this process holds."""
        return len(self._held_by(requestor))

    def _held_by(self, requestor: Requestor) -> set[str]:
        if requestor is None:  # no key (no authentication): no key's cap
            return set()
        return self._of_key.get(owner_hash(requestor), set())

    async def _handle_stateful_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        if Headers(scope=scope).get(MCP_SESSION_ID_HEADER) is not None:
            await super()._handle_stateful_request(scope, receive, send)
            return
        requestor = requestor_of(scope)  # a new session: admitted, or refused with a reason
        caller = caller_of(scope)
        org = caller.org if caller is not None else None
        async with self._session_creation_lock:
            refused = self._over_cap(requestor, org)
            transport = self._admit_session(requestor) if refused is None else None
            if transport is not None and transport.mcp_session_id is not None:
                self._count_org(transport.mcp_session_id, org)
        if isinstance(refused, RateLimited):
            count_rate_limited(str(refused.data.get("limit", SESSIONS_LIMIT)))
            await too_many_requests(scope["path"], refused)(scope, receive, send)
        elif refused is not None or transport is None:
            logger.warning("refused a new MCP session: %s sessions are open", self.max_sessions)
            await _busy(refused or self._full())(scope, receive, send)
        else:
            await self._serve_opening_request(transport, scope, receive, send)

    def _over_cap(self, requestor: Requestor, org: str | None = None) -> RateLimited | Busy | None:
        """Why one more session for ``requestor`` (of ``org``) would be one too many, if it
        would."""
        if self.max_sessions is not None and len(self._server_instances) >= self.max_sessions:
            return self._full()
        held = self._held_by(requestor)
        if len(held) >= self.sessions_per_key:
            return self._too_many(held, "This API key", "one key", SESSIONS_LIMIT)
        of_org: set[str] = self._of_org.get(org, set()) if org is not None else set()
        if self.sessions_per_org and len(of_org) >= self.sessions_per_org:
            return self._too_many(
                of_org, "This organisation", "the keys of one organisation", ORG_SESSIONS_LIMIT
            )
        return None

    def _too_many(self, held: set[str], who: str, whom: str, limit: str) -> RateLimited:
        timeout = self.session_idle_timeout
        idle = f" (after {timeout:g} s unused)" if timeout is not None else ""
        return RateLimited(
            f"{who} has too many open MCP sessions: {len(held)}, the most {whom} may "
            f"hold ([limits] {limit}). Close the sessions it no longer uses (DELETE "
            f"/mcp with their Mcp-Session-Id header) or wait for idle ones to expire{idle}",
            retry_after_s=self._first_expiry_s(held),
            limit=limit,
            openSessions=len(held),
        )

    def _full(self) -> Busy:
        return Busy(
            f"This server holds {self.max_sessions} MCP sessions, the most it may for all API "
            f"keys together: retry in {FULL_RETRY_S:g} s, as sessions end or expire",
            retry_after_s=FULL_RETRY_S,
            limit="max_sessions",
        )

    def _first_expiry_s(self, session_ids: set[str]) -> float:
        """Seconds until the first of ``session_ids`` expires if left unused (a session with
        a request in flight does not; when all have one: a full idle timeout)."""
        timeout = self.session_idle_timeout or FULL_RETRY_S
        now = anyio.current_time()
        deadlines = [
            transport.idle_scope.deadline
            for session_id in session_ids
            if (transport := self._server_instances.get(session_id)) is not None
            and transport.idle_scope is not None
            and math.isfinite(transport.idle_scope.deadline)
        ]
        return min(max(min(deadlines, default=now + timeout) - now, 1.0), timeout)

    def _admit_session(self, requestor: Requestor) -> StreamableHTTPServerTransport | None:
        transport = super()._admit_session(requestor)
        if transport is not None and transport.mcp_session_id is not None:
            self._count(transport.mcp_session_id, requestor)
        return transport

    def _count(self, session_id: str, requestor: Requestor) -> None:
        """``session_id`` takes a place of its key's until ``_discard_session``."""
        if requestor is None:
            return
        owner = owner_hash(requestor)
        self._key_of[session_id] = owner
        self._of_key.setdefault(owner, set()).add(session_id)

    def _count_org(self, session_id: str, org: str | None) -> None:
        """``session_id`` takes a place of ``org``'s until ``_discard_session``."""
        if org is not None:
            self._org_of[session_id] = org
            self._of_org.setdefault(org, set()).add(session_id)

    async def _discard_session(
        self, session_id: str, transport: StreamableHTTPServerTransport
    ) -> None:
        # The SDK forgets the id whichever transport it had: so does the count, before any
        # await, so that the place is free from the moment the session is.
        owner = self._key_of.pop(session_id, None)
        held = self._of_key.get(owner) if owner is not None else None
        if owner is not None and held is not None:
            held.discard(session_id)
            if not held:
                del self._of_key[owner]
        org = self._org_of.pop(session_id, None)
        of_org = self._of_org.get(org) if org is not None else None
        if org is not None and of_org is not None:
            of_org.discard(session_id)
            if not of_org:
                del self._of_org[org]
        await super()._discard_session(session_id, transport)


def _busy(error: Busy) -> Response:
    """503 with ``Retry-After``: ``error`` in the shape of a rate limit's 429."""
    body = {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": JSONRPC_BUSY, "message": error.message, "data": error.to_dict()},
    }
    headers = {"Retry-After": retry_after_header(error.retry_after_s)}
    return JSONResponse(body, status_code=503, headers=headers)
