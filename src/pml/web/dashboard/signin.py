"""Signing in to the dashboard: an ``admin`` API key, or ``pml dashboard``'s one-time URL.

    GET  /ui/login              the form (an API key; agent keys are refused)
    POST /ui/login              key=...  -> session cookie, 303 to the page asked for
    GET  /ui/signin?token=...   pml dashboard's printed URL: the token, once, for a session
    POST /ui/logout             the session ends
    GET  /                      the approvals when any is pending, else the capabilities

The login form is protected from cross-site posts by the same-origin check and a
double-submit token (a cookie and a hidden field that must match). Repeated failures from
one address are refused for a while (HTTP 429) and every failure is logged.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import time
from collections import deque
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from pml.errors import InvalidInput
from pml.registry.scope import Principal
from pml.web.dashboard.sessions import SESSION_COOKIE, SessionStore, SignInTokens
from pml.web.dashboard.ui import Ui, form_of, same_origin, waiting, with_headers
from pml.web.services import WebServices

logger = logging.getLogger(__name__)

LOGIN_CSRF_COOKIE = "pml_login_csrf"
MAX_FAILURES = 10
FAILURE_WINDOW_S = 60.0
MAX_TRACKED_ADDRESSES = 10_000
KeyCheck = Callable[[str], Awaitable[Principal | None]]


class FailedSignIns:
    """Failed sign-ins per client address in a sliding window (bounded memory)."""

    def __init__(self, limit: int = MAX_FAILURES, window_s: float = FAILURE_WINDOW_S) -> None:
        self._limit = limit
        self._window_s = window_s
        self._failures: dict[str, deque[float]] = {}

    def _recent(self, address: str) -> deque[float]:
        now = time.monotonic()
        times = self._failures.get(address, deque())
        while times and now - times[0] > self._window_s:
            times.popleft()
        return times

    def blocked(self, address: str) -> bool:
        return len(self._recent(address)) >= self._limit

    def failed(self, address: str) -> None:
        if len(self._failures) >= MAX_TRACKED_ADDRESSES and address not in self._failures:
            self._failures.clear()  # a flood of addresses: start over rather than grow
        times = self._recent(address)
        times.append(time.monotonic())
        self._failures[address] = times


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
) -> list[Route]:
    """The sign-in routes; ``authenticate`` (``ApiKeys.principal``) takes admin keys,
    ``signin`` the one-time URL of ``pml dashboard`` (either may be None)."""
    failures = FailedSignIns()

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

    async def submit_login(request: Request) -> Response:
        address = request.client.host if request.client else "?"
        if not same_origin(request):
            return ui.refusal(403, "Cross-site sign-in posts are refused.")
        if failures.blocked(address):
            response = ui.refusal(429, "Too many failed sign-ins: wait a minute and try again.")
            response.headers["Retry-After"] = str(int(FAILURE_WINDOW_S))
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
            failures.failed(address)
            logger.warning("dashboard sign-in with an invalid key from %s", address)
            return login_page(request, status=401, message="Invalid or revoked API key.")
        if not principal.is_admin:
            failures.failed(address)
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
