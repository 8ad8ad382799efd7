"""The client requests upstream calls are made for, and the clients connected now.

    call = ClientCall(ctx, scope)                 # one client tools/call (pass-through or a run)
    with requesting(call):                        # pml.upstream.calls: every upstream call inside
        await tools.call_tool(scope, name, args)  # ... reports its progress to this client

A ``ClientCall`` is the gateway's ``Requester``: the upstream's ``notifications/progress``
reach the client's own ``progressToken`` (``ctx.session.report_progress``), and the relay
(``relay_requests``) sends the upstream's sampling/elicitation/roots requests to it. A
2026-07-28 call whose answer waits on the client is *parked* (``relay_parking``): ``ctx`` is
then the latest retry of the call, the one whose answer is still open.

Progress stays monotonic per client token: a ``pml_execute`` run that makes several upstream
calls reports each call's progress on top of where the previous calls ended, with the call's
``server:tool`` in the message.

``ConnectedClients`` remembers the 2025-11-25 connections that spoke to the gateway (weakly:
a closed connection is forgotten) for requests no client call explains: ``roots/list``
outside a call, and calls answered by the stdio fast lane.
"""

from __future__ import annotations

import itertools
import logging
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import mcp_types
from mcp.server.connection import Connection
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from pml.gateway.notify import Context
from pml.registry.scope import Scope
from pml.upstream.calls import ProgressFnT

if TYPE_CHECKING:
    from pml.gateway.relay_parking import Park

logger = logging.getLogger(__name__)

MAX_PROGRESS_MESSAGE: Final = 500
MAX_CONNECTIONS: Final = 256
_order = itertools.count()


def is_modern(ctx: Context) -> bool:
    """Whether the request is of the stateless 2026-07-28 generation."""
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def capabilities_of(ctx: Context) -> mcp_types.ClientCapabilities | None:
    """What the client of this request declared (the envelope's, in 2026-07-28)."""
    return ctx.session.client_capabilities


def client_label(ctx: Context) -> str:
    """The client's name as it introduced itself, made safe to log."""
    params = ctx.session.client_params
    name = params.client_info.name if params is not None else None
    text = "".join(ch for ch in (name or "client") if ch.isprintable())
    return text[:64] or "client"


class ClientCall:
    """One client ``tools/call`` that upstream calls are made for (a ``Requester``)."""

    def __init__(self, ctx: Context, scope: Scope | None) -> None:
        self.ctx = ctx
        self.scope = scope
        self.order = next(_order)  # later calls have higher numbers
        self.park: Park | None = None  # set while a 2026-07-28 call is parked
        self._base = 0.0  # where the previous upstream calls' progress ended
        self._last = 0.0
        self._calls = 0

    @property
    def modern(self) -> bool:
        return is_modern(self.ctx)

    @property
    def capabilities(self) -> mcp_types.ClientCapabilities | None:
        return capabilities_of(self.ctx)

    @property
    def wants_progress(self) -> bool:
        """Whether the client's (latest) request carries a ``progressToken``."""
        if progress_token_from_params(self.ctx.params) is not None:
            return True
        # An in-process 2026-07-28 client hands its callback to the SDK's direct dispatch
        # context instead of a token in _meta; the SDK has no public way to ask it.
        outbound = getattr(self.ctx.session, "_request_outbound", None)
        outbound = getattr(outbound, "_inner", outbound)  # 2026-07-28's no-requests wrapper
        return getattr(outbound, "_on_progress", None) is not None

    def progress_of(self, server: str, tool: str) -> ProgressFnT:
        """The progress callback of one upstream call of ``server:tool``."""
        self._calls += 1
        first = self._calls == 1
        self._base = self._last

        async def report(progress: float, total: float | None, message: str | None) -> None:
            value = self._base + max(float(progress), 0.0)
            if value < self._last:
                return  # never backwards on the client's token
            self._last = value
            shown = (
                total
                if first and total is not None
                else (self._base + total if total is not None else None)
            )
            if shown is not None and shown < value:
                shown = None
            text = message if first else f"{server}:{tool} {message or ''}".strip()
            if text is not None:
                text = text[:MAX_PROGRESS_MESSAGE]
            try:
                await self.ctx.session.report_progress(value, shown, text)
            except Exception as error:  # noqa: BLE001 - a gone client must not fail the call
                logger.debug("progress for %s:%s not delivered: %s", server, tool, error)

        return report


@dataclass(slots=True)
class _Seen:
    scope: Scope | None
    order: int


class ConnectedClients:
    """The 2025-11-25 connections seen, with their caller (see the module docstring)."""

    def __init__(self) -> None:
        self._seen: weakref.WeakKeyDictionary[Connection, _Seen] = weakref.WeakKeyDictionary()

    def saw(self, ctx: Context, scope: Scope | None) -> None:
        """Remember the connection of a session-era request (its latest caller)."""
        if is_modern(ctx):
            return
        # The SDK hands handlers the connection only through the session (as in notify.py).
        connection = ctx.session._connection  # pyright: ignore[reportPrivateUsage]
        if not connection.has_standalone_channel:
            return
        if len(self._seen) >= MAX_CONNECTIONS and connection not in self._seen:
            oldest = min(self._seen.items(), key=lambda item: item[1].order)[0]
            del self._seen[oldest]
        self._seen[connection] = _Seen(scope, next(_order))

    def latest(self) -> list[tuple[Connection, Scope | None]]:
        """The connections still open, the most recently active first."""
        found = sorted(self._seen.items(), key=lambda item: item[1].order, reverse=True)
        return [(connection, seen.scope) for connection, seen in found]


def request_name(params: Mapping[str, Any] | None) -> str:
    """The tool name of a raw ``tools/call`` params object ('' when there is none)."""
    name = (params or {}).get("name")
    return name if isinstance(name, str) else ""
