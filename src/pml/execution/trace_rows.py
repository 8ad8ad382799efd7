"""The trace row stored for a client's run (``POST /api/traces``, ``pml connect``).

rows.append(stored_row(report, capability_fqdn, trace))
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

from pml.execution.capture import RunReport
from pml.execution.trace_wire import MAX_ERROR_CHARS, IncomingTrace
from pml.policy.scrub import scrub_text
from pml.storage.trace_repo import TraceRow


def stored_row(report: RunReport, fqdn: str | None, trace: IncomingTrace) -> TraceRow:
    """The run as the client reported it: its error scrubbed and cut, its duration finite."""
    row = report.trace_row(fqdn or "")
    error = None if trace.error is None else scrub_text(trace.error)[:MAX_ERROR_CHARS]
    duration = trace.durationMs if math.isfinite(trace.durationMs) else 0.0
    return TraceRow(
        id=row.id,
        org=row.org,
        project=row.project,
        user_id=row.user_id,
        intent=row.intent,
        capability_fqdn=fqdn,
        success=trace.success,
        error=error,
        duration_ms=duration,
        task_results=row.task_results,
        created_at=datetime.now(UTC),
        workflow_id=trace.workflowId,
    )
