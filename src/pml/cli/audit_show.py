"""``pml audit show REQUEST_ID``: one request's pipeline record as lines a person reads.

    for line in record_lines(record):       # record from pml.policy.pipeline_view
        typer.echo(line)

    request 4f2a9c01d3e5b7a9  acme.webapp  erwan  2025-06-01 12:30:01.250 → 12:30:01.480
    outcome       answered
    router        intent lookup_search  confidence 0.9  decided_by heuristic:time
    policy        rule policy:lookup_search  allowed time, web_search  forbidden file_write
    tool calls
      time:get_current_time  ok  12.3 ms  default:allow:time
    ...
    events
      12:30:01.250  ROUTER_OUTPUT         heuristic:time  {"intent":"lookup_search",...}

Every line goes through ``safe_text``: control and bidi characters of stored text are shown
escaped, so nothing read from the database can move the cursor, clear the screen or turn
text around, and one value never spans several lines.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any, cast

from pml.cli.status_cmd import safe_text

NONE = "-"
LABEL_WIDTH = 14
EVENT_WIDTH = 20
MAX_LIST = 20  # names shown inline before "... (N more)"
DETAIL_CHARS = 160


def record_lines(record: Mapping[str, Any]) -> list[str]:
    """The text view of a pipeline record, one safe line each."""
    return [safe_text(line).plain for line in _lines(record)]


def _lines(record: Mapping[str, Any]) -> Iterator[str]:
    yield _request_line(record)
    if record.get("text"):
        yield _row("text", _str(record.get("text")))
    yield _row("outcome", _str(record.get("outcome")))
    yield _row("router", _router(_map(record.get("router"))))
    yield _row("policy", _policy(_map(record.get("policy"))))
    yield _row("offered", _names(record.get("tools_offered")))
    yield _row("round trips", _str(record.get("round_trips")))
    yield from _section("tool calls", [_call(call) for call in _maps(record.get("tool_calls"))])
    permissions = _map(record.get("permissions"))
    kinds = ("asked", "granted", "denied")
    yield _row("permissions", "  ".join(f"{k} {_names(permissions.get(k))}" for k in kinds))
    yield from _section("approvals", [_approval(item) for item in _maps(record.get("approvals"))])
    yield from _memory(_map(record.get("memory")))
    clarifications = _list(record.get("clarifications"))
    yield from _section("clarified", [_compact(item) for item in clarifications])
    capabilities = _maps(record.get("capabilities"))
    yield from _section("capabilities", [_capability(item) for item in capabilities])
    yield _row("timing ms", _timing(_map(record.get("timing_ms"))))
    if record.get("truncated") is True:
        yield _row("note", f"only the first {len(_list(record.get('events')))} events were read")
    yield "events"
    for event in _maps(record.get("events")):
        name = f"{_str(event.get('event')):<{EVENT_WIDTH}}"
        parts = (_clock(event.get("ts")), name, _str(event.get("decided_by")))
        yield "  " + "  ".join((*parts, _str(event.get("summary"))))


def _request_line(record: Mapping[str, Any]) -> str:
    started, ended = record.get("started_at"), record.get("ended_at")
    when = f"{_day(started)} {_clock(started)} → {_clock(ended)}"
    parts = (_str(record.get(key)) for key in ("request_id", "scope", "actor"))
    return "request " + "  ".join((*parts, when))


def _router(router: Mapping[str, Any]) -> str:
    if not router:
        return NONE
    line = (
        f"intent {_str(router.get('intent'))}  confidence {_str(router.get('confidence'))}  "
        f"decided_by {_str(router.get('decided_by'))}"
    )
    needs = _list(router.get("needs"))
    extra = f"  needs {_names(needs)}" if needs else ""
    risk = f"  risk {_str(router.get('risk_level'))}" if router.get("risk_level") else ""
    return line + extra + risk


def _policy(policy: Mapping[str, Any]) -> str:
    if not policy:
        return NONE
    return (
        f"rule {_str(policy.get('rule'))}  allowed {_names(policy.get('allowed'))}  "
        f"forbidden {_names(policy.get('forbidden'))}"
    )


def _call(call: Mapping[str, Any]) -> str:
    duration = call.get("duration_ms")
    took = f"{duration:.1f} ms" if isinstance(duration, int | float) else NONE
    return "  ".join(
        (_str(call.get("tool")), _str(call.get("outcome")), took, _str(call.get("decided_by")))
    )


def _approval(item: Mapping[str, Any]) -> str:
    keys = ("event", "tool", "outcome", "decided_by", "workflow_id")
    return "  ".join(_str(item.get(key)) for key in keys)


def _capability(item: Mapping[str, Any]) -> str:
    return "  ".join(_str(item.get(key)) for key in ("event", "capability", "decided_by"))


def _memory(memory: Mapping[str, Any]) -> Iterator[str]:
    counts = "  ".join(
        f"{kind} {len(_list(memory.get(kind)))}" for kind in ("applied", "refused", "waiting")
    )
    yield _row("memory", f"proposed {_str(memory.get('proposed', 0))}  {counts}")
    for kind in ("applied", "refused", "waiting"):
        for item in _list(memory.get(kind)):
            yield f"  {kind:<10}{_compact(item)}"


def _timing(timing: Mapping[str, Any]) -> str:
    stages = ("router", "executor", "tools", "posthooks", "total")
    shown: list[str] = []
    for stage in stages:
        value = timing.get(stage)
        shown.append(f"{stage} {value:.1f}" if isinstance(value, int | float) else f"{stage} -")
    return "  ".join(shown)


def _section(label: str, lines: list[str]) -> Iterator[str]:
    if not lines:
        yield _row(label, NONE)
        return
    yield label
    for line in lines:
        yield "  " + line


def _row(label: str, value: str) -> str:
    return f"{label:<{LABEL_WIDTH}}{value}"


def _names(value: object) -> str:
    items = [_str(item) for item in _list(value)]
    if not items:
        return NONE
    shown = ", ".join(items[:MAX_LIST])
    return shown + (f" ... ({len(items) - MAX_LIST} more)" if len(items) > MAX_LIST else "")


def _compact(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= DETAIL_CHARS else text[: DETAIL_CHARS - 1] + "…"


def _str(value: object) -> str:
    if value is None or value == "":
        return NONE
    return value if isinstance(value, str) else _compact(value)


def _moment(iso: object) -> datetime | None:
    if not isinstance(iso, str) or len(iso) > 40:
        return None
    try:
        return datetime.fromisoformat(iso)
    except ValueError:
        return None


def _day(iso: object) -> str:
    moment = _moment(iso)
    return moment.strftime("%Y-%m-%d") if moment is not None else NONE


def _clock(iso: object) -> str:
    """``HH:MM:SS.mmm`` of an ISO 8601 time."""
    moment = _moment(iso)
    return moment.strftime("%H:%M:%S.%f")[:-3] if moment is not None else NONE


def _map(value: object) -> Mapping[str, Any]:
    return cast("Mapping[str, Any]", value) if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return cast("list[Any]", value) if isinstance(value, list) else []


def _maps(value: object) -> list[Mapping[str, Any]]:
    items: list[object] = _list(value)
    return [cast("Mapping[str, Any]", item) for item in items if isinstance(item, Mapping)]
