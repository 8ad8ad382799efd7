"""Where the gateway learns which client request its upstream calls are made for.

    remove = install(server, RelayMiddleware(requests, default_scope))

A ``ServerMiddleware`` of the SDK server: it sees every request before its handler.

- Any 2025-11-25 request: its connection is remembered (``ConnectedClients``), for
  upstream requests that no client call explains.
- ``notifications/roots/list_changed``: passed on to the running upstream sessions.
- ``tools/call``: a ``ClientCall`` becomes the ``Requester`` of every upstream call the handler
  makes (a context variable, so it reaches the tool calls of a ``pml_execute`` run): their
  progress goes to the client's token and their upstream's requests to this client.
  A 2026-07-28 call from a client that declared sampling, elicitation or roots runs parked
  (``relay_parking``) so that its upstream's requests can become ``input_required`` rounds;
  a retry whose ``requestState`` is one of those rounds' is answered from its park.

The stdio fast lane answers plain calls without the SDK server (and so without this
middleware): their upstream's requests go to the connection remembered above.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext

from pml.errors import PmlError
from pml.gateway.relay_calls import ClientCall, capabilities_of, is_modern
from pml.gateway.relay_parking import STATE_PREFIX
from pml.registry.scope import Scope
from pml.upstream.calls import requesting

if TYPE_CHECKING:
    from pml.gateway.relay_requests import RelayedRequests

logger = logging.getLogger(__name__)

ROOTS_CHANGED = "notifications/roots/list_changed"


def _scope_of(ctx: ServerRequestContext[Any, Any], default_scope: Scope) -> Scope | None:
    from pml.gateway.server import caller_scope  # the server module imports this one

    try:
        return caller_scope(ctx, default_scope)
    except PmlError:
        return None  # the handler refuses the request itself


def _may_be_asked(ctx: ServerRequestContext[Any, Any]) -> bool:
    capabilities = capabilities_of(ctx)
    return capabilities is not None and (
        capabilities.sampling is not None
        or capabilities.elicitation is not None
        or capabilities.roots is not None
    )


class RelayMiddleware:
    """See the module docstring."""

    def __init__(self, requests: RelayedRequests, default_scope: Scope) -> None:
        self._requests = requests
        self._default_scope = default_scope

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method != "tools/call":
            if ctx.method != "initialize" and not is_modern(ctx):
                self._requests.clients.saw(ctx, _scope_of(ctx, self._default_scope))
            if ctx.method == ROOTS_CHANGED:
                self._requests.roots_changed()
            return await call_next(ctx)
        scope = _scope_of(ctx, self._default_scope)
        call = ClientCall(ctx, scope)
        parking = self._requests.parking
        if not is_modern(ctx):
            self._requests.clients.saw(ctx, scope)
        elif parking is not None:
            state = (ctx.params or {}).get("requestState")
            if isinstance(state, str) and state.startswith(STATE_PREFIX):
                return await parking.resume(ctx, scope)
            if _may_be_asked(ctx):
                return await parking.start(ctx, call, call_next)
        with requesting(call):
            return await call_next(ctx)


def install(server: object, middleware: RelayMiddleware) -> Callable[[], None]:
    """Add ``middleware`` to the SDK server's list; the returned function removes it."""
    chain: list[Any] = getattr(server, "middleware")  # noqa: B009 - the SDK server's list
    chain.append(middleware)

    def remove() -> None:
        if middleware in chain:
            chain.remove(middleware)

    return remove
