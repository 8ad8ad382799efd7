"""Charts drawn on the server as SVG: no script, no library, readable without colour.

    svg = bar_chart([("2026-11-24", 12), ("2026-11-25", 30)], title="Calls per day", unit="calls")
    template: {{ svg }}       # Markup: already escaped, safe to put in a page

Every chart has a ``<title>`` and ``<desc>`` for screen readers, and each bar its own
``<title>`` (its label and value), so the numbers are there for whoever cannot see bars.
Pages show the same figures in a table beside the chart.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from markupsafe import Markup

WIDTH = 720
HEIGHT = 200
MARGIN_LEFT = 48
MARGIN_BOTTOM = 36
MARGIN_TOP = 12
MAX_BARS = 400


def number(value: float, decimals: int | None = None) -> str:
    """A chart's figure: ``decimals`` places, or as few as it needs."""
    if decimals is not None:
        return f"{value:,.{decimals}f}"
    if value >= 100 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:,.2f}" if value < 10 else f"{value:,.1f}"


def bar_chart(
    series: Sequence[tuple[str, float]],
    *,
    title: str,
    unit: str = "",
    secondary: Sequence[float] | None = None,
    secondary_label: str = "",
) -> Markup:
    """Bars for ``series`` (label, value), oldest first; ``secondary`` (e.g. errors) is
    drawn over each bar in a second shade. Labels are thinned to stay legible."""
    points = list(series)[-MAX_BARS:]
    extra = list(secondary or ())[-MAX_BARS:]
    plot_w = WIDTH - MARGIN_LEFT - 8
    plot_h = HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
    top = max([value for _, value in points] + [0.0])
    scale_top = top if top > 0 else 1.0
    total = sum(value for _, value in points)
    desc = (
        f"{len(points)} bars, total {number(total)} {unit}, highest {number(top)} {unit}"
        if points
        else "no data"
    )
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title><desc>{escape(desc)}</desc>",
        f'<line x1="{MARGIN_LEFT}" y1="{MARGIN_TOP + plot_h}" x2="{WIDTH - 8}" '
        f'y2="{MARGIN_TOP + plot_h}" stroke="#9aa3ad"/>',
        f'<text x="{MARGIN_LEFT - 6}" y="{MARGIN_TOP + 8}" text-anchor="end">'
        f"{escape(number(top))}</text>",
        f'<text x="{MARGIN_LEFT - 6}" y="{MARGIN_TOP + plot_h}" text-anchor="end">0</text>',
    ]
    if not points:
        parts.append(
            f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle">No data yet</text>'
        )
    slot = plot_w / max(len(points), 1)
    bar_w = max(slot * 0.7, 1.0)
    every = max(1, round(len(points) / 8))
    for index, (label, value) in enumerate(points):
        x = MARGIN_LEFT + index * slot + (slot - bar_w) / 2
        height = plot_h * (value / scale_top)
        y = MARGIN_TOP + plot_h - height
        tip = f"{label}: {number(value)} {unit}".strip()
        parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{height:.1f}" '
            f'fill="#3d7bd9"><title>{escape(tip)}</title></rect>'
        )
        if index < len(extra) and extra[index] > 0:
            sub = plot_h * (min(extra[index], value) / scale_top)
            sub_tip = f"{label}: {number(extra[index])} {secondary_label}".strip()
            parts.append(
                f'<rect x="{x:.1f}" y="{MARGIN_TOP + plot_h - sub:.1f}" width="{bar_w:.1f}" '
                f'height="{sub:.1f}" fill="#c0392b"><title>{escape(sub_tip)}</title></rect>'
            )
        if index % every == 0:
            parts.append(
                f'<text x="{x + bar_w / 2:.1f}" y="{HEIGHT - MARGIN_BOTTOM + 16}" '
                f'text-anchor="middle">{escape(label[-5:])}</text>'
            )
    parts.append("</svg>")
    return Markup("".join(parts))
