"""A new version whose every line differs from the last: its change summary is counted by
line blocks, never by ``difflib.ndiff``'s character pairing (red team: two 90 KB versions
took it minutes of the event loop inside the write transaction; 600 lines overflowed the
recursion limit)."""

from __future__ import annotations

import pytest

from pml.registry.records import summarise_change
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry
from samples import make

pytestmark = pytest.mark.anyio


def _code(version: int, lines: int) -> str:
    # similar lines (one character apart): what ndiff pairs character by character
    return "\n".join(f"v{version}_{i} = {i}" for i in range(lines)) + "\nreturn 1"


async def test_a_version_changing_every_line_of_large_code_is_summarised(
    registry: CapabilityRegistry, scope: Scope
) -> None:
    await make(registry, scope, _code(1, 600), name="hist")

    updated = await registry.update_code(scope, "hist", CapabilityDraft(code=_code(2, 600)))
    _, versions, _ = await registry.history(scope, "hist")

    assert updated.version == 2
    assert versions[0].change_summary == "code changed: +600 -600 lines"


@pytest.mark.parametrize(
    ("old", "new", "summary"),
    [
        ("a\nb\nc", "a\nB\nc\nd", "code changed: +2 -1 lines"),
        ("a\nb", "a\nb", "code changed: +0 -0 lines"),
        ("", "x\ny", "code changed: +2 -0 lines"),
        ("x" * 100_000, "y" * 100_000, "code changed: +1 -1 lines"),  # one 100 KB line
    ],
)
def test_change_summaries_count_changed_lines(old: str, new: str, summary: str) -> None:
    assert summarise_change(old, new) == summary


def test_summarising_two_large_versions_that_share_no_line_counts_every_line() -> None:
    old, new = _code(1, 5_500), _code(2, 5_500)  # ~90 KB each, under max_code_bytes

    assert summarise_change(old, new) == "code changed: +5500 -5500 lines"
