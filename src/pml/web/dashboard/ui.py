"""What every dashboard page shares: templates, the signed-in viewer, safe form posts.

    ui = Ui(services, SessionStore(db))
    async def capabilities(request: Request, viewer: Viewer) -> Response:
        return await ui.render(request, viewer, "capabilities.html", items=...)
    routes = [Route("/ui/capabilities", ui.page(capabilities)),
              Route("/ui/capabilities/rename", ui.action(rename), methods=["POST"])]

``page`` sends a visitor without a live session to the sign-in page; ``action`` (every POST)
also refuses cross-site requests (``Origin`` / ``Sec-Fetch-Site``) and a missing or wrong
CSRF token with 403, before the handler runs. Templates autoescape everything and show
invisible or direction-changing characters as escapes; responses
carry a strict Content-Security-Policy (scripts and styles from ``/ui/static`` only).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import parse_qs, quote

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from pml.errors import InvalidInput, PmlError
from pml.policy.approval_review import revealed
from pml.web.dashboard.sessions import SESSION_COOKIE, SessionStore, Viewer
from pml.web.services import WebServices

logger = logging.getLogger(__name__)

Handler = Callable[[Request, Viewer], Awaitable[Response]]
Endpoint = Callable[[Request], Awaitable[Response]]

MAX_FORM_BYTES = 64 * 1024
LOGIN_PATH = "/ui/login"
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # same-origin: with no-referrer, Chromium sends "Origin: null" on form posts
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
ERROR_STATUS = {
    "INVALID_INPUT": 400,
    "INVALID_NAME": 400,
    "FORBIDDEN": 403,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "VERSION_NOT_FOUND": 404,
    "ALREADY_DECIDED": 409,
    "NAME_TAKEN": 409,
    "NAME_COLLISION": 409,
    "STORAGE_ERROR": 503,
}
NAVIGATION = (
    ("approvals", "Approvals", "/ui/approvals"),
    ("capabilities", "Capabilities", "/ui/capabilities"),
    ("servers", "Servers", "/ui/servers"),
    ("audit", "Audit", "/ui/audit"),
    ("usage", "Usage & grants", "/ui/usage"),
)


def _revealed(value: object) -> object:
    """Every plain string a template prints shows invisible and direction-changing
    characters as escapes (values from agents cannot hide or reorder text on a page)."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return revealed(value)
    return value


def with_headers(response: Response) -> Response:
    """``response`` with the dashboard's security headers."""
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


def same_origin(request: Request) -> bool:
    """Whether a state-changing request comes from a page of this very origin."""
    origin = request.headers.get("origin")
    site = request.headers.get("sec-fetch-site")
    if origin == "null":  # an opaque origin (privacy settings): only the fetch metadata tells
        return site == "same-origin"
    if origin is not None:
        own = f"{request.url.scheme}://{request.headers.get('host', '')}"
        return origin == own
    return site is None or site in ("same-origin", "none")


async def form_of(request: Request) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body as single values (``INVALID_INPUT``
    when it is too large, repeats a field or is not that kind of body)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    raw = bytearray()
    async for chunk in request.stream():
        raw.extend(chunk)
        if len(raw) > MAX_FORM_BYTES:
            raise InvalidInput(f"Form too large (max {MAX_FORM_BYTES} bytes)", field="body")
    if kind != "application/x-www-form-urlencoded" and (raw or kind):
        raise InvalidInput("Expected a form post", field="body")
    try:
        text = raw.decode("utf-8")
        parsed = parse_qs(
            text, keep_blank_values=True, strict_parsing=bool(text), max_num_fields=64
        )
    except (UnicodeDecodeError, ValueError):
        raise InvalidInput("Malformed form", field="body") from None
    form: dict[str, str] = {}
    for name, values in parsed.items():
        if len(values) != 1:
            raise InvalidInput(f"Give {name[:40]!r} once", field=name[:40])
        form[name] = values[0]
    return form


class Ui:
    """Templates and guards over one process's ``WebServices``."""

    def __init__(self, services: WebServices, sessions: SessionStore) -> None:
        self.services = services
        self.sessions = sessions
        self.env = Environment(
            loader=PackageLoader("pml.web", "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
            enable_async=False,
            finalize=_revealed,
        )
        self.env.globals.update(navigation=NAVIGATION)  # pyright: ignore[reportUnknownMemberType]

    async def viewer(self, request: Request) -> Viewer | None:
        """The signed-in person of ``request``, or None."""
        token = request.cookies.get(SESSION_COOKIE)
        if token is None:
            return None
        return await self.sessions.find(token)

    def page(self, handler: Handler) -> Endpoint:
        """A GET page: signed-in people only (others are sent to sign in)."""

        async def endpoint(request: Request) -> Response:
            viewer = await self.viewer(request)
            if viewer is None:
                return self._to_login(request)
            return with_headers(await self._run(request, viewer, handler))

        return endpoint

    def action(self, handler: Handler) -> Endpoint:
        """A POST: signed-in, same-origin, with the session's CSRF token (else 401/403)."""

        async def endpoint(request: Request) -> Response:
            if not same_origin(request):
                return self.refusal(403, "Cross-site form posts are refused.")
            viewer = await self.viewer(request)
            if viewer is None:
                return self.refusal(401, "Your session has ended: sign in again.")
            try:
                form = await form_of(request)
            except InvalidInput as error:
                return self.refusal(400, error.message)
            if not hmac.compare_digest(form.get("csrf", "").encode(), viewer.csrf.encode()):
                return self.refusal(403, "This form has expired (missing CSRF token): reload it.")
            request.state.pml_form = form
            return with_headers(await self._run(request, viewer, handler))

        return endpoint

    async def _run(self, request: Request, viewer: Viewer, handler: Handler) -> Response:
        try:
            return await handler(request, viewer)
        except PmlError as error:
            status = ERROR_STATUS.get(error.code, 500)
            if status == 500:
                logger.warning("dashboard %s failed: %s", request.url.path, error)
            return await self.render(
                request, viewer, "error.html", status=status, code=error.code, message=error.message
            )

    def _to_login(self, request: Request) -> Response:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        if request.headers.get("x-pml-fragment"):  # a live region polling: no redirect loop
            return self.refusal(401, "Your session has ended: sign in again.")
        return RedirectResponse(f"{LOGIN_PATH}?next={quote(target, safe='/')}", status_code=303)

    def refusal(self, status: int, message: str) -> Response:
        """A plain page for refused requests (no session needed to read it)."""
        html = self.env.get_template("refused.html").render(status=status, message=message)
        return with_headers(HTMLResponse(html, status_code=status))

    async def render(
        self,
        request: Request,
        viewer: Viewer,
        template: str,
        *,
        status: int = 200,
        **context: Any,
    ) -> HTMLResponse:
        """``template`` with the layout's context (viewer, CSRF token, pending count)."""
        scope = viewer.scope
        pending = await self.services.desk.pending(scope.org, scope.project)
        html = self.env.get_template(template).render(
            viewer=viewer,
            csrf=viewer.csrf,
            pending_count=waiting(pending),
            path=request.url.path,
            **context,
        )
        return HTMLResponse(html, status_code=status)

    def fragment(self, template: str, **context: Any) -> Response:
        """A template rendered alone (a live region's refresh), with the security headers."""
        return with_headers(HTMLResponse(self.env.get_template(template).render(**context)))


def waiting(approvals: list[dict[str, Any]]) -> int:
    """How many approvals still wait for a person (decided ones wait for their agent)."""
    return sum(1 for approval in approvals if approval.get("status") == "pending")


def form(request: Request) -> Mapping[str, str]:
    """The checked form of an ``action`` (set before the handler runs)."""
    value: dict[str, str] = request.state.pml_form
    return value


def redirect(url: str) -> Response:
    """303 to a dashboard page after a post (a reload never posts twice)."""
    return RedirectResponse(url, status_code=303)
