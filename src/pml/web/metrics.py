"""``GET /metrics``: the gateway's Prometheus metrics, for an admin key or the scrape token.

    sources = MetricsSources(gateway.pool.status, gateway.db)
    route = metrics_route(process_metrics(), sources)                  # in create_app
    # curl -H "Authorization: Bearer $TOKEN" http://127.0.0.1:8765/metrics

What steps did is counted as they end (``pml.telemetry.metrics``); what things are now is
read at scrape time: upstream server states and restarts, approvals pending (a database
count, kept ``APPROVALS_TTL_S`` so that scrapes cannot hammer the database) and the
database pool. ``pml.web.auth`` lets the request through with a key checked or the
``[telemetry] metrics_token``; here an ``agent`` key gets 403 ``FORBIDDEN``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast, get_args

import anyio
import sqlalchemy as sa
from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from pml import __version__
from pml.errors import Forbidden, StorageError
from pml.execution.approval_desk import APPROVAL_KIND
from pml.registry.scope import Principal
from pml.storage.database import Database
from pml.storage.tables import workflow_state
from pml.storage.types import utc_now
from pml.telemetry.metrics import MAX_LABEL_SETS, StepMetrics, count_auth_failure, label_value
from pml.upstream.base import ServerState, ServerStatus
from pml.web.auth import METRICS_PATH, METRICS_SCRAPER_STATE_KEY, PRINCIPAL_STATE_KEY

logger = logging.getLogger(__name__)

APPROVALS_TTL_S = 5.0
MAX_ACCEPT_CHARS = 1000
OPENMETRICS = "application/openmetrics-text"
SERVER_STATES: tuple[ServerState, ...] = get_args(ServerState)


@dataclass(frozen=True, slots=True)
class MetricsSources:
    """What ``/metrics`` reads at scrape time besides the step counters."""

    status: Callable[[], list[ServerStatus]]
    db: Database


class PendingApprovals:
    """The count of approvals waiting for a person, read at most once per ``ttl_s``."""

    def __init__(
        self,
        db: Database,
        *,
        ttl_s: float = APPROVALS_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._db = db
        self._ttl_s = ttl_s
        self._clock = clock
        self._value: int | None = None
        self._read_at = -float("inf")
        self._lock = anyio.Lock()
        self.reads = 0  # database round trips made (the cache's whole point)

    @property
    def value(self) -> int | None:
        """The last count read (None before the first, or after a failed first read)."""
        return self._value

    async def refresh(self) -> int | None:
        """The count, from the database only when the last read is older than the TTL."""
        async with self._lock:  # concurrent scrapes share one read
            if self._clock() - self._read_at < self._ttl_s:
                return self._value
            try:
                self._value = await self._count()
            except StorageError as error:
                logger.warning("approvals pending not counted: %s", error.message)
            self._read_at = self._clock()  # a failing database is not asked on every scrape
            return self._value

    async def _count(self) -> int:
        self.reads += 1
        c = workflow_state.c
        statement = (
            sa.select(sa.func.count())
            .select_from(workflow_state)
            .where(c.kind == APPROVAL_KIND, c.decision.is_(None), c.expires_at > utc_now())
        )
        async with self._db.read() as conn:
            return int((await conn.execute(statement)).scalar_one())


class GatewayCollector(Collector):
    """The scrape-time figures of one gateway (see module)."""

    def __init__(self, sources: MetricsSources, approvals: PendingApprovals) -> None:
        self._sources = sources
        self._approvals = approvals

    def collect(self) -> Iterator[Metric]:
        """Server states and sessions, approvals pending, the database pool, the version."""
        info = GaugeMetricFamily("pml_info", "The running PML", labels=["version"])
        info.add_metric([__version__], 1)
        yield info
        yield from self._servers(self._sources.status()[:MAX_LABEL_SETS])
        pending = self._approvals.value
        if pending is not None:
            yield GaugeMetricFamily(
                "pml_approvals_pending", "Approvals waiting for a person", value=pending
            )
        yield from _pool_metrics(self._sources.db)

    def _servers(self, servers: list[ServerStatus]) -> Iterator[Metric]:
        state = GaugeMetricFamily(
            "pml_upstream_server_state",
            "1 for the state each upstream server is in, 0 for the others",
            labels=["server", "state"],
        )
        tools = GaugeMetricFamily(
            "pml_upstream_tools", "Tools each upstream server lists", labels=["server"]
        )
        opened = CounterMetricFamily(
            "pml_upstream_sessions_opened",
            "Sessions opened to each upstream server (starts and restarts)",
            labels=["server"],
        )
        restarts = CounterMetricFamily(
            "pml_upstream_restarts",
            "Sessions opened to each upstream server after its first",
            labels=["server"],
        )
        for server in servers:
            name = label_value(server.name)
            for each in SERVER_STATES:
                state.add_metric([name, each], 1 if server.state == each else 0)
            tools.add_metric([name], server.tool_count)
            sessions = server.extra.get("sessions_opened")
            if isinstance(sessions, int):
                opened.add_metric([name], sessions)
                restarts.add_metric([name], max(0, sessions - 1))
        yield from (state, tools, opened, restarts)


def _pool_metrics(db: Database) -> Iterator[Metric]:
    """The SQLAlchemy pool's use, when the pool counts it (a queue pool: both backends)."""
    pool: Any = db.engine.pool
    if not all(hasattr(pool, name) for name in ("size", "checkedout", "checkedin", "overflow")):
        return
    size = GaugeMetricFamily(
        "pml_db_pool_size", "Connections the database pool keeps", labels=["backend"]
    )
    used = GaugeMetricFamily(
        "pml_db_pool_connections",
        "Database pool connections by state",
        labels=["backend", "state"],
    )
    backend = db.dialect
    size.add_metric([backend], int(pool.size()))
    used.add_metric([backend, "checked_out"], int(pool.checkedout()))
    used.add_metric([backend, "idle"], int(pool.checkedin()))
    used.add_metric([backend, "overflow"], max(0, int(pool.overflow())))
    yield size
    yield used


class _StepCollector(Collector):
    """The process's step counters, shown in a gateway's own registry."""

    def __init__(self, metrics: StepMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return iter(self._metrics.registry.collect())


def scrape_registry(
    metrics: StepMetrics, sources: MetricsSources
) -> tuple[CollectorRegistry, PendingApprovals]:
    """A registry with ``metrics``, the gateway's scrape-time figures and the process's
    own (CPU, memory, open files)."""
    registry = CollectorRegistry(auto_describe=False)
    approvals = PendingApprovals(sources.db)
    registry.register(_StepCollector(metrics))
    registry.register(GatewayCollector(sources, approvals))
    ProcessCollector(registry=registry)
    return registry, approvals


def metrics_route(metrics: StepMetrics, sources: MetricsSources) -> Route:
    """``GET /metrics`` for ``sources``' gateway (the scrape token or an admin key)."""
    registry, approvals = scrape_registry(metrics, sources)

    async def scrape(request: Request) -> Response:
        refusal = _refusal(request)
        if refusal is not None:
            return refusal
        await approvals.refresh()
        encoder, content_type = _encoder(request.headers.get("accept", ""))
        return Response(encoder(registry), media_type=content_type)

    return Route(METRICS_PATH, scrape, methods=["GET"])


def _encoder(accept: str) -> tuple[Callable[[Collector], bytes], str]:
    """OpenMetrics 1.0 when the scraper accepts it, else the plain text format.

    Chosen here rather than by prometheus-client's ``choose_encoder``, which raises on
    some versions a client may send (``version=banana``)."""
    types = {part.split(";")[0].strip().lower() for part in accept[:MAX_ACCEPT_CHARS].split(",")}
    if OPENMETRICS in types:
        encode = cast(Callable[[Collector], bytes], openmetrics.generate_latest)  # pyright: ignore[reportUnknownMemberType]
        return encode, openmetrics.CONTENT_TYPE_LATEST
    return generate_latest, CONTENT_TYPE_PLAIN_0_0_4


def _refusal(request: Request) -> Response | None:
    """None for the scrape token or an admin key; 403 for any other key."""
    state = request.state
    if getattr(state, METRICS_SCRAPER_STATE_KEY, False) is True:
        return None
    principal = cast(object, getattr(state, PRINCIPAL_STATE_KEY, None))
    if isinstance(principal, Principal) and principal.is_admin:
        return None
    count_auth_failure("forbidden")
    error = Forbidden(
        "Metrics are for operators: use an admin API key (pml keys create ... --role admin) "
        "or the [telemetry] metrics_token"
    )
    return JSONResponse({"status": "error", "error": error.to_dict()}, status_code=403)
