"""The services a gateway runs, built from settings (imported lazily: ``pml cap`` and the
other short commands do not pay for the sandbox, the model or the MCP SDK).

    pool = default_pool(settings, db)
    discovery = open_discovery(settings, db, pool)
    async with open_executor(settings, db, registry, pool, discovery) as (executor, usage, _):
        ...
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from pml.config import Settings
from pml.discovery.base import Discoverer
from pml.errors import PmlError
from pml.gateway.tool_seams import Executor, UsageSink
from pml.llm import JsonCompleter
from pml.registry.routing import server_routing
from pml.registry.scope import Scope
from pml.registry.service import CapabilityRegistry
from pml.storage.database import Database
from pml.upstream.base import UpstreamPool
from pml.wiring import remember_intents, routing_rules

if TYPE_CHECKING:
    from pml.curation.service import CurationService
    from pml.discovery.embedder import Embedder
    from pml.discovery.service import DiscoveryService
    from pml.execution.trace_ingest import TraceIngest
    from pml.gateway.policy_services import PolicyServices
    from pml.upstream.base import ToolSource

logger = logging.getLogger(__name__)


async def register_servers(registry: CapabilityRegistry, settings: Settings, scope: Scope) -> None:
    """Record every enabled upstream server as ``mcp:<name>`` in the deployment's scope (§6.8).

    A changed command becomes a new version of the record; a server the registry refuses
    (e.g. its name is taken by a capability) is logged and served all the same.
    """
    rules = routing_rules(settings)
    for name, server in sorted(settings.servers.items()):
        if server.disabled:
            continue
        written = settings.server_as_written(name)  # ${VAR} kept: no secret in the record
        code_url = written.url or shlex.join([written.command or "", *written.args])
        routing = server_routing(name, rules.cloud, rules.local)
        try:
            await registry.register_mcp_server(scope, name, code_url=code_url, routing=routing)
        except PmlError as error:
            logger.warning("server %r is not recorded in the registry: %s", name, error.message)


def open_curation(
    registry: CapabilityRegistry, db: Database, settings: Settings, llm: JsonCompleter | None
) -> CurationService:
    from pml.curation.service import CurationService

    return CurationService(registry, db, settings=settings.curation, llm=llm)


def discovery_embedder(settings: Settings) -> Embedder:
    """The ``[discovery]`` embedder; the model in the shared embedding process when
    ``model_process = "shared"`` (its socket in the user's run directory)."""
    from pml.discovery.embedder import load_embedder

    shared_in = None
    if settings.discovery.model_process == "shared":
        from platformdirs import user_data_dir

        from pml.gateway.running import run_directory

        shared_in = run_directory(Path(user_data_dir("pml")))
    return load_embedder(settings.discovery.embedder, shared_in=shared_in)


def open_discovery(settings: Settings, db: Database, pool: ToolSource) -> DiscoveryService:
    """``pml_discover``'s service with the configured embedder (imported lazily)."""
    from pml.discovery.service import DiscoveryService

    embedder = discovery_embedder(settings)
    return DiscoveryService(db, pool, embedder, routing=routing_rules(settings))


@asynccontextmanager
async def open_executor(
    settings: Settings,
    db: Database,
    registry: CapabilityRegistry,
    pool: UpstreamPool,
    discovery: Discoverer,
    policy: PolicyServices | None = None,
) -> AsyncGenerator[tuple[Executor, UsageSink, TraceIngest]]:
    """``pml_execute``'s service on the sandbox engine, the usage recorder it writes with,
    and the ingest of client traces sharing its capture service (imported lazily; on exit
    the engine stops and everything recorded is written)."""
    from pml.execution.capture import CaptureService
    from pml.execution.handoff import ClientHandoff, OfflineContexts
    from pml.execution.hooks import CleanupHook
    from pml.execution.recorder import UsageRecorder
    from pml.execution.service import ExecuteService
    from pml.execution.trace_ingest import TraceIngest
    from pml.sandbox.fair import fair_engine

    engine = fair_engine(settings.sandbox, settings.limits)  # workers shared between tenants
    try:
        async with UsageRecorder(db) as recorder:
            remember_intents(recorder, registry, discovery_embedder(settings))
            service = ExecuteService(
                registry=registry,
                pool=pool,
                engine=engine,
                db=db,
                recorder=recorder,
                limits=settings.sandbox,
                discovery=discovery,
                policy=policy.enforcer if policy is not None else None,
                approvals=policy.approvals if policy is not None else None,
                hooks=[CleanupHook(policy.purges, policy.enforcer)] if policy is not None else (),
                handoff=None
                if policy is None
                else ClientHandoff(
                    policy.workflows,
                    ttl_s=settings.routing.workflow_ttl_s,
                    routing=routing_rules(settings),
                    policy=policy.enforcer,
                ),
            )
            offline = OfflineContexts(
                registry=registry,
                pool=pool,
                routing=routing_rules(settings),
                policy=policy.enforcer if policy is not None else None,
                max_code_bytes=settings.sandbox.max_code_bytes,
            )
            traces = TraceIngest(
                db,
                CaptureService(registry, recorder),
                auditor=policy.audit if policy is not None else None,
                offline=offline,
                claim_lease_s=settings.routing.trace_claim_lease_s,
            )
            yield service, recorder, traces
    finally:
        with anyio.CancelScope(shield=True):
            await engine.aclose()


def default_pool(settings: Settings, db: Database) -> UpstreamPool:
    """The configured upstream pool, its catalog stored in ``db`` (imported lazily)."""
    from pml.storage.catalog_repo import CatalogStore
    from pml.upstream.pool import ClientPool

    return ClientPool(settings.servers, settings=settings.upstream, catalog=CatalogStore(db))
