"""One request's pipeline as one record: what its audit events add up to (SPEC §10.6, §13).

    record = await request_record(AuditRepository(db), org="acme", project="webapp",
                                  request_id="4f2a9c01d3e5b7a9")
    record = pipeline_record(rows)          # the same, from rows already read (in id order)
    record["router"]["intent"]              # "lookup_search"
    record["tool_calls"][0]                 # {"tool", "outcome", "duration_ms", "decided_by"}
    record["timing_ms"]["total"]            # first event to last, in milliseconds

A turn of ``pml agent`` writes its whole record as one ``PIPELINE_RECORD`` event: that is
the base. Any other request (a ``pml_execute`` run, a pass-through call, a request from an
MCP client) is assembled from its events, and whatever a ``PIPELINE_RECORD`` leaves out or
holds in the wrong shape comes from the events too. Every stored value is untrusted: a
field of the wrong type counts as absent, strings are cut to ``MAX_TEXT`` characters,
containers to ``MAX_ITEMS`` entries and ``MAX_DEPTH`` levels; nothing read can raise.

Tool call outcomes assembled from events: ``ok``, ``error``, ``replayed`` (answered from the
journal of a paused run, not sent again), ``started`` (no end recorded), ``denied`` (the
gate or a rule refused it at call time), ``approval_required`` (the run paused there) and
``refused`` (``EXECUTOR_TOOL_REFUSED``: the executor asked for a tool it was not offered).
The request's ``outcome``: ``answered``, ``failed``, ``cancelled`` (agent turns),
``approval_required`` or ``unknown``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, cast

from pml.errors import InvalidInput, NotFound
from pml.policy.stored_values import (
    MAX_ITEMS,
    MAX_NAME,
    MAX_TEXT,
    clip,
    count_of,
    cut,
    iso_utc,
    number_of,
    span_ms,
    text_of,
)
from pml.storage.audit_repo import AuditQuery, AuditRepository, AuditRow

RECORD_EVENT = "PIPELINE_RECORD"
REQUEST_ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
SUMMARY_CHARS = 200
MAX_ROWS = 10_000
PAGE_ROWS = 1000
TIMING_STAGES = ("router", "executor", "tools", "posthooks", "total")
MEMORY_OUTCOMES = ("applied", "refused", "waiting")
PERMISSION_LISTS = ("asked", "granted", "denied")
CAPABILITY_KEYS = ("capability", "fqdn", "capabilityFqdn")


def check_request_id(value: object) -> str:
    """``value`` if it is a request id (1-64 of ``A-Za-z0-9_.:-``), else ``INVALID_INPUT``."""
    if isinstance(value, str) and REQUEST_ID.fullmatch(value) is not None:
        return value
    shown = repr(value[:40]) if isinstance(value, str) else type(value).__name__
    raise InvalidInput(
        f"Invalid request id: {shown}. Use 1 to 64 letters, digits, '_', '.', ':' or '-'.",
        field="request_id",
    )


async def request_record(
    repo: AuditRepository,
    *,
    org: str,
    project: str,
    request_id: str,
    actor: str | None = None,
) -> dict[str, Any]:
    """The record of ``request_id`` in one org/project (only ``actor``'s events if given);
    ``NOT_FOUND`` when it has no events there. At most ``MAX_ROWS`` events are read: beyond
    that the record says ``"truncated": true``."""
    where = AuditQuery(request_id=check_request_id(request_id), actor=actor)
    rows: list[AuditRow] = []
    after = 0
    truncated = False
    while True:
        want = min(PAGE_ROWS, MAX_ROWS - len(rows))
        page = await repo.search(org=org, project=project, limit=want, where=where, after_id=after)
        rows.extend(page)
        if len(page) < want:
            break
        after = page[-1].id
        if len(rows) >= MAX_ROWS:
            more = await repo.search(org=org, project=project, limit=1, where=where, after_id=after)
            truncated = bool(more)
            break
    if not rows:
        raise NotFound(
            f"No audit events for request {request_id} in {org}.{project}",
            request_id=request_id,
        )
    record = pipeline_record(rows)
    record["truncated"] = truncated
    return record


def pipeline_record(rows: Sequence[AuditRow]) -> dict[str, Any]:
    """The one record of a request, from its audit rows (any order: sorted by id here)."""
    ordered = sorted(rows, key=_order)
    assembled = _Assembly()
    stored: Mapping[str, Any] = {}
    for row in ordered:
        details = _details(row)
        if row.event == RECORD_EVENT:
            stored = details  # the last one, if a turn ever wrote two
        assembled.add(row, details)
    first = ordered[0] if ordered else None
    actors = (text_of(row.actor, MAX_NAME) for row in ordered)
    record: dict[str, Any] = {
        "request_id": text_of(first.request_id, 64) if first else None,
        "scope": text_of(f"{first.org}.{first.project}", MAX_NAME) if first else None,
        "actor": next((actor for actor in actors if actor is not None), None),
        "started_at": iso_utc(first.ts) if first else None,
        "ended_at": iso_utc(ordered[-1].ts) if ordered else None,
        **assembled.result(ordered),
        "assembled": not stored,
        "truncated": False,
        "events": [_event(row) for row in ordered],
    }
    if stored:
        _overlay(record, stored)
    return record


class _Assembly:
    """The record's fields, gathered event by event."""

    def __init__(self) -> None:
        self.router: Any = None
        self.policy: Any = None
        self.executor: Mapping[str, Any] | None = None
        self.calls: list[dict[str, Any]] = []
        self.open: dict[str | None, list[dict[str, Any]]] = {}
        self.allowed_by: dict[str | None, str | None] = {}
        self.permissions: dict[str, list[str]] = {name: [] for name in PERMISSION_LISTS}
        self.approvals: list[dict[str, Any]] = []
        self.memory: dict[str, Any] = {"proposed": 0, **{name: [] for name in MEMORY_OUTCOMES}}
        self.clarifications: list[Any] = []
        self.capabilities: list[dict[str, Any]] = []
        self.waiting = False

    def add(self, row: AuditRow, details: Mapping[str, Any]) -> None:
        event = text_of(cast("object", row.event), 64) or ""
        decided_by = text_of(row.decided_by, MAX_NAME)
        tool = text_of(details.get("tool"), MAX_NAME)
        if event == "ROUTER_OUTPUT" and self.router is None:
            self.router = clip(details)
        elif event == "POLICY_DECISION" and self.policy is None:
            self.policy = clip(details)
        elif event == "PERMISSION_CHECK":
            self._check(tool, details.get("outcome"), decided_by)
        elif event == "PERMISSION_GRANTED":
            scope: object = details.get("scope")
            held: Mapping[str, Any] = (
                cast("Mapping[str, Any]", scope) if isinstance(scope, Mapping) else {}
            )
            self._permission("granted", tool or text_of(held.get("tool"), MAX_NAME))
        elif event in ("POLICY_DENIED", "PERMISSION_DENIED"):
            self._permission("denied", tool)
            if details.get("stage") == "call" and details.get("enforced") is not False:
                self._call(tool, "denied", decided_by)
        elif event.startswith("APPROVAL_"):
            self._approval(event, tool, details, decided_by)
        elif event == "TOOL_CALL_START":
            call = self._call(tool, "started", self.allowed_by.pop(tool, None))
            self.open.setdefault(tool, []).append(call)
        elif event == "TOOL_CALL_END":
            self._ended(tool, details)
        elif event == "EXECUTOR_TOOL_REFUSED":
            self._call(tool, "refused", decided_by)
        elif event == "EXECUTOR_RESPONSE":
            self.executor = details
        elif event == "POSTHOOK_MEMORY":
            self.memory["proposed"] += 1
            outcome = details.get("outcome")
            if outcome in MEMORY_OUTCOMES:
                self.memory[outcome].append(clip(dict(details)))
        elif event == "AGENT_CLARIFICATION":
            self.clarifications.append(clip(details))
        elif event.startswith("CAPABILITY_") or event == "POSTHOOK_CAPTURE":
            names = (text_of(details.get(key), MAX_NAME) for key in CAPABILITY_KEYS)
            fqdn = next((name for name in names if name is not None), None)
            self.capabilities.append({"event": event, "capability": fqdn, "decided_by": decided_by})

    def _check(self, tool: str | None, outcome: object, decided_by: str | None) -> None:
        if outcome == "ask":
            self._permission("asked", tool)
            self._call(tool, "approval_required", decided_by)
        elif outcome == "allow":
            self.allowed_by[tool] = decided_by
            if decided_by is not None and decided_by.startswith("grant:"):
                self._permission("granted", tool)

    def _approval(
        self, event: str, tool: str | None, details: Mapping[str, Any], decided_by: str | None
    ) -> None:
        outcome = text_of(details.get("outcome"), 40)
        self.approvals.append(
            {
                "event": event,
                "workflow_id": text_of(details.get("workflow_id"), MAX_NAME),
                "tool": tool,
                "outcome": outcome,
                "decided_by": decided_by,
            }
        )
        if event == "APPROVAL_REQUIRED":
            self._permission("asked", tool)
            self.waiting = True
        elif event == "APPROVAL_DECIDED":
            self._permission("granted" if outcome == "approved" else "denied", tool)

    def _ended(self, tool: str | None, details: Mapping[str, Any]) -> None:
        replayed = details.get("replayed") is True
        waiting = self.open.get(tool)
        call = waiting.pop(0) if waiting and not replayed else self._call(tool, "started", None)
        ok = details.get("success") is True
        call["outcome"] = "replayed" if replayed else "ok" if ok else "error"
        call["duration_ms"] = number_of(details.get("duration_ms"))

    def _call(self, tool: str | None, outcome: str, decided_by: str | None) -> dict[str, Any]:
        call = {"tool": tool, "outcome": outcome, "duration_ms": None, "decided_by": decided_by}
        if len(self.calls) < MAX_ROWS:
            self.calls.append(call)
        return call

    def _permission(self, kind: str, tool: str | None) -> None:
        if tool is not None and tool not in self.permissions[kind]:
            self.permissions[kind].append(tool)

    def result(self, rows: Sequence[AuditRow]) -> dict[str, Any]:
        executor = self.executor or {}
        sent = [c["duration_ms"] for c in self.calls if c["outcome"] in ("ok", "error")]
        total = span_ms(rows[0].ts, rows[-1].ts) if rows else None
        timing = {
            "router": None,
            "executor": number_of(executor.get("duration_ms")),
            "tools": round(sum(d for d in sent if d is not None), 3) if sent else None,
            "posthooks": None,
            "total": total,
        }
        return {
            "text": None,
            "router": self.router,
            "policy": self.policy,
            "tools_offered": [],
            "round_trips": 0,
            "tool_calls": self.calls,
            "approvals": self.approvals,
            "permissions": self.permissions,
            "memory": self.memory,
            "clarifications": self.clarifications,
            "capabilities": self.capabilities,
            "timing_ms": timing,
            "outcome": self._outcome(executor),
        }

    def _outcome(self, executor: Mapping[str, Any]) -> str:
        status = executor.get("status")
        if status == "error" and executor.get("error") == "APPROVAL_REQUIRED":
            return "approval_required"  # the run paused; its continuation is a new request
        if status in ("success", "error"):
            return "answered" if status == "success" else "failed"
        outcomes = {call["outcome"] for call in self.calls}
        if self.waiting or "approval_required" in outcomes:
            return "approval_required"
        if outcomes & {"error", "denied", "refused"} or self.permissions["denied"]:
            return "failed"
        return "answered" if outcomes and outcomes <= {"ok", "replayed"} else "unknown"


def _overlay(record: dict[str, Any], stored: Mapping[str, Any]) -> None:
    """Take from a ``PIPELINE_RECORD``'s details each field of the right shape."""
    text = text_of(stored.get("text"), MAX_TEXT)
    if text is not None:
        record["text"] = text
    for key in ("router", "policy"):
        if isinstance(stored.get(key), Mapping):
            record[key] = clip(stored[key])
    offered = stored.get("tools_offered")
    if isinstance(offered, list):
        names = (text_of(name, MAX_NAME) for name in cast("list[object]", offered)[:MAX_ITEMS])
        record["tools_offered"] = [name for name in names if name is not None]
    trips = count_of(stored.get("round_trips"))
    if trips is not None:
        record["round_trips"] = trips
    calls = stored.get("tool_calls")
    if isinstance(calls, list):
        record["tool_calls"] = [
            _stored_call(cast("Mapping[str, Any]", call))
            for call in cast("list[object]", calls)[:MAX_ROWS]
            if isinstance(call, Mapping)
        ]
    if isinstance(stored.get("clarifications"), list):
        record["clarifications"] = clip(stored["clarifications"])
    _merge(record["memory"], stored.get("memory"), MEMORY_OUTCOMES, count="proposed")
    _merge(record["permissions"], stored.get("permissions"), PERMISSION_LISTS)
    timing = stored.get("timing_ms")
    if isinstance(timing, Mapping):
        timing = cast("Mapping[str, Any]", timing)
        for stage in TIMING_STAGES:
            value = number_of(timing.get(stage))
            if value is not None:
                record["timing_ms"][stage] = value
    outcome = text_of(stored.get("outcome"), 40)
    if outcome is not None:
        record["outcome"] = outcome


def _stored_call(call: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "tool": text_of(call.get("tool"), MAX_NAME),
        "outcome": text_of(call.get("outcome"), 40),
        "duration_ms": number_of(call.get("duration_ms")),
        "decided_by": text_of(call.get("decided_by"), MAX_NAME),
    }


def _merge(
    into: dict[str, Any], given: object, lists: Sequence[str], count: str | None = None
) -> None:
    if not isinstance(given, Mapping):
        return
    given = cast("Mapping[str, Any]", given)
    for name in lists:
        if isinstance(given.get(name), list):
            into[name] = clip(given[name])
    counted = count_of(given.get(count)) if count is not None else None
    if count is not None and counted is not None:
        into[count] = counted


def _details(row: AuditRow) -> Mapping[str, Any]:
    details = cast("object", row.details)  # from the database: any JSON value
    return cast("Mapping[str, Any]", details) if isinstance(details, Mapping) else {}


def _order(row: AuditRow) -> int:
    ident = cast("object", row.id)
    return ident if isinstance(ident, int) else 0


def _event(row: AuditRow) -> dict[str, Any]:
    summary = json.dumps(
        clip(_details(row), text_limit=SUMMARY_CHARS), ensure_ascii=False, separators=(",", ":")
    )
    return {
        "ts": iso_utc(row.ts),
        "event": text_of(row.event, 64),
        "decided_by": text_of(row.decided_by, MAX_NAME),
        "summary": cut(summary, SUMMARY_CHARS),
    }
