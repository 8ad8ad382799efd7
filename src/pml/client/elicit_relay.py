"""``pml connect`` passes the gateway's approval forms on to the agent's client.

    relay = ElicitationRelay()
    remote = RemoteGateway(url, key, elicitation=relay)     # the gateway may ask
    relay.remember(ctx)                                      # in each agent tools/call

When the shared gateway asks for a person's approval (``elicitation/create``, SPEC §10.5),
the question is for the person in front of the agent's client, not for ``pml connect``:
the form is sent on to the agent's client over its own session, and the person's answer
goes back unchanged. When the agent's client cannot show forms (it declared no
elicitation, or speaks the stateless 2026-07-28 protocol to us, where a server cannot ask
in the middle of a call), the gateway is told so with an error, and it pauses the run for
an approval out of band (``pml approvals``) — never answered by ``pml connect`` itself.
"""

from __future__ import annotations

import logging

import mcp_types
from mcp.client.session import ClientRequestContext
from mcp.server.session import ServerSession
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from pml.gateway.notify import Context

logger = logging.getLogger(__name__)

CANNOT_ASK = "The agent's client cannot show approval forms; approve out of band"


class ElicitationRelay:
    """The elicitation callback of the session to the gateway (see module)."""

    def __init__(self) -> None:
        self._session: ServerSession | None = None

    def remember(self, ctx: Context) -> None:
        """Note whether the agent's client (one per ``pml connect``) can show forms."""
        capabilities = ctx.session.client_capabilities
        can = (
            capabilities is not None
            and capabilities.elicitation is not None
            and ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS
        )
        self._session = ctx.session if can else None

    async def __call__(
        self, context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult | mcp_types.ErrorData:
        session = self._session
        if session is None or not isinstance(params, mcp_types.ElicitRequestFormParams):
            return mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message=CANNOT_ASK)
        try:
            return await session.elicit_form(
                message=params.message, requested_schema=params.requested_schema
            )
        except Exception as error:  # noqa: BLE001 - any failure: nobody answered
            logger.info("the agent's client did not answer the approval form: %s", error)
            return mcp_types.ErrorData(code=mcp_types.INTERNAL_ERROR, message=CANNOT_ASK)
