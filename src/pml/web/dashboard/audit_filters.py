"""The audit page's filters: read from a query string, checked, turned into a search and
back into links.

    filters = parse_filters(request.query_params)          # INVALID_INPUT when malformed
    filters.query()            # AuditQuery(events=("POLICY_DENIED",), actor="ana", ...)
    filters.link(before_id=4711)  # "/ui/audit?event=POLICY_DENIED&user=ana&before_id=4711"

Event names and ids are checked by ``GET /api/audit``'s own rules (``parse_query``); the
text filters by the columns they match (length, no control characters). A form leaves
unused fields empty: an empty value is no filter. ``from``/``to`` are the form's
``datetime-local`` values, read as UTC; ``to`` includes its whole last minute (or second).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

from starlette.datastructures import QueryParams

from pml.errors import InvalidInput
from pml.storage.audit_repo import TEXT_LIMITS, AuditQuery
from pml.web.api_audit import MAX_AFTER_ID, MAX_EVENTS, parse_query

PAGE_PATH = "/ui/audit"
LIVE_PATH = "/ui/audit/live"
# query parameter -> the column it matches
TEXT_FILTERS = {
    "user": "actor",
    "tool": "tool",
    "capability": "capability",
    "decided_by": "decided_by",
    "request_id": "request_id",
}
TIME_FILTERS = ("from", "to")
FILTERS = frozenset({"event", *TEXT_FILTERS, *TIME_FILTERS})
CURSORS = ("before_id", "after_id")
MAX_EVENT_TEXT = 2048
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_DIGITS = re.compile(r"[0-9]{1,19}")
_LOCAL_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?")
_SEPARATORS = re.compile(r"[\s,]+")


@dataclass(frozen=True, slots=True)
class AuditFilters:
    """What the person asked to see (as typed, checked) and where they are in the log."""

    events: tuple[str, ...] = ()
    text: dict[str, str] = field(default_factory=dict[str, str])  # parameter -> value
    since: datetime | None = None
    until: datetime | None = None  # exclusive
    times: dict[str, str] = field(default_factory=dict[str, str])  # "from"/"to" as typed
    before_id: int | None = None
    after_id: int | None = None

    def query(self, *, actor: str | None = None) -> AuditQuery:
        """The search; ``actor`` (set for non-admins) replaces the ``user`` filter."""
        values = {TEXT_FILTERS[name]: value for name, value in self.text.items()}
        if actor is not None:
            values["actor"] = actor
        return AuditQuery(events=self.events, since=self.since, until=self.until, **values)

    def params(self) -> list[tuple[str, str]]:
        """The filters as query parameters (no cursor), in a stable order."""
        pairs: list[tuple[str, str]] = []
        if self.events:
            pairs.append(("event", ",".join(self.events)))
        pairs.extend((name, self.text[name]) for name in TEXT_FILTERS if name in self.text)
        pairs.extend((name, self.times[name]) for name in TIME_FILTERS if name in self.times)
        return pairs

    def link(self, path: str = PAGE_PATH, **cursor: int) -> str:
        """A URL of ``path`` with these filters and ``cursor`` (``before_id``/``after_id``)."""
        pairs = self.params() + [(name, str(value)) for name, value in cursor.items()]
        return f"{path}?{urlencode(pairs)}" if pairs else path

    @property
    def active(self) -> bool:
        return bool(self.events or self.text or self.times)


def _single(params: QueryParams, name: str) -> str | None:
    values = params.getlist(name)
    if len(values) > 1:
        raise InvalidInput(f"Give {name} at most once.", field=name)
    if not values:
        return None
    return values[0].strip() or None


def _cursor(params: QueryParams, name: str) -> int | None:
    text = _single(params, name)
    if text is None:
        return None
    if _DIGITS.fullmatch(text) is None or int(text) > MAX_AFTER_ID:
        raise InvalidInput(
            f"Invalid {name}: {text[:40]!r}. Use a whole number from 0 to {MAX_AFTER_ID}.",
            field=name,
        )
    return int(text)


def _events(params: QueryParams) -> tuple[str, ...]:
    names: list[str] = []
    for value in params.getlist("event"):
        if len(value) > MAX_EVENT_TEXT:
            raise InvalidInput(
                f"Invalid event: at most {MAX_EVENT_TEXT} characters.", field="event"
            )
        names.extend(name for name in _SEPARATORS.split(value) if name)
    if len(names) > MAX_EVENTS:
        raise InvalidInput(f"Give at most {MAX_EVENTS} event names.", field="event")
    parse_query(QueryParams([("event", name) for name in names]))  # the API's rules
    return tuple(dict.fromkeys(names))  # each once, in the order given


def _text(params: QueryParams, name: str) -> str | None:
    value = _single(params, name)
    if value is None:
        return None
    limit = TEXT_LIMITS[TEXT_FILTERS[name]]
    label = name.replace("_", " ")
    if len(value) > limit:
        raise InvalidInput(f"Invalid {label}: at most {limit} characters.", field=name)
    if _CONTROL.search(value):
        raise InvalidInput(f"Invalid {label}: control characters are not allowed.", field=name)
    return value


def _moment(params: QueryParams, name: str) -> tuple[str, datetime, timedelta] | None:
    """A ``datetime-local`` value as typed, as UTC, and its precision."""
    text = _single(params, name)
    if text is None:
        return None
    problem = f"Invalid {name}: {text[:40]!r}. Use a date and time such as 2025-06-01T12:30."
    if _LOCAL_TIME.fullmatch(text) is None:
        raise InvalidInput(problem, field=name)
    try:
        moment = datetime.fromisoformat(text).replace(tzinfo=UTC)
    except ValueError:
        raise InvalidInput(problem, field=name) from None
    if len(text) == 16:
        step = timedelta(minutes=1)
    elif len(text) == 19:
        step = timedelta(seconds=1)
    else:
        step = timedelta(microseconds=1)
    return text, moment, step


def parse_filters(params: QueryParams, *, cursors: tuple[str, ...] = CURSORS) -> AuditFilters:
    """The filters and cursor of a query string, or ``INVALID_INPUT`` saying what is wrong."""
    allowed = FILTERS | set(cursors)
    unknown = sorted(set(params.keys()) - allowed)
    if unknown:
        names = ", ".join(sorted(allowed))
        raise InvalidInput(
            f"Unknown parameter: {unknown[0][:40]!r}. Use {names}.", field=unknown[0][:40]
        )
    text = {name: value for name in TEXT_FILTERS if (value := _text(params, name)) is not None}
    times: dict[str, str] = {}
    since = until = None
    if (start := _moment(params, "from")) is not None:
        times["from"], since, _ = start
    if (end := _moment(params, "to")) is not None:
        times["to"], last, step = end
        try:
            until = last + step
        except OverflowError:
            raise InvalidInput("Invalid to: too far in the future.", field="to") from None
    if since is not None and until is not None and since >= until:
        raise InvalidInput("Invalid time range: from is after to.", field="from")
    before_id = _cursor(params, "before_id") if "before_id" in cursors else None
    after_id = _cursor(params, "after_id") if "after_id" in cursors else None
    if before_id is not None and after_id is not None:
        raise InvalidInput("Give before_id or after_id, not both.", field="before_id")
    return AuditFilters(
        events=_events(params),
        text=text,
        since=since,
        until=until,
        times=times,
        before_id=before_id,
        after_id=after_id,
    )


def typed_values(params: QueryParams) -> dict[str, str]:
    """What the form held (for showing it again after an error): printable, cut short."""
    shown: dict[str, str] = {}
    for name in sorted(FILTERS):
        values = params.getlist(name)
        if values:
            limit = (
                MAX_EVENT_TEXT
                if name == "event"
                else TEXT_LIMITS.get(TEXT_FILTERS.get(name, ""), 32)
            )
            shown[name] = _CONTROL.sub("", values[0])[:limit]
    return shown
