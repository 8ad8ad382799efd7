"""The gateway over streamable HTTP: ``/mcp`` (both protocol generations), ``GET /health``
(alive), ``GET /ready`` (may serve: ``readiness``), ``GET /metrics`` (Prometheus:
``pml.web.metrics``), and the web face beside it (``pml.web``): the REST API under ``/api``
and the dashboard under ``/`` and ``/ui/``. With ``[log] access = true`` each request is
logged (``pml.telemetry.logs``).

    async with open_gateway(settings) as gateway:
        app = create_app(gateway)            # Starlette; API keys checked on every request
        ...
    await serve_http(settings, "127.0.0.1", 8765)   # the same, under uvicorn, until Ctrl-C

Every request except ``GET /health``, ``GET /ready`` and the dashboard's pages (which sign
people in with a session cookie) needs ``Authorization: Bearer <api key>``
(``pml.web.auth``). The key's digest becomes the MCP session owner, so a session opened
with one key cannot be used with another. ``[limits]`` rate limits apply there too
(``pml.limits.edge``: per key, and per source address for failed keys; 429 with
``Retry-After``). The source address is the socket peer; uvicorn reads ``X-Forwarded-For``
only from the proxies ``[limits] trusted_proxies`` names (none by default).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import signal
import socket
import threading
from collections.abc import AsyncGenerator, Callable, Generator
from contextlib import asynccontextmanager

import anyio
import uvicorn
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from pml import __version__
from pml.config import Settings
from pml.gateway.control import answering_status
from pml.gateway.http_edge import bounded_http_protocol
from pml.gateway.http_lane_app import mcp_app
from pml.gateway.notify import ToolListNotifier
from pml.gateway.readiness import readiness
from pml.gateway.reload import ReloadSource, reloading
from pml.gateway.server import Gateway, open_gateway
from pml.limits.edge import RequestLimits
from pml.registry.scope import Principal
from pml.sections_limits import LimitsSettings
from pml.storage.catalog_repo import CatalogStore
from pml.telemetry import tracing
from pml.telemetry.logs import AccessLogMiddleware, AsgiScope
from pml.telemetry.metrics import process_metrics
from pml.upstream.base import ServerStatus, UpstreamPool
from pml.web.app import web_routes
from pml.web.auth import (
    METRICS_SCRAPER_STATE_KEY,
    PRINCIPAL_STATE_KEY,
    ApiKeyMiddleware,
    Authenticate,
    as_principal,
)
from pml.web.dashboard.signin import KeyCheck
from pml.web.metrics import MetricsSources, metrics_route
from pml.web.services import WebServices

logger = logging.getLogger(__name__)

GRACEFUL_SHUTDOWN_S = 5
START_TIMEOUT_S = 10.0


def _session_owner(token: str, principal: Principal) -> AuthenticatedUser:
    # The SDK binds an MCP session to the principal that opened it; the key digest is it.
    digest = hashlib.sha256(token.encode("utf-8")).hexdigest()
    return AuthenticatedUser(
        AccessToken(
            token=digest,
            client_id=digest,
            scopes=[],
            subject=f"{principal.scope.key}:{principal.scope.user}",
        )
    )


class PoolStates:
    """The running pool's server states, for the web face."""

    def __init__(self, pool: UpstreamPool) -> None:
        self._pool = pool

    async def states(self) -> list[ServerStatus]:
        return list(self._pool.status())


def web_services_of(gateway: Gateway) -> WebServices:
    """The gateway's own services, for the REST API and the dashboard."""
    policy = gateway.policy
    return WebServices(
        settings=gateway.settings,
        db=gateway.db,
        registry=gateway.registry,
        desk=policy.approvals.desk,
        grants=policy.grants,
        audit=policy.audit,
        catalog=CatalogStore(gateway.db),
        servers=PoolStates(gateway.pool),
        deployment=gateway.default_scope,
        discovery=gateway.discovery,
        traces=gateway.traces,
    )


def as_key_check(authenticate: Authenticate) -> KeyCheck:
    """``authenticate`` answering a ``Principal`` (a bare scope is an agent)."""

    async def check(token: str) -> Principal | None:
        return as_principal(await authenticate(token))

    return check


def create_app(
    gateway: Gateway,
    *,
    authenticate: Authenticate | None = None,
    host: str = "127.0.0.1",
    fast_lane: bool = True,
    limits: LimitsSettings | None = None,
) -> Starlette:
    """The HTTP app: ``/mcp``, ``/health``, ``/ready``, ``/metrics``, the REST API and the
    dashboard, behind API keys (``ApiKeys``) and their rate limits (``limits``, default
    the gateway's ``[limits]``); ``fast_lane=False`` sends every MCP request the SDK's way
    (``pml.gateway.http_lane``)."""
    if authenticate is None:
        from pml.gateway.keys import ApiKeys

        keys = ApiKeys(gateway.db)
        authenticate = keys.principal

    async def health(_request: Request) -> Response:
        # Open to anyone: alive and which version, nothing of the configuration.
        return JSONResponse({"status": "ok", "version": __version__})

    async def ready(_request: Request) -> Response:
        ok, checks = await readiness(gateway.db, gateway.pool)
        status = "ready" if ok else "not ready"
        return JSONResponse({"status": status, "checks": checks}, status_code=200 if ok else 503)

    scraped = MetricsSources(gateway.pool.status, gateway.db)
    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/ready", ready, methods=["GET"]),
        metrics_route(process_metrics(), scraped),
    ]
    app = mcp_app(
        gateway.server,
        db=gateway.db,
        notifier=gateway.server.notifier,
        # The HTTP lane answers plain tool calls; with traces exported, the SDK's server
        # spans (and _meta trace context) are wanted, so every call takes the SDK's path.
        tools=gateway.tools if fast_lane and not tracing.active() else None,
        host=host,
        routes=routes,
        limits=limits if limits is not None else gateway.settings.limits,
    )
    services = web_services_of(gateway)
    app.router.routes.extend(web_routes(services, authenticate=as_key_check(authenticate)))
    app.add_middleware(
        ApiKeyMiddleware,
        authenticate=authenticate,
        owner=_session_owner,
        metrics_token=gateway.settings.telemetry.metrics_token,
        limits=RequestLimits(
            limits if limits is not None else gateway.settings.limits,
            auditor=gateway.policy.audit,
            # An unknown key belongs to no one: its AUTH_FAILED goes to the deployment's scope.
            audit_scope=gateway.default_scope,
        ),
    )
    app.add_middleware(AccessLogMiddleware, caller=_access_caller)  # outside: sees refusals
    if tracing.active():  # a client's traceparent header parents the request's spans
        from pml.telemetry.propagation import TraceContextMiddleware

        app.add_middleware(TraceContextMiddleware)
    return app


def _access_caller(scope: AsgiScope) -> tuple[str, str]:
    """(key display prefix, user) of a request the key middleware has seen."""
    state: dict[str, object] = scope.get("state") or {}
    principal = state.get(PRINCIPAL_STATE_KEY)
    if isinstance(principal, Principal):
        return principal.key_prefix or "", principal.scope.user
    return ("metrics_token", "") if state.get(METRICS_SCRAPER_STATE_KEY) else ("", "")


class _Uvicorn(uvicorn.Server):
    """uvicorn, without re-raising the stop signal after its graceful shutdown.

    uvicorn re-raises SIGTERM/SIGINT once it has stopped; under SIGTERM's default action that
    would kill the process before the gateway stops its upstream children. ``ready`` is set
    once requests are served, ``stopped`` once it has shut down (or failed to start).
    ``stopping()`` is called when the shutdown begins, before uvicorn waits for the open
    connections (long-lived streams must end there, or the whole grace period is waited).
    """

    def __init__(self, config: uvicorn.Config, stopping: Callable[[], None]) -> None:
        super().__init__(config)
        self.ready = anyio.Event()
        self.stopped = anyio.Event()
        self._stopping = stopping

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self.ready.set()

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().serve(sockets=sockets)
        finally:
            self.stopped.set()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._stopping()
        await super().shutdown(sockets=sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def listen_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (``port=0``: a free one); OSError if it cannot."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets whose proto says TCP,
    # and without it every small response waits ~40 ms for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def base_url(sock: socket.socket) -> str:
    """``http://host:port`` of a bound socket (a wildcard address shown as loopback)."""
    host, port = sock.getsockname()[:2]
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1" if host == "0.0.0.0" else "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


@asynccontextmanager
async def _serving(
    app: Starlette,
    sock: socket.socket,
    notifier: ToolListNotifier,
    trusted_proxies: list[str] | None = None,
) -> AsyncGenerator[_Uvicorn]:
    """uvicorn on ``sock`` in the background; asks it to stop when the block ends. Clients'
    listen streams are ended when it stops (``notifier.end_streams``). ``X-Forwarded-For``
    and ``X-Forwarded-Proto`` are read only from ``trusted_proxies`` (uvicorn would trust
    loopback peers by default, letting any local client choose its address)."""
    config = uvicorn.Config(
        app,
        log_config=None,  # uvicorn's own lines go through the process's logging ([log])
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        server_header=False,
        proxy_headers=bool(trusted_proxies),
        forwarded_allow_ips=list(trusted_proxies or ()),
        http=bounded_http_protocol(trusted_proxies or ()),  # head size and time, per address
    )
    server = _Uvicorn(config, stopping=notifier.end_streams)
    notifier.resume_streams()
    async with anyio.create_task_group() as group:
        group.start_soon(server.serve, [sock])
        with anyio.fail_after(START_TIMEOUT_S):
            await server.ready.wait()
        try:
            yield server
        finally:
            server.should_exit = True


@asynccontextmanager
async def running_http(
    gateway: Gateway,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    authenticate: Authenticate | None = None,
    fast_lane: bool = True,
    limits: LimitsSettings | None = None,
) -> AsyncGenerator[str]:
    """Serve ``gateway`` in the background; yields the base URL (``port=0``: a free port).
    ``limits`` replaces the gateway's ``[limits]`` for this app (tests)."""
    limits = limits if limits is not None else gateway.settings.limits
    with contextlib.closing(listen_socket(host, port)) as sock:
        app = create_app(
            gateway, authenticate=authenticate, host=host, fast_lane=fast_lane, limits=limits
        )
        async with _serving(app, sock, gateway.server.notifier, limits.trusted_proxies):
            yield base_url(sock)


async def serve_http(
    settings: Settings,
    host: str,
    port: int,
    *,
    pool: UpstreamPool | None = None,
    authenticate: Authenticate | None = None,
    ready: Callable[[str], None] | None = None,
    llm_api_key: str | None = None,
    reload: ReloadSource | None = None,
) -> None:
    """Serve the gateway over HTTP until SIGINT/SIGTERM, then stop the pool and the database;
    with ``reload``, its requests (SIGHUP) reload the config meanwhile.

    The port is bound before anything starts, so a busy port fails fast with ``OSError``;
    ``ready(base_url)`` is called once requests are served.
    """
    announce = reload.announce if reload is not None else contextlib.nullcontext
    with contextlib.closing(listen_socket(host, port)) as sock, announce() as announcement:
        async with (
            open_gateway(settings, pool=pool, llm_api_key=llm_api_key) as gateway,
            reloading(gateway, reload),
            answering_status(announcement, gateway),  # pml status asks it (control.py)
        ):
            app = create_app(gateway, authenticate=authenticate, host=host)
            proxies = settings.limits.trusted_proxies
            async with _serving(app, sock, gateway.server.notifier, proxies) as server:
                if ready is not None:
                    ready(base_url(sock))
                await server.stopped.wait()  # uvicorn stops on SIGINT/SIGTERM
