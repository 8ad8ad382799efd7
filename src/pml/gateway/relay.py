"""The gateway's ``UpstreamEvents``: where upstream notifications and requests are relayed.

One ``GatewayRelay`` is installed on the pool before it starts (so every upstream session is
opened with its callbacks). Each part of the gateway that relays something registers here:

    relay = GatewayRelay()
    pool.set_events(relay)
    relay.add_sink(resources)            # receives every upstream notification
    relay.answer_with(requests.callbacks)   # what sessions answer sampling/elicitation/roots with

A sink ignores the notification kinds it does not relay; a failing sink is logged and
never stops the others or the upstream session.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

import mcp_types

from pml.upstream.events import NO_CALLBACKS, ClientCallbacks

logger = logging.getLogger(__name__)


class NotificationSink(Protocol):
    """One relaying part of the gateway (progress, logging, resources, ...)."""

    async def notification(self, server: str, message: mcp_types.ServerNotification) -> None:
        """Relay ``message`` from upstream ``server`` if it is of a kind this sink handles."""
        ...


class GatewayRelay:
    """Fans upstream notifications out to the registered sinks (an ``UpstreamEvents``)."""

    def __init__(self) -> None:
        self._sinks: list[NotificationSink] = []
        self._callbacks: Callable[[str], ClientCallbacks] | None = None

    def add_sink(self, sink: NotificationSink) -> None:
        """Give ``sink`` every notification from now on."""
        self._sinks.append(sink)

    def answer_with(self, callbacks: Callable[[str], ClientCallbacks]) -> None:
        """Open upstream sessions with ``callbacks(server)`` from now on."""
        self._callbacks = callbacks

    async def notification(self, server: str, message: mcp_types.ServerNotification) -> None:
        """Hand ``message`` to every sink (see ``UpstreamEvents``)."""
        for sink in list(self._sinks):
            try:
                await sink.notification(server, message)
            except Exception:  # one sink's failure must not starve the others
                logger.exception("relaying %s from %r failed", type(message).__name__, server)

    def client_callbacks(self, server: str) -> ClientCallbacks:
        """The callbacks a new session to ``server`` is opened with (see ``UpstreamEvents``)."""
        return NO_CALLBACKS if self._callbacks is None else self._callbacks(server)
