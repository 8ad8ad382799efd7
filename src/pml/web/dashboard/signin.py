"""Signing in to the dashboard: an ``admin`` API key, or ``pml dashboard``'s one-time URL.

    GET  /ui/login              the form (an API key; agent keys are refused)
    POST /ui/login              key=...  -> session cookie, 303 to the page asked for
    GET  /ui/signin?token=...   pml dashboard's printed URL: the token, once, for a session
    POST /ui/logout             the session ends
    GET  /                      the approvals when any is pending, else the capabilities

The login form is protected from cross-site posts by the same-origin check and a
double-submit token (a cookie and a hidden field that must match). A failed sign-in (an
unknown, revoked or agent key) is a failed API key: it takes a token of the same
per-address budget as ``/api`` and ``/mcp`` (``RequestLimits``, the address by
``peer_address``: an IPv6 client by its /64) and is audited ``AUTH_FAILED`` the same
coalesced way; an address out of tokens is refused with 429 here as there. Sharing the
limiter, rather than keeping a budget of its own, means a brute force cannot spend the
API's budget and then the dashboard's, and its bounded memory forgets the least recently
seen addresses, never a locked-out one in favour of a flood.
"""

from __future__ import annotations

import hmac
import logging
import secrets
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from pml.errors import InvalidInput
from pml.limits.addresses import peer_address
from pml.limits.edge import RequestLimits
from pml.limits.refusal import retry_after_header
from pml.registry.scope import Principal
from pml.telemetry.metrics import count_auth_failure
from pml.web.auth import ApiKeyMiddleware
from pml.web.dashboard.sessions import SESSION_COOKIE, SessionStore, SignInTokens
from pml.web.dashboard.ui import Ui, form_of, same_origin, waiting, with_headers
from pml.web.services import WebServices

logger = logging.getLogger(__name__)

LOGIN_CSRF_COOKIE = "pml_login_csrf"
KeyCheck = Callable[[str], Awaitable[Principal | None]]


class EdgeLimits:
    """The failed-key limiter of the HTTP edge, shared with the dashboard's sign-in.

    ``pml serve --http`` builds one ``RequestLimits`` for ``ApiKeyMiddleware``; the sign-in
    uses that very instance (``given``, else the one the app's middleware holds), so a
    failure here and a bad key there count against one budget. Without one (an app with no
    key middleware), a limiter of the ``[limits]`` settings is made once, with the audit.
    """

    def __init__(self, services: WebServices, given: RequestLimits | None = None) -> None:
        self._services = services
        self._limits = given

    def of(self, request: Request) -> RequestLimits:
        """The limiter for ``request``'s app (looked up once)."""
        if self._limits is None:
            services = self._services
            self._limits = _middleware_limits(request.scope.get("app")) or RequestLimits(
                services.settings.limits, auditor=services.audit, audit_scope=services.deployment
            )
        return self._limits


def _middleware_limits(app: object) -> RequestLimits | None:
    """The ``limits`` ``ApiKeyMiddleware`` was added to ``app`` with (None: not there)."""
    for middleware in getattr(app, "user_middleware", None) or ():
        if isinstance(middleware, Middleware) and middleware.cls is ApiKeyMiddleware:
            limits = middleware.kwargs.get("limits")
            if isinstance(limits, RequestLimits):
                return limits
    return None


def safe_next(value: str | None) -> str:
    """A same-site path to go to after signing in (anything else: the home page)."""
    if not value or len(value) > 2000 or not value.startswith("/") or value.startswith("//"):
        return "/"
    parts = urlsplit(value)
    if parts.scheme or parts.netloc or "\\" in value or any(ord(c) < 32 for c in value):
        return "/"
    return value


def _cookie_flags(request: Request) -> dict[str, object]:
    return {
        "httponly": True,
        "samesite": "strict",
        "secure": request.url.scheme == "https",
        "path": "/",
    }


def signin_routes(
    ui: Ui,
    services: WebServices,
    sessions: SessionStore,
    signin: SignInTokens | None,
    authenticate: KeyCheck | None,
    limits: RequestLimits | None = None,
) -> list[Route]:
    """The sign-in routes; ``authenticate`` (``ApiKeys.principal``) takes admin keys,
    ``signin`` the one-time URL of ``pml dashboard`` (either may be None); failures count
    against ``limits``, by default the HTTP edge's (``EdgeLimits``)."""
    edge = EdgeLimits(services, limits)

    def login_page(request: Request, *, status: int = 200, message: str | None = None) -> Response:
        token = request.cookies.get(LOGIN_CSRF_COOKIE) or secrets.token_urlsafe(24)
        html = ui.env.get_template("login.html").render(
            login_csrf=token,
            message=message,
            next=safe_next(request.query_params.get("next")),
            keys_enabled=authenticate is not None,
        )
        response = with_headers(HTMLResponse(html, status_code=status))
        response.set_cookie(LOGIN_CSRF_COOKIE, token, max_age=3600, **_cookie_flags(request))  # pyright: ignore[reportArgumentType]
        return response

    async def start_session(request: Request, principal: Principal, target: str) -> Response:
        token = await sessions.create(principal)
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            SESSION_COOKIE,
            token,
            max_age=int(sessions.ttl.total_seconds()),
            **_cookie_flags(request),  # pyright: ignore[reportArgumentType]
        )
        response.delete_cookie(LOGIN_CSRF_COOKIE, path="/")
        return with_headers(response)

    async def show_login(request: Request) -> Response:
        if await ui.viewer(request) is not None:
            return RedirectResponse(safe_next(request.query_params.get("next")), status_code=303)
        return login_page(request)

    def failed(request: Request, address: str, reason: str) -> None:
        count_auth_failure(reason)
        edge.of(request).key_failed(address)  # a token of the address, and AUTH_FAILED

    async def submit_login(request: Request) -> Response:
        address = peer_address(request.scope)
        if not same_origin(request):
            return ui.refusal(403, "Cross-site sign-in posts are refused.")
        refusal = edge.of(request).address_refusal(address)
        if refusal is not None:
            response = ui.refusal(
                429,
                "Too many failed sign-ins or API keys from this address: "
                f"wait {retry_after_header(refusal.retry_after_s)} s and try again.",
            )
            response.headers["Retry-After"] = retry_after_header(refusal.retry_after_s)
            return response
        try:
            fields = await form_of(request)
        except InvalidInput as error:
            return ui.refusal(400, error.message)
        cookie = request.cookies.get(LOGIN_CSRF_COOKIE, "")
        sent = fields.get("login_csrf", "")
        if not cookie or not hmac.compare_digest(cookie.encode(), sent.encode()):
            return login_page(request, status=403, message="The form expired: try again.")
        if authenticate is None:
            return login_page(request, status=400, message="Sign in with the printed URL.")
        principal = await authenticate(fields.get("key", "").strip())
        if principal is None:
            failed(request, address, "invalid")
            logger.warning("dashboard sign-in with an invalid key from %s", address)
            return login_page(request, status=401, message="Invalid or revoked API key.")
        if not principal.is_admin:
            failed(request, address, "forbidden")
            logger.warning("dashboard sign-in with an agent key (%s)", principal.key_prefix)
            return login_page(
                request,
                status=403,
                message="This is an agent key. The dashboard needs an admin key "
                "(pml keys create --org O --project P --role admin).",
            )
        services.audit.emit(
            "DASHBOARD_SIGNED_IN",
            scope=principal.scope,
            details={"key": principal.key_prefix},
            decided_by=f"user:{principal.scope.user}",
        )
        return await start_session(request, principal, safe_next(fields.get("next")))

    async def one_time(request: Request) -> Response:
        principal = signin.redeem(request.query_params.get("token")) if signin else None
        if principal is None:
            return ui.refusal(
                403, "This sign-in link was already used or is not valid: run pml dashboard again."
            )
        services.audit.emit(
            "DASHBOARD_SIGNED_IN",
            scope=principal.scope,
            details={"via": "pml dashboard"},
            decided_by=f"user:{principal.scope.user}",
        )
        return await start_session(request, principal, "/")

    async def logout(request: Request) -> Response:
        if not same_origin(request):
            return ui.refusal(403, "Cross-site form posts are refused.")
        viewer = await ui.viewer(request)
        if viewer is not None:
            try:
                fields = await form_of(request)
            except InvalidInput as error:
                return ui.refusal(400, error.message)
            if not hmac.compare_digest(fields.get("csrf", "").encode(), viewer.csrf.encode()):
                return ui.refusal(403, "This form has expired (missing CSRF token): reload it.")
            await sessions.end(viewer.token)
        response = RedirectResponse("/ui/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/")
        return with_headers(response)

    async def home(request: Request) -> Response:
        viewer = await ui.viewer(request)
        if viewer is None:
            return RedirectResponse("/ui/login", status_code=303)
        scope = viewer.scope
        pending = await services.desk.pending(scope.org, scope.project)
        return RedirectResponse("/ui/approvals" if waiting(pending) else "/ui/capabilities", 303)

    return [
        Route("/", home, methods=["GET"]),
        Route("/ui/login", show_login, methods=["GET"]),
        Route("/ui/login", submit_login, methods=["POST"]),
        Route("/ui/signin", one_time, methods=["GET"]),
        Route("/ui/logout", logout, methods=["POST"]),
    ]
