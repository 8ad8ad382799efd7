"""API keys at the HTTP edge: ``Authorization: Bearer <key>`` on every request but the open
paths and the dashboard's own (which signs people in with a session cookie).

    app.add_middleware(ApiKeyMiddleware, authenticate=ApiKeys(db).principal)
    principal = principal_of(request)        # in a route: the key's Principal

A missing, malformed, wrong or revoked key gets a 401 with
``{"error": {"code": "UNAUTHORIZED", ...}}`` before anything else runs. A valid key's
``Scope`` is put on the request (``request.state.pml_scope``), its ``Principal`` (scope, role
``agent`` or ``admin``, key id) beside it (``request.state.pml_principal``); ``owner``, when
given, names the session owner for the MCP layer (``scope["user"]``).

``GET /metrics`` also takes the ``[telemetry] metrics_token`` as its bearer (compared in
constant time), marked ``request.state.pml_metrics_scraper``; the route itself refuses
other keys than admin ones (``pml.web.metrics``). Every refusal is counted
(``pml_auth_failures_total``).

With ``limits`` (``pml.limits.edge.RequestLimits``), the rate limits apply here, to every
request the key check sees (``/mcp``, the HTTP lane's calls included, and ``/api``): an
address that failed too often is answered ``429`` before its key is read; each failed key
takes a token of its address and is audited (``AUTH_FAILED``); a valid key over its rate
gets ``429`` with ``Retry-After`` and ``RATE_LIMITED`` (``pml.limits.refusal``).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Send
from starlette.types import Scope as AsgiScope

from pml.errors import Unauthorized
from pml.limits.addresses import peer_address
from pml.limits.edge import RequestLimits
from pml.limits.refusal import too_many_requests
from pml.registry.scope import Principal, Scope
from pml.telemetry.metrics import count_auth_failure

logger = logging.getLogger(__name__)

SCOPE_STATE_KEY = "pml_scope"
# The authenticated ``Principal`` (scope, key role, key id) of an HTTP request.
PRINCIPAL_STATE_KEY = "pml_principal"
# True on a ``GET /metrics`` request that carried the configured scrape token.
METRICS_SCRAPER_STATE_KEY = "pml_metrics_scraper"
METRICS_PATH = "/metrics"
# The dashboard's pages sign people in themselves (session cookie, CSRF tokens).
DASHBOARD_PREFIX = "/ui/"
DASHBOARD_ROOT = "/"

# A bare Scope (older or test authenticators) stands for an ``agent`` key of that scope.
Authenticate = Callable[[str], Awaitable[Principal | Scope | None]]

OPEN_PATHS = frozenset({"/health", "/ready"})
Owner = Callable[[str, Principal], object]
MAX_TOKEN_LENGTH = 512
MISSING_KEY = "Missing API key: send 'Authorization: Bearer <key>'"
BEARER = re.compile(r"Bearer +([A-Za-z0-9._~+/-]+=*) *", re.IGNORECASE)


class ApiKeyMiddleware:
    """ASGI middleware: a valid ``Authorization: Bearer`` key, or a 401 and nothing else."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        authenticate: Authenticate,
        open_paths: frozenset[str] = OPEN_PATHS,
        owner: Owner | None = None,
        metrics_token: str | None = None,
        limits: RequestLimits | None = None,
    ) -> None:
        self.app = app
        self.authenticate = authenticate
        self.open_paths = open_paths
        self.owner = owner
        self.metrics_token = metrics_token.encode("utf-8") if metrics_token else None
        self.limits = limits

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self.app(scope, receive, send)
            return
        if kind != "http":  # no websocket endpoint exists; refuse before routing
            await send({"type": "websocket.close", "code": 1008})
            return
        path: str = scope["path"]
        if path in self.open_paths and scope["method"] in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        if is_dashboard_path(path):  # signs in with a cookie, never with a bearer key
            await self.app(scope, receive, send)
            return
        limits = self.limits
        address = peer_address(scope) if limits is not None else ""
        if limits is not None and (refusal := limits.address_refusal(address)) is not None:
            await too_many_requests(path, refusal)(scope, receive, send)
            return
        token, problem = bearer_token(scope)
        if token is None:
            count_auth_failure("missing" if problem == MISSING_KEY else "malformed")
            if limits is not None:
                limits.key_failed(address)
            await unauthorized(problem)(scope, receive, send)
            return
        if path == METRICS_PATH and self._is_metrics_token(token):
            scope["state"] = {**(scope.get("state") or {}), METRICS_SCRAPER_STATE_KEY: True}
            await self.app(scope, receive, send)
            return
        try:
            found = await self.authenticate(token)
        except Exception:  # the key store failed: not the caller's fault, and not a pass
            logger.exception("API key check failed")
            body = {"error": {"code": "INTERNAL_ERROR", "message": "Could not check the API key"}}
            await JSONResponse(body, status_code=500)(scope, receive, send)
            return
        principal = as_principal(found)
        if principal is None:
            count_auth_failure("invalid")
            if limits is not None:
                limits.key_failed(address)
            await unauthorized("Invalid or revoked API key")(scope, receive, send)
            return
        if limits is not None and not _ends_a_session(scope):
            refusal = limits.key_refusal(principal.key_id or _digest(token))
            if refusal is not None:
                await too_many_requests(path, refusal)(scope, receive, send)
                return
        state: dict[str, Any] = dict(scope.get("state") or {})
        state[SCOPE_STATE_KEY] = principal.scope
        state[PRINCIPAL_STATE_KEY] = principal
        scope["state"] = state
        if self.owner is not None:
            scope["user"] = self.owner(token, principal)
        await self.app(scope, receive, send)

    def _is_metrics_token(self, token: str) -> bool:
        expected = self.metrics_token
        return expected is not None and hmac.compare_digest(token.encode("utf-8"), expected)


def _ends_a_session(scope: AsgiScope) -> bool:
    """``DELETE /mcp``: ending an MCP session frees what a key holds; never rate-limited."""
    return scope["method"] == "DELETE" and scope["path"] == "/mcp"


def _digest(token: str) -> str:
    """A key's limiter name when its authenticator gave no key id (never the key itself)."""
    return "sha256:" + hashlib.sha256(token.encode("utf-8")).hexdigest()


def as_principal(found: object) -> Principal | None:
    """What an authenticator returned as a ``Principal``: a bare ``Scope`` is an ``agent``;
    anything else (None, or a value of another type) is no one."""
    if isinstance(found, Principal):
        return found
    if isinstance(found, Scope):
        return Principal(found, "agent")
    return None


def bearer_token(scope: AsgiScope) -> tuple[str | None, str]:
    """The token of the request's single ``Authorization: Bearer`` header, or why there is none."""
    values = [value for key, value in scope["headers"] if key == b"authorization"]
    if not values:
        return None, MISSING_KEY
    raw = values[0]
    if len(values) > 1 or len(raw) > MAX_TOKEN_LENGTH + 16:
        return None, "Malformed Authorization header: expected 'Bearer <key>'"
    match = BEARER.fullmatch(raw.decode("latin-1"))
    if match is None or len(match.group(1)) > MAX_TOKEN_LENGTH:
        return None, "Malformed Authorization header: expected 'Bearer <key>'"
    return match.group(1), ""


def unauthorized(message: str) -> Response:
    """The 401 every refused request gets."""
    return JSONResponse(
        {"error": {"code": "UNAUTHORIZED", "message": message}},
        status_code=401,
        headers={"WWW-Authenticate": 'Bearer realm="pml"'},
    )


def is_dashboard_path(path: str) -> bool:
    """Whether the dashboard answers ``path`` (``/`` and everything under ``/ui/``)."""
    return path == DASHBOARD_ROOT or path.startswith(DASHBOARD_PREFIX)


def principal_of(request: Request) -> Principal:
    """The API key's principal the middleware put on ``request`` (UNAUTHORIZED without)."""
    principal = getattr(request.state, PRINCIPAL_STATE_KEY, None)
    if not isinstance(principal, Principal):  # the middleware puts it there; never serve without
        raise Unauthorized("Missing API key")
    return principal


def state_of(principal: Principal) -> dict[str, Any]:
    """The request-state entries for ``principal``."""
    return {SCOPE_STATE_KEY: principal.scope, PRINCIPAL_STATE_KEY: principal}
