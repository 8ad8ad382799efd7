"""The wire format of client traces (``POST /api/traces``, SPEC §9.3), validated.

    trace = IncomingTrace.model_validate(raw)          # ValidationError: rejected
    answer(trace, "captured", capabilityFqdn=...)      # one entry of the reply

Every field is bounded: ids of at most 64 characters, at most ``MAX_TASKS`` task results
(tool, argument digest, duration, success, error — never values), errors cut, an offline
run's code at most ``MAX_OFFLINE_CODE_CHARS`` (the sandbox limit is checked again). Types
are strict (``"12.5"`` or ``true`` is not a duration). Ids are looked up in the database,
echoed in the reply and logged: a control character (NUL, which PostgreSQL refuses; a
newline, which would forge a log line) makes the trace ``rejected``, as does a lone
surrogate anywhere (pydantic refuses those), never the whole batch.
"""

from __future__ import annotations

from typing import Annotated, Any, cast

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from pml.gateway.schemas import TEXT_MAX
from pml.policy.scrub import scrub, scrub_text

MAX_TRACES = 100
MAX_TASKS = 1000
MAX_ERROR_CHARS = 4000
MAX_OFFLINE_CODE_CHARS = 1_000_000  # the sandbox's own limit is checked when it is learned
STATUSES = ("captured", "duplicate", "expired", "failed", "rejected")
Id = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[^\x00-\x1f\x7f]+$")]
Short = Annotated[str, Field(max_length=400)]
Milliseconds = Annotated[float, Field(ge=0, le=1e9, allow_inf_nan=False, strict=True)]


class TaskResult(BaseModel):
    """One tool call of the client's run (values are never sent, only their digest)."""

    model_config = ConfigDict(extra="ignore")

    tool: Short
    argsDigest: Annotated[str, Field(max_length=128)] | None = None
    durationMs: Milliseconds = 0.0
    success: StrictBool = True
    error: Annotated[str, Field(max_length=MAX_ERROR_CHARS)] | None = None


class OfflineRun(BaseModel):
    """What a client ran while the gateway was unreachable (checked again when learned)."""

    model_config = ConfigDict(extra="ignore")

    code: Annotated[str, Field(max_length=MAX_OFFLINE_CODE_CHARS)]
    intent: Annotated[str, Field(min_length=1, max_length=TEXT_MAX, pattern=r"^[^\x00]+$")]
    name: Annotated[str, Field(max_length=64)] | None = None
    routing: Annotated[str, Field(max_length=8)] | None = None


class IncomingTrace(BaseModel):
    """``{workflowId, success, error?, durationMs, taskResults}`` plus the client's ids."""

    model_config = ConfigDict(extra="ignore")

    workflowId: Id
    success: StrictBool
    durationMs: Milliseconds
    taskResults: Annotated[list[TaskResult], Field(max_length=MAX_TASKS)] = []
    error: Annotated[str, Field(max_length=MAX_ERROR_CHARS * 4)] | None = None
    traceId: Id | None = None
    parentId: Id | None = None
    timestamp: Annotated[str, Field(max_length=64)] | None = None
    offline: OfflineRun | None = None


def answer(trace: object, status: str, **extra: Any) -> dict[str, Any]:
    """One entry of the reply: the trace's ids (those of a malformed one when readable),
    its status and the details that are not None."""
    reply: dict[str, Any] = {"status": status}
    if isinstance(trace, IncomingTrace):
        reply = {"traceId": trace.traceId, "workflowId": trace.workflowId, **reply}
    elif isinstance(trace, dict):
        given = cast(dict[str, object], trace)
        for key in ("traceId", "workflowId"):
            value = given.get(key)
            if isinstance(value, str) and len(value) <= 64:
                reply[key] = scrub_text(value)
    reply.update({k: v for k, v in extra.items() if v is not None})
    return reply


def first_problem(error: ValidationError) -> str:
    problem = error.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part) for part in problem["loc"]) or "trace"
    return f"Invalid trace: {where}: {problem['msg']}"


def task_results(trace: IncomingTrace) -> list[dict[str, Any]]:
    """Each call as a trace row keeps it, scrubbed (NUL and surrogates made safe too)."""
    tasks = [task.model_dump(exclude_none=True) for task in trace.taskResults]
    kept = cast(list[object], scrub(tasks))
    return [cast(dict[str, Any], task) for task in kept if isinstance(task, dict)]
