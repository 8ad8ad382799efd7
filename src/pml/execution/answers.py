"""The pieces of ``pml_execute`` answers and requests shared by its modes.

analysis = cached_analysis(code, max_code_bytes)     # parsed once per distinct snippet
success_answer(outcome, budget, ...)                 # the SPEC §5 success object
stored_request(params)                               # a request as a paused run keeps it
"""

from __future__ import annotations

import functools
from typing import Any

from pml.analysis.snippet import SnippetAnalysis, analyze_snippet
from pml.execution.caller import Budget
from pml.gateway.schemas import ExecuteParams
from pml.sandbox.base import RunOutcome

ANALYSIS_CACHE_SIZE = 128


@functools.lru_cache(maxsize=ANALYSIS_CACHE_SIZE)
def cached_analysis(code: str, max_code_bytes: int) -> SnippetAnalysis:
    """Analyses are immutable: a snippet run again (or a capability called by name) reuses one.

    Only successes are cached (``lru_cache`` does not keep raised errors).
    """
    return analyze_snippet(code, max_code_bytes=max_code_bytes)


def stored_request(params: ExecuteParams) -> dict[str, Any]:
    """The request as a paused workflow keeps it (``continue_workflow`` dropped)."""
    return params.model_dump(mode="json", exclude={"continue_workflow"}, exclude_none=True)


def success_answer(
    outcome: RunOutcome,
    budget: Budget,
    capability_id: str,
    name: str,
    fqdn: str,
    *,
    created: bool,
    routing: str,
    elapsed_ms: float,
) -> dict[str, Any]:
    return {
        "status": "success",
        "result": outcome.value,
        "logs": list(outcome.logs),
        "toolsUsed": list(budget.tools_used),
        "capabilityId": capability_id,
        "capabilityName": name,
        "capabilityFqdn": fqdn,
        "created": created,
        "routing": routing,
        "executionTimeMs": round(elapsed_ms, 3),
    }
