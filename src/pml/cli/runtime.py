"""Turning settings into the objects a CLI command works with (database, registry, scope).

async with open_registry(settings) as session:
    await session.tools.call("cap_list", session.scope, {})
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from pml.config import Settings
from pml.registry.scope import Scope
from pml.registry.service import CapabilityRegistry
from pml.registry.tools import CapTools
from pml.storage.database import Database
from pml.wiring import routing_rules, scope_of


@dataclass(frozen=True, slots=True)
class RegistrySession:
    """An open database with the registry, its tools and the caller's scope."""

    db: Database
    registry: CapabilityRegistry
    tools: CapTools
    scope: Scope


@asynccontextmanager
async def open_registry(settings: Settings) -> AsyncGenerator[RegistrySession]:
    """Open the configured database (migrating it) and the registry on top of it."""
    from pml.config import audit_file_path
    from pml.policy.audit import AuditLog

    db = await Database.open(settings.database_url)
    try:
        registry = CapabilityRegistry(db, routing=routing_rules(settings))
        audit = AuditLog(db, audit_file_path(settings))
        registry.auditor = audit  # renames from the shell are audited like the gateway's
        async with audit.running():
            yield RegistrySession(db, registry, CapTools(registry), scope_of(settings))
    finally:
        await db.close()
