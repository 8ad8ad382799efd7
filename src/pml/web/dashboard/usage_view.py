"""What the usage page shows: the last 30 days of calls of the viewer's org/project as
charts, each with a table of the same numbers, and the live permission grants.

    page = await usage_page(services, viewer.scope)
    page.tool_days.chart, page.tool_days.days          # a chart and its rows
    page.busiest_tools.chart, page.busiest_tools.rows

Tool calls (upstream tools, whatever made them) and capability runs are shown apart: a
capability's run is one row of its own, and the tool calls it made are rows of their tools.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final
from urllib.parse import quote

from markupsafe import Markup

from pml.policy.permissions import Grant
from pml.registry.scope import Scope
from pml.storage.dashboard_usage_repo import DayCount
from pml.storage.usage_stats_repo import (
    ToolStats,
    UsageOverview,
    capability_names,
    slowest_first,
    usage_overview,
)
from pml.web.dashboard.charts import bar_chart
from pml.web.dashboard.usage_charts import ranked_chart
from pml.web.services import WebServices

DAYS: Final = 30
TOP: Final = 10


@dataclass(frozen=True, slots=True)
class DaySeries:
    """A per-day chart and its rows (newest first in the table)."""

    chart: Markup
    days: list[DayCount]

    @property
    def newest_first(self) -> list[DayCount]:
        return list(reversed(self.days))


@dataclass(frozen=True, slots=True)
class ToolRow:
    """One tool or capability in a ranking."""

    stats: ToolStats
    label: str
    href: str | None  # a capability's page

    @property
    def parts(self) -> list[str]:
        """The label in pieces a narrow column may break between (after ``:`` and ``.``)."""
        return [piece for piece in re.split(r"(?<=[:.])", self.label) if piece]

    @property
    def error_percent(self) -> float:
        return self.stats.error_rate * 100


@dataclass(frozen=True, slots=True)
class Ranking:
    chart: Markup
    rows: list[ToolRow]


@dataclass(frozen=True, slots=True)
class UsagePage:
    overview: UsageOverview
    tool_days: DaySeries
    capability_days: DaySeries
    busiest_tools: Ranking
    busiest_capabilities: Ranking
    error_rates: Ranking
    slowest_tools: Ranking

    @property
    def tool_error_percent(self) -> float:
        calls = self.overview.tool_calls
        return self.overview.tool_errors / calls * 100 if calls else 0.0


def _days(days: Sequence[DayCount], title: str, unit: str) -> DaySeries:
    chart = bar_chart(
        [(day.day.isoformat(), float(day.calls)) for day in days],
        title=title,
        unit=unit,
        secondary=[float(day.errors) for day in days],
        secondary_label="errors",
    )
    return DaySeries(chart, list(days))


def _ranking(
    rows: list[ToolRow],
    title: str,
    value: Callable[[ToolStats], float],
    *,
    unit: str = "",
    suffix: str = "",
    errors: bool = False,
    decimals: int | None = None,
) -> Ranking:
    chart = ranked_chart(
        [(row.label, value(row.stats)) for row in rows],
        title=title,
        unit=unit,
        suffix=suffix,
        decimals=decimals,
        secondary=[float(row.stats.errors) for row in rows] if errors else None,
        secondary_label="errors",
    )
    return Ranking(chart, rows)


def _row(stats: ToolStats, names: Mapping[str, str]) -> ToolRow:
    if not stats.is_capability:
        return ToolRow(stats, stats.label, None)
    name = names.get(stats.tool_name, stats.tool_name)
    return ToolRow(stats, name, f"/ui/capabilities/{quote(stats.tool_name, safe='')}")


async def usage_page(
    services: WebServices, scope: Scope, *, until: datetime | None = None
) -> UsagePage:
    """The figures of ``scope``'s org/project over the last ``DAYS`` UTC days."""
    overview = await usage_overview(services.db, scope.org, scope.project, days=DAYS, until=until)
    names = await capability_names(services.db, [s.tool_name for s in overview.capabilities[:TOP]])
    tools = [_row(s, names) for s in overview.tools]
    capabilities = [_row(s, names) for s in overview.capabilities]
    failing = sorted(
        (row for row in tools if row.stats.errors),
        key=lambda row: (-row.stats.error_rate, -row.stats.calls, row.label),
    )
    slow = {(s.server_id, s.tool_name) for s in slowest_first(overview.tools)[:TOP]}
    slowest = sorted(
        (row for row in tools if (row.stats.server_id, row.stats.tool_name) in slow),
        key=lambda row: (-row.stats.avg_latency_ms, row.label),
    )
    return UsagePage(
        overview=overview,
        tool_days=_days(overview.daily.tools, "Tool calls per day (errors in red)", "calls"),
        capability_days=_days(
            overview.daily.capabilities, "Capability runs per day (errors in red)", "runs"
        ),
        busiest_tools=_ranking(
            tools[:TOP],
            "Busiest tools: calls (errors in red)",
            lambda s: s.calls,
            unit="calls",
            errors=True,
        ),
        busiest_capabilities=_ranking(
            capabilities[:TOP],
            "Busiest capabilities: runs (errors in red)",
            lambda s: s.calls,
            unit="runs",
            errors=True,
        ),
        error_rates=_ranking(
            failing[:TOP],
            "Tools by error rate",
            lambda s: s.error_rate * 100,
            suffix=" %",
            decimals=1,
        ),
        slowest_tools=_ranking(
            slowest,
            "Slowest tools: mean latency",
            lambda s: s.avg_latency_ms,
            suffix=" ms",
            decimals=1,
        ),
    )


@dataclass(frozen=True, slots=True)
class GrantRow:
    """One live grant as the page lists it."""

    grant: Grant

    @property
    def short_id(self) -> str:
        return self.grant.id[:8]

    @property
    def uses(self) -> str:
        grant = self.grant
        if grant.max_uses is None:
            return f"{grant.uses} (no limit)"
        return f"{grant.uses} of {grant.max_uses}"

    @property
    def revoke_path(self) -> str:
        return f"/ui/usage/grants/{quote(self.grant.id, safe='')}/revoke"

    @property
    def summary(self) -> str:
        """A sentence naming the grant, for the revoke button's accessible name."""
        grant = self.grant
        return f"{grant.capability} on {grant.scope.tool} for {grant.principal}"


def when(value: datetime | None, empty: str = "never") -> str:
    """A UTC instant as the page shows it."""
    return value.strftime("%Y-%m-%d %H:%M UTC") if value is not None else empty


async def grant_rows(services: WebServices, scope: Scope) -> list[GrantRow]:
    """The live grants of ``scope``'s org/project (every user's), newest first."""
    grants = await services.grants.list(scope)
    return [GrantRow(grant) for grant in reversed(grants)]
