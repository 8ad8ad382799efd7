"""Upstream servers' requests to the client (sampling, elicitation, roots), relayed.

    requests = RelayedRequests.answering(relay)       # before the pool opens any session
    async with requests.serving(server, policy, settings, default_scope):
        ...                                           # clients connected: requests reach them

Every upstream session is opened declaring sampling, elicitation (form and URL) and roots,
whether or not a client is connected yet. A request from server S goes to:

- the client whose ``tools/call`` is in flight on S's session (the latest one when several
  are, among those that declared the capability); calls of *different* callers in flight on
  S at once are ambiguous and refused rather than guessed, so one tenant never sees
  another's prompt;
- with no client call in flight, a ``roots/list`` (servers ask it at start and when roots
  change), or a request during a call answered by the stdio fast lane: the most recently
  active 2025-11-25 connection, when all of them are one caller's;
- nobody otherwise: an MCP error that says why (no client connected, the client did not
  declare the capability, the policy refused it, ...).

2025-11-25 clients are sent the request in the same call (``related_request_id``, so over
HTTP it rides the call's stream); 2026-07-28 clients get it as an ``input_required`` round
of their call (``relay_parking``).

The policy of SPEC §10 applies to what is relayed: a ``[permissions] deny`` rule matching
``<server>:sampling/createMessage``, ``<server>:elicitation/create`` or ``<server>:roots/list``
(``everything:*`` included) refuses it before the client sees it; every request is audited
as ``RELAYED_REQUEST`` with server, kind, outcome and the client (never the content); a
request or answer over ``MAX_RELAYED_BYTES`` is refused; an elicitation's message names the
server that asks, so it cannot pass for PML's own approval form. A person answers within
``[permissions] approval_wait_s``.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import AsyncGenerator, Awaitable
from contextlib import asynccontextmanager
from typing import Final, Literal

import anyio
import anyio.abc
import mcp_types
from mcp.client.session import ClientRequestContext
from mcp.server.connection import Connection
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ValidationError

from pml.config import Settings
from pml.gateway.relay import GatewayRelay
from pml.gateway.relay_calls import ClientCall, ConnectedClients, client_label
from pml.gateway.relay_parking import Parking, RelayRefused
from pml.policy.model import Auditor
from pml.policy.permissions import PermissionRules
from pml.registry.scope import Scope
from pml.upstream.base import UpstreamPool
from pml.upstream.calls import requesters_on
from pml.upstream.events import ClientCallbacks

logger = logging.getLogger(__name__)

Kind = Literal["sampling/createMessage", "elicitation/create", "roots/list"]
Request = mcp_types.CreateMessageRequest | mcp_types.ElicitRequest | mcp_types.ListRootsRequest
MAX_RELAYED_BYTES: Final = 2 * 1024 * 1024
MAX_MESSAGE_CHARS: Final = 8_000
AUDIT_EVENT: Final = "RELAYED_REQUEST"
ROOTS_NOTICE_S: Final = 5.0


class Refused(Exception):
    """The request is not relayed; ``message`` goes back to the upstream server."""

    def __init__(self, message: str, outcome: str, code: int = mcp_types.INVALID_REQUEST) -> None:
        super().__init__(message)
        self.message = message
        self.outcome = outcome
        self.code = code


def _declared(capabilities: mcp_types.ClientCapabilities | None, request: Request) -> bool:
    if capabilities is None:
        return False
    if isinstance(request, mcp_types.CreateMessageRequest):
        sampling = capabilities.sampling
        if sampling is None:
            return False
        return not request.params.tools or sampling.tools is not None
    if isinstance(request, mcp_types.ListRootsRequest):
        return capabilities.roots is not None
    elicitation = capabilities.elicitation
    if elicitation is None:
        return False
    if isinstance(request.params, mcp_types.ElicitRequestURLParams):
        return elicitation.url is not None
    return elicitation.form is not None or elicitation.url is None  # {} means form mode


def _size(model: BaseModel) -> int:
    return len(model.model_dump_json(by_alias=True, exclude_none=True))


def _answer_type(request: Request) -> type[BaseModel]:
    if isinstance(request, mcp_types.CreateMessageRequest):
        if request.params.tools or request.params.tool_choice is not None:
            return mcp_types.CreateMessageResultWithTools
        return mcp_types.CreateMessageResult
    if isinstance(request, mcp_types.ElicitRequest):
        return mcp_types.ElicitResult
    return mcp_types.ListRootsResult


def shown_to_person(server: str, request: Request) -> Request:
    """``request`` as the client is sent it: an elicitation's message names the server."""
    if not isinstance(request, mcp_types.ElicitRequest):
        return request
    params = request.params
    text = f"Upstream server '{server}' asks (relayed by PML): {params.message}"
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 1] + "…"
    return mcp_types.ElicitRequest(params=params.model_copy(update={"message": text}))


class RelayedRequests:
    """The gateway's answers to upstream requests (see the module docstring)."""

    def __init__(self) -> None:
        self.clients = ConnectedClients()
        self._rules = PermissionRules()
        self._auditor: Auditor | None = None
        self._default_scope: Scope | None = None
        self._wait_s = 300.0
        self._parking: Parking | None = None
        self._tasks: anyio.abc.TaskGroup | None = None
        self._pool: UpstreamPool | None = None

    @classmethod
    def answering(cls, relay: GatewayRelay) -> RelayedRequests:
        """A relay whose callbacks every upstream session is opened with from now on."""
        requests = cls()
        relay.answer_with(requests.callbacks)
        return requests

    @property
    def parking(self) -> Parking | None:
        return self._parking

    @asynccontextmanager
    async def serving(
        self,
        server: object,
        settings: Settings,
        auditor: Auditor,
        default_scope: Scope,
        pool: UpstreamPool | None = None,
    ) -> AsyncGenerator[None]:
        """Relay to the clients of ``server`` (its middleware) until the block ends; with
        ``pool``, a client's ``notifications/roots/list_changed`` reaches its sessions."""
        from pml.gateway.relay_middleware import RelayMiddleware, install

        self._rules = PermissionRules.from_settings(settings.permissions)
        self._auditor = auditor
        self._default_scope = default_scope
        self._wait_s = settings.permissions.approval_wait_s
        self._pool = pool
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            self._parking = Parking(tasks, wait_s=self._wait_s)
            remove = install(server, RelayMiddleware(self, default_scope))
            try:
                yield
            finally:
                remove()
                self._parking = self._tasks = self._pool = None
                tasks.cancel_scope.cancel()

    def roots_changed(self) -> None:
        """A client's roots changed: tell every running upstream session (in the background;
        a server that cares asks ``roots/list`` again, relayed as above)."""
        pool, tasks = self._pool, self._tasks
        if pool is None or tasks is None:
            return
        for status in pool.status():
            if status.state == "running":
                tasks.start_soon(_tell_roots_changed, pool, status.name)

    def callbacks(self, server: str) -> ClientCallbacks:
        """What a session to ``server`` answers its requests with."""

        async def sampling(
            context: ClientRequestContext, params: mcp_types.CreateMessageRequestParams
        ) -> (
            mcp_types.CreateMessageResult
            | mcp_types.CreateMessageResultWithTools
            | mcp_types.ErrorData
        ):
            answer = await self.relay(
                server, context, mcp_types.CreateMessageRequest(params=params)
            )
            if isinstance(
                answer, mcp_types.CreateMessageResult | mcp_types.CreateMessageResultWithTools
            ):
                return answer
            return _error(answer)

        async def elicitation(
            context: ClientRequestContext, params: mcp_types.ElicitRequestParams
        ) -> mcp_types.ElicitResult | mcp_types.ErrorData:
            answer = await self.relay(server, context, mcp_types.ElicitRequest(params=params))
            return answer if isinstance(answer, mcp_types.ElicitResult) else _error(answer)

        async def list_roots(
            context: ClientRequestContext,
        ) -> mcp_types.ListRootsResult | mcp_types.ErrorData:
            answer = await self.relay(server, context, mcp_types.ListRootsRequest())
            return answer if isinstance(answer, mcp_types.ListRootsResult) else _error(answer)

        return ClientCallbacks(
            sampling=sampling,
            sampling_capabilities=mcp_types.SamplingCapability(),
            elicitation=elicitation,
            list_roots=list_roots,
        )

    async def relay(
        self, server: str, context: ClientRequestContext, request: Request
    ) -> BaseModel | mcp_types.ErrorData:
        """Send ``request`` of upstream ``server`` to its client; the answer, or an error."""
        kind: Kind = request.method  # pyright: ignore[reportAssignmentType]
        scope, client = self._default_scope, "-"
        try:
            if self._parking is None:
                raise Refused("no client is connected to the PML gateway yet", "no_client")
            self._check_policy(server, kind)
            if _size(request) > MAX_RELAYED_BYTES:
                raise Refused(f"the request exceeds {MAX_RELAYED_BYTES} bytes", "too_large")
            target = self._target(server, context, request)
            scope = target.scope if isinstance(target, ClientCall) else target[1]
            sent = shown_to_person(server, request)
            if isinstance(target, ClientCall):
                client = client_label(target.ctx)
                answer = await self._ask_call(target, kind, sent)
            else:
                answer = await self._ask_connection(target[0], sent)
            if _size(answer) > MAX_RELAYED_BYTES:
                raise Refused(f"the client's answer exceeds {MAX_RELAYED_BYTES} bytes", "too_large")
        except Refused as refused:
            self._audit(scope, server, kind, refused.outcome, client, refused.message)
            logger.info("%s from upstream server %r not relayed: %s", kind, server, refused.message)
            return mcp_types.ErrorData(code=refused.code, message=f"PML: {refused.message}")
        outcome = answer.action if isinstance(answer, mcp_types.ElicitResult) else "answered"
        self._audit(scope, server, kind, outcome, client, "")
        return answer

    # -- choosing the client ---------------------------------------------------------------

    def _check_policy(self, server: str, kind: Kind) -> None:
        configured = self._rules.decide(server, kind, "unknown")
        if configured.decision == "deny":
            raise Refused(
                f"{server}:{kind} is denied by the gateway's policy ({configured.rule})", "denied"
            )

    def _target(
        self, server: str, context: ClientRequestContext, request: Request
    ) -> ClientCall | tuple[Connection, Scope | None]:
        in_flight = requesters_on(context.session)
        calls = [item for item in in_flight if isinstance(item, ClientCall)]
        if calls:
            if len({call.scope for call in calls}) > 1:
                raise Refused(
                    f"calls of several callers are in flight on '{server}': "
                    "PML cannot tell whose call asks",
                    "ambiguous",
                )
            able = [call for call in calls if _declared(call.capabilities, request)]
            if not able:
                raise Refused(
                    f"the client calling '{server}' did not declare the "
                    f"{request.method} capability",
                    "not_declared",
                    mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY,
                )
            return max(able, key=lambda call: call.order)
        if in_flight or isinstance(request, mcp_types.ListRootsRequest):
            return self._connection_for(server, request)
        raise Refused(
            f"no client call to '{server}' is in flight to relay {request.method} to", "no_call"
        )

    def _connection_for(self, server: str, request: Request) -> tuple[Connection, Scope | None]:
        connected = self.clients.latest()
        if not connected:
            raise Refused(
                f"no client PML can send {request.method} to is connected (a 2026-07-28 "
                "client is asked within its own call, when it declared the capability)",
                "no_client",
            )
        if len({scope for _, scope in connected}) > 1:
            raise Refused(
                f"clients of several callers are connected: PML cannot tell whose '{server}' asks",
                "ambiguous",
            )
        for connection, scope in connected:
            if _declared(connection.client_capabilities, request):
                return connection, scope
        raise Refused(
            f"no connected client declared the {request.method} capability",
            "not_declared",
            mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY,
        )

    # -- asking ------------------------------------------------------------------------------

    async def _ask_call(self, call: ClientCall, kind: str, request: Request) -> BaseModel:
        answer_type = _answer_type(request)
        if call.modern:
            if call.park is None:
                raise Refused("the client's call cannot take questions", "not_declared")
            try:
                return await call.park.ask(kind, request, answer_type)
            except RelayRefused as error:
                raise Refused(str(error), "no_answer") from None
        metadata = ServerMessageMetadata(related_request_id=call.ctx.request_id)
        return await self._answered(
            call.ctx.session.send_request(request, answer_type, metadata=metadata)
        )

    async def _ask_connection(self, connection: Connection, request: Request) -> BaseModel:
        return await self._answered(
            connection.send_request(request, result_type=_answer_type(request))
        )

    async def _answered(self, sending: Awaitable[BaseModel]) -> BaseModel:
        try:
            with anyio.fail_after(self._wait_s):
                return await sending
        except TimeoutError:
            raise Refused(
                f"the client did not answer within {self._wait_s:g} s",
                "timeout",
                mcp_types.REQUEST_TIMEOUT,
            ) from None
        except MCPError as error:
            raise Refused(
                f"the client answered an error: {error.message[:300]}", "client_error", error.code
            ) from None
        except ValidationError as error:
            raise Refused(
                f"the client's answer is not valid ({error.error_count()} errors)", "invalid_answer"
            ) from None
        except Exception as error:  # noqa: BLE001 - a broken client channel: nobody answered
            raise Refused(
                f"the request could not reach the client ({type(error).__name__})", "unreachable"
            ) from None

    def _audit(
        self, scope: Scope | None, server: str, kind: str, outcome: str, client: str, why: str
    ) -> None:
        if self._auditor is None or scope is None:
            return
        details = {"server": server, "kind": kind, "outcome": outcome, "client": client}
        if why:
            details["reason"] = why[:300]
        self._auditor.emit(AUDIT_EVENT, scope=scope, details=details, actor=scope.user)


async def _tell_roots_changed(pool: UpstreamPool, server: str) -> None:
    try:
        with anyio.fail_after(ROOTS_NOTICE_S):
            async with pool.session(server) as client:
                if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                    return  # roots are gone from 2026-07-28: nothing to tell
                with warnings.catch_warnings():  # deprecated by 2026-07-28, current before
                    warnings.simplefilter("ignore", MCPDeprecationWarning)
                    await client.session.send_roots_list_changed()  # pyright: ignore[reportDeprecated]
    except Exception as error:  # noqa: BLE001 - a server that cannot hear it misses nothing else
        logger.debug("roots/list_changed not sent to %r: %s", server, error)


def _error(answer: BaseModel | mcp_types.ErrorData) -> mcp_types.ErrorData:
    if isinstance(answer, mcp_types.ErrorData):
        return answer
    return mcp_types.ErrorData(
        code=mcp_types.INTERNAL_ERROR, message="PML: the client's answer has the wrong shape"
    )
