"""What upstream servers send besides results, and who hears it.

An upstream session carries more than tool results: notifications (progress, log messages,
resource updates, prompt/resource list changes) and server-to-client requests (sampling,
elicitation, roots). The pool handles ``tools/list_changed`` itself and hands the rest of
every session to one ``UpstreamEvents``, which the gateway installs to relay them to its
connected clients:

    pool.set_events(relay)                 # before or after start(); new sessions use it
    # each session then calls relay.notification("everything", message) and is opened
    # with relay.client_callbacks("everything") (what it answers sampling/elicitation/roots with)

Without one, notifications are dropped (logged at debug) and the session declares no
sampling, elicitation or roots capability to the upstream server.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

import mcp_types
from mcp.client.session import ElicitationFnT, ListRootsFnT, LoggingFnT, SamplingFnT

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ClientCallbacks:
    """The callbacks one upstream session is opened with (``None``: not offered)."""

    sampling: SamplingFnT | None = None
    sampling_capabilities: mcp_types.SamplingCapability | None = None
    elicitation: ElicitationFnT | None = None
    list_roots: ListRootsFnT | None = None
    logging: LoggingFnT | None = None


NO_CALLBACKS = ClientCallbacks()


class UpstreamEvents(Protocol):
    """The gateway's side of what upstream sessions send unasked."""

    async def notification(self, server: str, message: mcp_types.ServerNotification) -> None:
        """A notification from ``server`` (never ``tools/list_changed``: the pool's own)."""
        ...

    def client_callbacks(self, server: str) -> ClientCallbacks:
        """The callbacks a new session to ``server`` is opened with."""
        ...


class EventsSlot:
    """The pool's holder of its ``UpstreamEvents`` (none until the gateway installs one)."""

    def __init__(self) -> None:
        self.target: UpstreamEvents | None = None

    async def notification(self, server: str, message: mcp_types.ServerNotification) -> None:
        """Hand ``message`` on; a relay's failure never takes the session down."""
        if self.target is None:
            logger.debug("upstream server %r: %s dropped", server, type(message).__name__)
            return
        try:
            await self.target.notification(server, message)
        except Exception:
            logger.exception("relaying a notification of upstream server %r failed", server)

    def client_callbacks(self, server: str) -> ClientCallbacks:
        """The installed relay's callbacks for ``server``, or none."""
        return NO_CALLBACKS if self.target is None else self.target.client_callbacks(server)
