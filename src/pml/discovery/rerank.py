"""A learned capability placed above the tools of the servers it is built on when it fits
as well.

    lift_over_their_tools(scores, relevance, prior, capabilities, tools)

The kind calibration (``pml.discovery.ranking``) lifts tools because a request that fits a
tool matches its long description less closely than a capability's intent. That holds
against unrelated capabilities, not against one built on that tool's server: a capability
that reads a log file and counts its errors is a closer answer to "how many errors in the
log" than the filesystem's ``read_text_file`` or ``directory_tree`` whenever its own
(uncalibrated) relevance is at least the tool's. Among the ``POOL`` best rows (every tool
scoring above a capability of the pool is in it), such a capability is given the tool's
score (a hair above, more of a hair the better it scored itself: capabilities lifted over
the same tool keep their order instead of tying), so it comes first; one that keeps failing
has its malus in ``prior`` and is lifted only if it still fits better. It costs a loop over
at most ``POOL`` rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt

POOL: Final = 20
ABOVE: Final = 1e-4

Scores = npt.NDArray[np.floating[Any]]


def lift_over_their_tools(
    scores: Scores,
    relevance: Scores,
    prior: Scores,
    capabilities: Sequence[tuple[int, Sequence[str]]],
    tools: Sequence[tuple[int, str]],
) -> None:
    """Raise (in place) each capability ``(row, servers it calls)`` to just above every
    tool ``(row, server)`` of one of those servers that scores above it while the
    capability fits at least as well uncalibrated (``relevance + prior``); capabilities
    raised over the same tool keep the order of their own scores."""
    for row, servers in capabilities:
        own = best = float(scores[row])
        fit = float(relevance[row] + prior[row])
        for tool, server in tools:
            if server in servers and scores[tool] > best and fit >= relevance[tool]:
                best = min(float(scores[tool]) + ABOVE * (1.0 + own), 1.0)
        scores[row] = best
