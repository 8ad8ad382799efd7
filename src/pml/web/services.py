"""The services the web face reads and steers, opened from a gateway or from settings alone.

    async with open_web_services(settings) as services:    # `pml dashboard`: no gateway
        items = await services.desk.pending(org, project)

The gateway builds the same ``WebServices`` from its own open services (``pml.gateway.http``),
so the dashboard and the REST API see exactly what the MCP surface does. ``states`` is the
upstream servers' live state: the running pool in a gateway, the last state a gateway
reported (``upstream_servers``) for ``pml dashboard``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from pml.config import Settings
from pml.discovery.base import KindFilter
from pml.registry.scope import Scope
from pml.registry.service import CapabilityRegistry
from pml.storage.catalog_repo import CatalogStore
from pml.storage.database import Database
from pml.upstream.base import ServerStatus, UpstreamTool

if TYPE_CHECKING:
    from pml.execution.approval_desk import ApprovalDesk
    from pml.execution.trace_ingest import TraceIngest
    from pml.policy.audit import AuditLog
    from pml.policy.grants import GrantService


class CapabilitySearch(Protocol):
    """``pml_discover``'s ranking for a person's search (``DiscoveryService.rank``)."""

    async def rank(
        self, scope: Scope, intent: str, *, kind: KindFilter = "all", limit: int = 5
    ) -> list[dict[str, Any]]:
        """Results best first, as ``pml_discover`` shapes them."""
        ...


class ServerStates(Protocol):
    """Where the upstream servers' state comes from."""

    async def states(self) -> list[ServerStatus]:
        """Every configured server's current state, by name."""
        ...


@dataclass(frozen=True, slots=True)
class WebServices:
    """What the REST API and the dashboard work with (one set per process)."""

    settings: Settings
    db: Database
    registry: CapabilityRegistry
    desk: ApprovalDesk
    grants: GrantService
    audit: AuditLog
    catalog: CatalogStore
    servers: ServerStates
    # The scope upstream servers are recorded in (``[scope]``): its admins accept definitions.
    deployment: Scope
    discovery: CapabilitySearch | None = None
    traces: TraceIngest | None = None


@dataclass(frozen=True, slots=True)
class ReportedStates:
    """The servers of ``settings`` as a running gateway last reported them (or unknown)."""

    settings: Settings
    catalog: CatalogStore

    async def states(self) -> list[ServerStatus]:
        """Configured servers first, each with its last report, then reported leftovers."""
        reports = {status.name: status for status in await self.catalog.load_status()}
        found: list[ServerStatus] = []
        for name, server in sorted(self.settings.servers.items()):
            report = reports.pop(name, None)
            if report is not None:
                found.append(report)
                continue
            transport = "http" if server.url else "stdio"
            state = "disabled" if server.disabled else "stopped"
            found.append(ServerStatus(name, state, transport, 0, extra={"reported_by": None}))
        return [*found, *reports.values()]


@dataclass(frozen=True, slots=True)
class StoredTools:
    """The upstream tools as the catalog stored them (discovery without a running pool)."""

    settings: Settings
    catalog: CatalogStore

    async def list_tools(self) -> list[UpstreamTool]:
        """Every enabled server's stored tools."""
        tools: list[UpstreamTool] = []
        for name, server in sorted(self.settings.servers.items()):
            if server.disabled:
                continue
            tools.extend(UpstreamTool(name, tool) for tool in await self.catalog.load_catalog(name))
        return tools


@asynccontextmanager
async def open_web_services(
    settings: Settings, *, with_discovery: bool = True
) -> AsyncGenerator[WebServices]:
    """The web services over the configured database, without a gateway (``pml dashboard``)."""
    from pml.config import audit_file_path
    from pml.execution.approval_desk import ApprovalDesk
    from pml.policy.audit import AuditLog
    from pml.policy.grant_stamp import grant_stamp_for
    from pml.policy.grants import GrantService
    from pml.policy.version import policy_version
    from pml.storage.workflow_repo import WorkflowStateStore
    from pml.wiring import routing_rules, scope_of

    db = await Database.open(settings.database_url)
    try:
        registry = CapabilityRegistry(
            db,
            routing=routing_rules(settings),
            capabilities_per_project=settings.limits.capabilities_per_project,
        )
        audit = AuditLog(db, audit_file_path(settings))
        registry.auditor = audit  # changes made on the dashboard are audited like the gateway's
        catalog = CatalogStore(db)
        async with audit.running():
            grants = GrantService(
                db,
                audit,
                policy_version=policy_version(settings),
                stamp=grant_stamp_for(settings),  # running gateways see grant changes at once
            )
            desk = ApprovalDesk(WorkflowStateStore(db), grants, audit, settings.permissions)
            services = WebServices(
                settings=settings,
                db=db,
                registry=registry,
                desk=desk,
                grants=grants,
                audit=audit,
                catalog=catalog,
                servers=ReportedStates(settings, catalog),
                deployment=scope_of(settings),
            )
            if not with_discovery:
                yield services
                return
            from pml.discovery.embedder import load_embedder
            from pml.discovery.service import DiscoveryService

            discovery = DiscoveryService(
                db,
                StoredTools(settings, catalog),
                load_embedder(settings.discovery.embedder),
                routing=routing_rules(settings),
            )
            registry.on_change(discovery.capability_changed)
            async with discovery.running():
                yield replace(services, discovery=discovery)
    finally:
        await db.close()
