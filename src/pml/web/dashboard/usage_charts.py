"""Ranked (horizontal) bar charts for the usage page: one row per tool, its name above
its bar, drawn on the server as SVG like ``charts.bar_chart`` (which labels its bars
with the last five characters of a label: right for dates, wrong for tool names).

    svg = ranked_chart([("time:get_current_time", 12), ...], title="Busiest tools", unit="calls",
                       secondary=[1, ...], secondary_label="errors")

Like ``bar_chart``: a ``<title>`` and ``<desc>``, each bar's own ``<title>`` with its label
and value, everything escaped, and the same figures in a table beside it on the page.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Final

from markupsafe import Markup

from pml.web.dashboard.charts import number

WIDTH: Final = 360  # narrow, so that a phone shows it at nearly its own size
ROW: Final = 36
BAR: Final = 12
LABEL_H: Final = 15
VALUE_W: Final = 64
TOP: Final = 4
MAX_ROWS: Final = 25
LABEL_CHARS: Final = 52


def short_label(label: str, limit: int = LABEL_CHARS) -> str:
    """``label`` cut in the middle to fit (both ends of a tool name tell it apart)."""
    if len(label) <= limit:
        return label
    head = (limit - 1) // 2
    return label[:head] + "…" + label[len(label) - (limit - 1 - head) :]


def ranked_chart(
    items: Sequence[tuple[str, float]],
    *,
    title: str,
    unit: str = "",
    secondary: Sequence[float] | None = None,
    secondary_label: str = "",
    suffix: str = "",
    decimals: int | None = None,
) -> Markup:
    """One horizontal bar per (label, value), in the given order (largest first, usually);
    ``secondary`` (e.g. errors) is drawn over each bar from its start in a second shade;
    ``decimals`` fixes how values are written (default: as few as they need)."""
    rows = list(items)[:MAX_ROWS]
    extra = list(secondary or ())[:MAX_ROWS]
    height = TOP * 2 + max(len(rows), 1) * ROW
    plot_w = WIDTH - VALUE_W
    top = max([value for _, value in rows] + [0.0])
    scale = top if top > 0 else 1.0
    desc = (
        f"{len(rows)} bars, highest {number(top, decimals)}{suffix} {unit}".rstrip()
        if rows
        else "no data"
    )
    parts = [
        f'<svg class="chart ranked" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" '
        f'height="{height}" role="img" aria-label="{escape(title)}" '
        'xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title><desc>{escape(desc)}</desc>",
    ]
    if not rows:
        parts.append(
            f'<text x="{WIDTH / 2}" y="{TOP + ROW / 2 + 4}" text-anchor="middle">No data yet</text>'
        )
    for index, (label, value) in enumerate(rows):
        y = TOP + index * ROW  # the label on its line, the bar under it
        bar_y = y + LABEL_H + 3
        width = max(plot_w * (value / scale), 1.0 if value > 0 else 0.0)
        tip = f"{label}: {number(value, decimals)}{suffix} {unit}".rstrip()
        parts.append(
            f'<text x="0" y="{y + LABEL_H - 3}" class="label">{escape(short_label(label))}</text>'
        )
        parts.append(
            f'<rect x="0" y="{bar_y}" width="{width:.1f}" height="{BAR}" rx="2" '
            f'fill="#3d7bd9"><title>{escape(tip)}</title></rect>'
        )
        if index < len(extra) and extra[index] > 0:
            sub = plot_w * (min(extra[index], value) / scale)
            sub_tip = f"{label}: {number(extra[index])} {secondary_label}".rstrip()
            parts.append(
                f'<rect x="0" y="{bar_y}" width="{max(sub, 1.0):.1f}" height="{BAR}" rx="2" '
                f'fill="#c0392b"><title>{escape(sub_tip)}</title></rect>'
            )
        parts.append(
            f'<text x="{width + 6:.1f}" y="{bar_y + BAR - 2}" class="value">'
            f"{escape(number(value, decimals) + suffix)}</text>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))
