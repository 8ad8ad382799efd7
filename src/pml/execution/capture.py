"""The one capture service: a run that worked becomes (or counts for) a capability.

    record, created = await CaptureService(registry, db).capture(report, name, routing)

Every path that learns goes through here (``pml_execute`` now; traces from local clients
and approved workflows later). It stores the code as it should be kept — literals lifted
into parameters, secrets never, capabilities referenced by FQDN — under the identity of
the code as the agent wrote it, computes routing from what the code uses (SPEC §8), and
records the run's trace: each tool call's tool, argument digest, duration and success.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

from pml.analysis.snippet import SnippetAnalysis, code_to_store
from pml.errors import PmlError
from pml.execution.caller import Budget
from pml.execution.references import Plan
from pml.registry.models import CapabilityRecord
from pml.registry.routing import Routing
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry
from pml.storage.database import Database
from pml.storage.trace_repo import SqlTraceRepository, TraceRow
from pml.storage.types import utc_now

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RunReport:
    """What one successful run tells the capture service."""

    scope: Scope
    intent: str
    analysis: SnippetAnalysis
    plan: Plan
    budget: Budget
    duration_ms: float

    def tools_used(self) -> list[str]:
        """What the code names (routing covers every branch), then what nested runs used."""
        used = [target.address for target in self.plan.targets.values()]
        return list(dict.fromkeys([*used, *self.budget.tools_used]))

    def draft(self, name: str | None, routing: Routing | None) -> CapabilityDraft:
        return CapabilityDraft(
            code=code_to_store(self.analysis, self.plan.capability_fqdns),
            code_hash=self.analysis.code_hash,
            intent=self.intent,
            tools_used=self.tools_used(),
            parameters_schema=self.analysis.parameters_schema,
            name=name,
            routing=routing,
        )


class CaptureService:
    def __init__(self, registry: CapabilityRegistry, db: Database) -> None:
        self._registry = registry
        self._db = db

    async def capture(
        self, report: RunReport, name: str | None, routing: Routing | None
    ) -> tuple[CapabilityRecord, bool]:
        """Create the capability, or count a use of the one with the same code."""
        result = await self._registry.capture(
            report.scope, report.draft(name, routing), latency_ms=report.duration_ms
        )
        await self._trace(report, result.record.fqdn)
        return result.record, result.created

    async def new_version(
        self, report: RunReport, name: str, routing: Routing | None
    ) -> CapabilityRecord:
        """``update: true``: the run's code becomes the next version of ``name``."""
        record = await self._registry.update_code(report.scope, name, report.draft(None, routing))
        await self._registry.record_usage(record.fqdn, success=True, latency_ms=report.duration_ms)
        await self._trace(report, record.fqdn)
        return record

    async def _trace(self, report: RunReport, fqdn: str) -> None:
        row = TraceRow(
            id=str(uuid.uuid4()),
            org=report.scope.org,
            project=report.scope.project,
            user_id=report.scope.user,
            intent=report.intent,
            capability_fqdn=fqdn,
            success=True,
            error=None,
            duration_ms=report.duration_ms,
            task_results=list(report.budget.trace),
            created_at=utc_now(),
        )
        try:
            async with self._db.transaction() as conn:
                await SqlTraceRepository(conn).insert(row)
        except PmlError as error:  # the capability is stored; a lost trace is only logged
            logger.warning("trace of %s not recorded: %s", fqdn, error.message)
