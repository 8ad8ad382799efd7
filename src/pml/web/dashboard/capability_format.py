"""How the capabilities pages write values: times, rates, links, one listing row.

    when("2026-11-24T10:11:12+00:00")   # Moment(iso="2026-11-24T10:11:12+00:00",
                                        #        text="2026-11-24 10:11 UTC")
    percent(0.875)                      # "87.5%"
    row_of(summary(record))             # ListRow(...) from cap_list's JSON of one record

Pages are given these ready-made values, so templates only place them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import quote

from pml.registry.scope import Visibility

BASE_PATH: Final = "/ui/capabilities"
VISIBILITY_HELP: Final[dict[Visibility, str]] = {
    "private": "only its creator",
    "project": "everyone in its org/project",
    "org": "everyone in its org",
    "public": "everyone, every org",
}


@dataclass(frozen=True, slots=True)
class Moment:
    """A point in time for a ``<time>`` element: machine value and what people read."""

    iso: str
    text: str


def when(value: object) -> Moment | None:
    """An ISO 8601 string or a datetime as a ``Moment`` in UTC (None for nothing)."""
    if value is None or value == "":
        return None
    try:
        moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    except ValueError:
        return Moment(str(value), str(value))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    moment = moment.astimezone(UTC)
    return Moment(moment.isoformat(), moment.strftime("%Y-%m-%d %H:%M UTC"))


def percent(rate: object) -> str:
    """A 0..1 rate as a percentage with at most one decimal."""
    if not isinstance(rate, int | float):
        return "–"
    value = round(float(rate) * 100, 1)
    return f"{value:.0f}%" if value == int(value) else f"{value:.1f}%"


def detail_href(fqdn: str) -> str:
    """The page of the capability ``fqdn``."""
    return f"{BASE_PATH}/{quote(fqdn, safe='')}"


@dataclass(frozen=True, slots=True)
class ListRow:
    """One capability as the listing shows it."""

    fqdn: str
    href: str
    name: str
    named: bool
    namespace: str
    description: str
    usage_count: int
    success: str
    last_used: Moment | None
    routing: str
    visibility: str
    score: str | None = None


def row_of(item: Mapping[str, Any], *, score: object = None) -> ListRow:
    """A listing row from a record's JSON (what ``cap_list`` returns for each item)."""
    fqdn = str(item.get("fqdn", ""))
    usage = item.get("usage_count")
    return ListRow(
        fqdn=fqdn,
        href=detail_href(fqdn),
        name=str(item.get("display_name", fqdn)),
        named=bool(item.get("named", False)),
        namespace=str(item.get("namespace", "")),
        description=str(item.get("description") or item.get("intent") or ""),
        usage_count=usage if isinstance(usage, int) else 0,
        success=percent(item.get("success_rate")) if usage else "–",
        last_used=when(item.get("last_used_at")),
        routing=str(item.get("routing", "")),
        visibility=str(item.get("visibility", "")),
        score=f"{score:.2f}" if isinstance(score, int | float) else None,
    )
