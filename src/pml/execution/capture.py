"""The one capture service: a run that worked becomes (or counts for) a capability.

    record, created = await CaptureService(registry, db).capture(report, name, routing)

Every path that learns goes through here: ``pml_execute`` runs (approved ones too) and
the traces local clients send for code they ran (``pml.execution.trace_ingest``). It
stores the code as it should be kept — literals lifted into parameters, secrets never,
capabilities referenced by FQDN — under the identity of the code as the agent wrote it,
computes routing from what the code uses (SPEC §8), and records the run's trace: each
tool call's tool, argument digest, duration and success. The run's intent is remembered
for the capability (``pml.registry.intents``): queued with the usage count, written in the
same batch, so reusing a capability still costs one read before the answer.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from pml.analysis.snippet import SnippetAnalysis, code_to_store
from pml.execution.recorder import UsageRecorder
from pml.execution.references import Plan
from pml.registry.intents import sighted
from pml.registry.models import CapabilityRecord
from pml.registry.routing import Routing
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry
from pml.storage.capability_repo import CodeOwner
from pml.storage.trace_repo import TraceRow
from pml.storage.types import utc_now


@dataclass(frozen=True, slots=True)
class RunReport:
    """What one successful run tells the capture service: what it called (``called``) and
    each call's trace entry (``task_results``: tool, argument digest, duration, success)."""

    scope: Scope
    intent: str
    analysis: SnippetAnalysis
    plan: Plan
    called: tuple[str, ...]
    task_results: list[dict[str, Any]]
    duration_ms: float
    workflow_id: str | None = None

    def tools_used(self) -> list[str]:
        """What the code names (routing covers every branch), then what nested runs used."""
        used = [target.address for target in self.plan.targets.values()]
        return list(dict.fromkeys([*used, *self.called]))

    def trace_row(self, fqdn: str | None) -> TraceRow:
        return TraceRow(
            id=str(uuid.uuid4()),
            org=self.scope.org,
            project=self.scope.project,
            user_id=self.scope.user,
            intent=self.intent,
            capability_fqdn=fqdn,
            success=True,
            error=None,
            duration_ms=self.duration_ms,
            task_results=list(self.task_results),
            created_at=utc_now(),
            workflow_id=self.workflow_id,
        )

    def draft(
        self, name: str | None, routing: Routing | None, version_tag: str | None = None
    ) -> CapabilityDraft:
        return CapabilityDraft(
            code=code_to_store(self.analysis, self.plan.capability_fqdns),
            code_hash=self.analysis.code_hash,
            code_parsed=True,  # the analysis parsed the lifted code; naming by FQDN keeps it so
            intent=self.intent,
            tools_used=self.tools_used(),
            parameters_schema=self.analysis.parameters_schema,
            name=name,
            routing=routing,
            version_tag=version_tag,
        )


class CaptureService:
    def __init__(self, registry: CapabilityRegistry, recorder: UsageRecorder) -> None:
        self._registry = registry
        self._recorder = recorder

    async def capture(
        self,
        report: RunReport,
        name: str | None,
        routing: Routing | None,
        *,
        record_trace: bool = True,
        known_new: bool = False,
    ) -> tuple[CapabilityRecord | CodeOwner, bool]:
        """Create the capability, or count a use of the one with the same code.

        Reusing a capability costs one read: its usage and the trace are queued (batched
        writes). Creating one (or naming one) is written before the answer. With
        ``record_trace=False`` the caller writes the trace row itself. ``known_new``: the
        caller has just looked and no capability has this code (the read is skipped; a
        capture made meanwhile is still found by the registry, which counts a use).
        """
        scope, code_hash = report.scope, report.analysis.code_hash
        existing = None if known_new else await self._registry.find_by_code(scope, code_hash)
        if existing is not None and (
            name is None or existing.named or name == existing.display_name
        ):
            self._recorder.count(existing.fqdn, success=True, latency_ms=report.duration_ms)
            self.remember(scope, existing.fqdn, report.intent, "reuse")
            if record_trace:
                self._recorder.trace(report.trace_row(existing.fqdn))
            return existing, False
        result = await self._registry.capture(
            scope, report.draft(name, routing), latency_ms=report.duration_ms
        )
        source = "capture" if result.created else "reuse"
        self.remember(scope, result.record.fqdn, report.intent, source)
        if record_trace:
            self._recorder.trace(report.trace_row(result.record.fqdn))
        return result.record, result.created

    async def new_version(
        self,
        report: RunReport,
        name: str,
        routing: Routing | None,
        *,
        record_trace: bool = True,
        version_tag: str | None = None,
    ) -> CapabilityRecord:
        """``update: true``: the run's code becomes the next version of ``name`` (tagged
        ``version_tag`` when given)."""
        draft = report.draft(None, routing, version_tag)
        record = await self._registry.update_code(report.scope, name, draft)
        self._recorder.count(record.fqdn, success=True, latency_ms=report.duration_ms)
        self.remember(report.scope, record.fqdn, report.intent, "update")
        if record_trace:
            self._recorder.trace(report.trace_row(record.fqdn))
        return record

    def not_saved(self, report: RunReport, routing: Routing | None) -> Routing:
        """A run whose capture was refused (the project's capability quota): its trace is
        still recorded, for no capability; the routing its answer reports."""
        self._recorder.trace(report.trace_row(None))
        return self._registry.plain_routing(report.tools_used(), routing)

    def count_use(self, fqdn: str, *, success: bool, latency_ms: float) -> None:
        """A run of an existing capability (by name, on a client) counts for it."""
        self._recorder.count(fqdn, success=success, latency_ms=latency_ms)

    def count_code_use(
        self, scope: Scope, code_hash: str, *, success: bool, latency_ms: float
    ) -> None:
        """A run of code that is not a capability by name (a client's failed snippet) counts
        for the capability whose current code it is, if any (found by the batched write)."""
        self._recorder.count_code(scope, code_hash, success=success, latency_ms=latency_ms)

    def remember(self, scope: Scope, fqdn: str, intent: object, source: str) -> None:
        """Queue an intent that led to ``fqdn``: cut and hashed now (about a microsecond);
        scrubbed, compared and written in the recorder's batched write."""
        sighting = sighted(fqdn, intent, source, scope.user, utc_now())
        if sighting is not None:
            self._recorder.intent(sighting)
