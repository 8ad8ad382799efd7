"""The ``/mcp`` app: the HTTP lane in front of the shared session manager.

    app = mcp_app(server, db=db, notifier=notifier, tools=tools, routes=[...], limits=limits)
    app.add_middleware(ApiKeyMiddleware, ...)      # every request authenticated first

With ``tools``, plain ``tools/call`` POSTs are answered by the lane (``pml.gateway.http_lane``);
without, every request takes the SDK's path (``SharedSessionManager``). Either way a body
nested too deep is refused first (``pml.gateway.http_lane_depth``). ``limits``
(``sessions_per_key``, ``sessions_per_org``) caps the sessions of each API key and each
organisation (``pml.gateway.session_caps``).
"""

from __future__ import annotations

from typing import Any, Unpack

from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.routing import Route

from pml.gateway.http_lane import HttpCallLane, LaneEndpoint
from pml.gateway.http_lane_depth import DepthGuard
from pml.gateway.notify import ToolListNotifier
from pml.gateway.session_caps import SessionCaps
from pml.gateway.shared_sessions import SharedSessionManager
from pml.gateway.tools import GatewayTools
from pml.sections_limits import LimitsSettings
from pml.storage.database import Database

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def loopback_security(host: str) -> TransportSecuritySettings | None:
    """The SDK's DNS-rebinding protection when serving on a loopback ``host``."""
    if host not in LOOPBACK_HOSTS:
        return None
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
    )


def mcp_app(
    server: Any,
    *,
    db: Database,
    notifier: ToolListNotifier,
    tools: GatewayTools | None = None,
    host: str = "127.0.0.1",
    routes: list[Route] | None = None,
    limits: LimitsSettings | None = None,
    **caps: Unpack[SessionCaps],
) -> Starlette:
    """``server.streamable_http_app(host=..., custom_starlette_routes=...)``, its sessions
    shared through ``db`` and capped by ``limits`` (default: ``[limits]``'s defaults) or
    ``caps`` (tests: a short idle timeout, a small ``max_sessions``), with the lane for
    ``tools`` in front."""
    security = loopback_security(host)
    limits = limits or LimitsSettings()
    caps.setdefault("sessions_per_key", limits.sessions_per_key)
    caps.setdefault("sessions_per_org", limits.sessions_per_org)
    manager = SharedSessionManager(
        server, db=db, notifier=notifier, security_settings=security, **caps
    )
    endpoint: Any = StreamableHTTPASGIApp(manager)
    if tools is not None:
        lane = HttpCallLane(tools, manager, server_info=server.server_info_stamp, security=security)
        endpoint = LaneEndpoint(lane, endpoint)  # checks the depth of bodies first
    else:
        endpoint = DepthGuard(endpoint)
    return Starlette(
        routes=[Route("/mcp", endpoint=endpoint), *(routes or [])],
        lifespan=lambda _app: manager.run(),
    )
