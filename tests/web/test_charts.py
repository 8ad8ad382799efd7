"""Server-side SVG charts: escaped, accessible, bounded."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from pml.web.dashboard.charts import MAX_BARS, bar_chart

SVG = "{http://www.w3.org/2000/svg}"


def test_a_chart_is_valid_svg_with_a_title_and_one_bar_per_point() -> None:
    svg = bar_chart([("2026-11-24", 3), ("2026-11-25", 7)], title="Calls per day", unit="calls")
    root = ET.fromstring(str(svg))
    assert root.findtext(f"{SVG}title") == "Calls per day"
    bars = root.findall(f"{SVG}rect")
    assert [bar.findtext(f"{SVG}title") for bar in bars] == [
        "2026-11-24: 3 calls",
        "2026-11-25: 7 calls",
    ]
    assert float(bars[1].get("height", "0")) > float(bars[0].get("height", "0"))


def test_labels_and_titles_are_escaped() -> None:
    svg = bar_chart([("<script>x</script>", 1)], title='"><img src=x onerror=alert(1)>')
    assert "<script>" not in str(svg)
    assert "<img" not in str(svg)
    ET.fromstring(str(svg))  # still well-formed


def test_an_empty_chart_says_so_and_a_huge_one_is_cut() -> None:
    assert "No data yet" in str(bar_chart([], title="t"))
    big = bar_chart([(str(i), float(i)) for i in range(MAX_BARS * 3)], title="t")
    assert str(big).count("<rect") == MAX_BARS


def test_errors_are_drawn_over_their_bar() -> None:
    svg = bar_chart([("a", 10), ("b", 4)], title="t", secondary=[2, 0], secondary_label="errors")
    assert "a: 2 errors" in str(svg)
    assert "b: 0 errors" not in str(svg)
