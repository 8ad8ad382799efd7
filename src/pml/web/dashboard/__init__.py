"""The dashboard (SPEC §12): server-rendered pages over the same services as the REST API.

    routes = dashboard_routes(services, authenticate=ApiKeys(db).principal)   # pml serve --http
    routes = dashboard_routes(services, signin=SignInTokens(principal))       # pml dashboard

Pages live under ``/ui/`` (``/`` sends a signed-in person to the approvals or the
capabilities); static assets ship inside the package under ``/ui/static`` and nothing is
fetched from anywhere else. Each page module exposes ``routes(ui) -> list[Route]``.
"""

from __future__ import annotations

from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles

from pml.limits.edge import RequestLimits
from pml.web.dashboard import approvals, audit, capabilities, servers, usage
from pml.web.dashboard.sessions import SessionStore, SignInTokens
from pml.web.dashboard.signin import KeyCheck, signin_routes
from pml.web.dashboard.ui import Ui
from pml.web.services import WebServices

PAGES = (approvals, capabilities, servers, audit, usage)


def dashboard_routes(
    services: WebServices,
    *,
    authenticate: KeyCheck | None = None,
    signin: SignInTokens | None = None,
    limits: RequestLimits | None = None,
) -> list[BaseRoute]:
    """Every dashboard route: sign-in, the pages, the static assets. Failed sign-ins count
    against ``limits``, by default the limiter of the app's ``ApiKeyMiddleware``."""
    sessions = SessionStore(services.db)
    ui = Ui(services, sessions)
    signing_in = signin_routes(ui, services, sessions, signin, authenticate, limits)
    routes: list[BaseRoute] = [*signing_in]
    for page in PAGES:
        routes.extend(page.routes(ui))
    routes.append(
        Mount("/ui/static", app=StaticFiles(packages=[("pml.web", "static")]), name="static")
    )
    return routes
