"""The web face's routes: the REST API under ``/api`` and the dashboard.

    routes = web_routes(services, authenticate=keys.principal)     # beside /mcp in a gateway
    routes = web_routes(services, signin=tokens)                   # pml dashboard, alone

Behind ``pml.web.auth.ApiKeyMiddleware``: ``/api`` takes bearer keys, the dashboard its own
session cookie.
"""

from __future__ import annotations

from starlette.routing import BaseRoute

from pml.web.api_approvals import approvals_routes
from pml.web.api_audit import audit_route
from pml.web.api_audit_request import audit_request_route
from pml.web.api_capabilities import capabilities_routes
from pml.web.api_lifecycle import lifecycle_routes
from pml.web.api_traces import traces_route
from pml.web.auth import SCOPE_STATE_KEY
from pml.web.dashboard import dashboard_routes
from pml.web.dashboard.sessions import SignInTokens
from pml.web.dashboard.signin import KeyCheck
from pml.web.services import WebServices


def api_routes(services: WebServices) -> list[BaseRoute]:
    """``/api/*``: audit, approvals, capabilities (and their lifecycle), traces (in a gateway)."""
    routes: list[BaseRoute] = [
        audit_route(services.db),
        audit_request_route(services.db),
        *approvals_routes(services.desk),
        *capabilities_routes(services.registry),
        *lifecycle_routes(services),
    ]
    if services.traces is not None:
        routes.append(traces_route(services.traces, SCOPE_STATE_KEY))
    return routes


def web_routes(
    services: WebServices,
    *,
    authenticate: KeyCheck | None = None,
    signin: SignInTokens | None = None,
) -> list[BaseRoute]:
    """The REST API and the dashboard."""
    return [
        *api_routes(services),
        *dashboard_routes(services, authenticate=authenticate, signin=signin),
    ]
