"""A trace as it leaves this machine: checked against the wire contract, scrubbed.

    prepare_trace({"workflowId": "wf_1", "success": True, "durationMs": 3})
    # {"traceId": "<uuid4>", "workflowId": "wf_1", ..., "timestamp": "2026-...Z"}

Unknown fields are left out (with a warning); ``taskResults`` and ``error`` are scrubbed of
secrets (``pml.policy.scrub``) and of e-mail addresses and phone numbers; ``traceId``
(uuid4) and ``timestamp`` (UTC) are added when missing. An ``offline`` run (code, intent,
name, routing: code run while the server was unreachable) is sent as written, since the
server learns the capability from that code.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Final, cast

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from pml.errors import InvalidInput
from pml.policy.scrub import scrub, scrub_text

logger = logging.getLogger(__name__)

_EMAIL: Final = re.compile(r"[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63})+")
# Phone numbers written as such: international (+33 6 12 34 56 78) or (555) 123-4567.
_PHONE: Final = re.compile(
    r"(?<![\w+])(?:\+\d{1,3}(?:[ .-]?\d{1,4}){2,6}|\(\d{3}\)[ .-]?\d{3}[ .-]\d{4})(?![\w.])"
)
_UNSTORABLE: Final = re.compile("[\x00\ud800-\udfff]")


def _storable(value: object) -> object:
    """NUL and lone surrogates, which UTF-8 and PostgreSQL refuse, become U+FFFD."""
    return _UNSTORABLE.sub("\ufffd", value) if isinstance(value, str) else value


_Text = Annotated[str, BeforeValidator(_storable), Field(strict=True)]


class _Offline(BaseModel):
    """Code run while the server was unreachable: sent as written (the server learns it from
    this; its code hash must not change), never scrubbed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    code: _Text
    intent: _Text
    name: _Text | None = None
    routing: _Text | None = None


class _Trace(BaseModel):
    """The wire contract of one trace, as ``enqueue`` accepts it (unknown fields left out)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    traceId: uuid.UUID | None = None
    workflowId: _Text = Field(min_length=1)
    success: bool = Field(strict=True)
    error: _Text | None = None
    durationMs: float = Field(ge=0, allow_inf_nan=False, strict=True)
    taskResults: list[Any] = Field(default_factory=list[Any])  # checked before scrub
    parentId: uuid.UUID | None = None
    timestamp: datetime | None = None
    offline: _Offline | None = None


def prepare_trace(trace: Mapping[str, Any]) -> dict[str, Any]:
    """The trace as sent: fields checked, secrets scrubbed, ``traceId``/``timestamp`` added.

    ``InvalidInput`` names the first field that does not fit the wire contract."""
    try:
        parsed = _Trace.model_validate(trace)
        when = parsed.timestamp or datetime.now(UTC)
        if when.tzinfo is None:  # a naive time is taken as UTC, the wire's zone
            when = when.replace(tzinfo=UTC)
        timestamp = when.astimezone(UTC).isoformat(timespec="milliseconds")
    except ValidationError as error:  # its text would quote the values: field and reason only
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "trace"
        raise InvalidInput(f"Invalid trace ({where}): {first['msg']}"[:300]) from None
    except (OverflowError, ValueError):
        raise InvalidInput("Invalid trace (timestamp): out of range") from None
    if not all(isinstance(item, Mapping) for item in parsed.taskResults):
        raise InvalidInput("Invalid trace (taskResults): each task result must be an object")
    if parsed.model_extra:
        logger.warning("trace: left out unknown fields %s", sorted(parsed.model_extra)[:10])
    # scrub also bounds the size; the markers it leaves for what it cut are not task results
    tasks = cast(list[object], _without_pii(scrub(parsed.taskResults)))
    prepared: dict[str, Any] = {
        "traceId": str(parsed.traceId or uuid.uuid4()),
        "workflowId": parsed.workflowId,
        "success": parsed.success,
        "durationMs": parsed.durationMs,
        "taskResults": [item for item in tasks if isinstance(item, dict)],
        "timestamp": timestamp,
    }
    if parsed.error is not None:
        prepared["error"] = _without_pii(scrub_text(parsed.error))
    if parsed.parentId is not None:
        prepared["parentId"] = str(parsed.parentId)
    if parsed.offline is not None:
        prepared["offline"] = parsed.offline.model_dump(exclude_none=True)
    return prepared


def _without_pii(value: Any) -> Any:
    """E-mail addresses and phone numbers in any string of ``value`` replaced by markers
    (the values of the run never leave the machine; an error message may quote them)."""
    if isinstance(value, str):
        return _PHONE.sub("[PHONE]", _EMAIL.sub("[EMAIL]", value))
    if isinstance(value, list):
        return [_without_pii(item) for item in cast(list[Any], value)]
    if isinstance(value, dict):
        return {key: _without_pii(item) for key, item in cast(dict[str, Any], value).items()}
    return value
