"""The pieces of ``pml_execute`` answers and requests shared by its modes.

analysis = await analysis_of(code, max_code_bytes)   # parsed once per distinct snippet
success_answer(outcome, budget, ...)                 # the SPEC §5 success object
stored_request(params)                               # a request as a paused run keeps it
"""

from __future__ import annotations

from typing import Any, Protocol

from pml.analysis.snippet import SnippetAnalysis, analyze_snippet, check_code
from pml.config import SandboxSettings
from pml.errors import ExecutionFailed, PmlError
from pml.execution.analysis_cache import AnalysisCache
from pml.execution.caller import Budget
from pml.gateway.schemas import ExecuteParams
from pml.registry.models import CapabilityRecord
from pml.sandbox import study
from pml.sandbox.base import RunOutcome, TenantKey

ANALYSES = AnalysisCache()


async def analysis_of(
    code: str, max_code_bytes: int, tenant: TenantKey | None = None
) -> SnippetAnalysis:
    """``cached_analysis`` without holding the event loop for a large snippet: that one is
    analysed in ``tenant``'s turn by the checking process (``pml.sandbox.study``)."""
    check_code(code, max_code_bytes)
    found = ANALYSES.get(code)
    if found is not None:
        return found
    if not study.is_large(code):
        return cached_analysis(code, max_code_bytes)
    size = len(code.encode("utf-8", "surrogatepass"))
    return ANALYSES.put(code, await study.analysis(code, size, tenant))


def cached_analysis(code: str, max_code_bytes: int) -> SnippetAnalysis:
    """Analyses are immutable: a snippet run again (or a capability called by name) reuses one.

    The cache is keyed by the code alone and the size limit checked on every call: a
    hand-off (checked against ``[sandbox] max_code_bytes``) and the trace that ends it
    (stored code, checked against its own size) share one analysis. Only successes are
    cached, in ``ANALYSES`` (``pml.execution.analysis_cache``: thousands of snippets, a
    bounded amount of text).
    """
    check_code(code, max_code_bytes)
    found = ANALYSES.get(code)
    if found is not None:
        return found
    size = len(code.encode("utf-8", "surrogatepass"))
    return ANALYSES.put(code, analyze_snippet(code, max_code_bytes=size))


async def stored_analysis(
    code: str, fqdn: str, max_code_bytes: int, tenant: TenantKey | None = None
) -> SnippetAnalysis:
    """The analysis of a capability's stored code (stored code may exceed today's limit)."""
    try:
        return await analysis_of(code, max(max_code_bytes, len(code.encode())), tenant)
    except PmlError as error:
        raise ExecutionFailed(f"Stored code of {fqdn} cannot run: {error.message}") from None


def limits_for(limits: SandboxSettings, params: ExecuteParams) -> SandboxSettings:
    """The sandbox limits of one request: ``options.timeout_ms`` can only shorten the time."""
    options = params.options
    if options is None or options.timeout_ms is None:
        return limits
    wall = min(limits.wall_time_s, options.timeout_ms / 1000)
    return limits.model_copy(update={"wall_time_s": wall})


def mode_of(params: ExecuteParams) -> str:
    """How a ``pml_execute`` call runs, as its metrics and spans name it."""
    if params.continue_workflow is not None:
        return "continue"
    if params.code is not None:
        return "code"
    return "capability" if params.capability is not None else "suggestions"


def stored_request(params: ExecuteParams) -> dict[str, Any]:
    """The request as a paused workflow keeps it (``continue_workflow`` dropped)."""
    return params.model_dump(mode="json", exclude={"continue_workflow"}, exclude_none=True)


class CapabilityFace(Protocol):
    """What an answer says of the capability that ran (a record, or a reused code's owner)."""

    @property
    def id(self) -> str: ...
    @property
    def display_name(self) -> str: ...
    @property
    def fqdn(self) -> str: ...


def success_answer(
    outcome: RunOutcome,
    budget: Budget,
    capability: CapabilityFace,
    *,
    created: bool,
    routing: str,
    ms: float,
) -> dict[str, Any]:
    """The SPEC §5 success answer; ``ms``: the run's duration in milliseconds (with the
    ``deprecated``/``replacedBy`` warning of a deprecated capability)."""
    answer: dict[str, Any] = {
        "status": "success",
        "result": outcome.value,
        "logs": list(outcome.logs),
        "toolsUsed": list(budget.tools_used),
        "capabilityId": capability.id,
        "capabilityName": capability.display_name,
        "capabilityFqdn": capability.fqdn,
        "created": created,
        "routing": routing,
        "executionTimeMs": round(ms, 3),
        "waitMs": round(outcome.wait_ms, 3),  # of it, waiting for a sandbox worker
    }
    if isinstance(capability, CapabilityRecord) and capability.deprecation is not None:
        answer |= capability.deprecation
    return answer
