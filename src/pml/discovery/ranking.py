"""How discovery turns a row's signals into one score: relevance, kind calibration, prior.

    relevance = VECTOR_WEIGHT * semantic + LEXICAL_WEIGHT * lexical     # both 0..1
    calibrate(relevance, is_tool)                                       # in place, see below
    score = relevance + prior                                           # clipped to 0..1

**Kind calibration.** A tool is embedded from a long description written by its author, a
capability from the short intent an agent stated; a request that fits a tool matches its
description less closely (cosine ~0.4 on the development set) than a request that fits a
capability matches its intent (~0.65). Left raw, a learned capability whose intent shares
a few words with the request outranks the right tool. A tool's relevance r is therefore
mapped to ``1 - (1 - r) ** TOOL_LIFT`` (about twice r for a weak match, 1 at 1): one
parameter, chosen on the development set of ``benchmarks/discovery.py`` among affine,
scaled, power and this map, with the condition that a weak tool match (r = 0.1) stays
under 0.2 — an affine floor or a square root scored higher on that set (recall@5 0.93 and
0.94) but let every unrelated tool outrank a fitting capability of a small library. The
map keeps 0 at 0, 1 at 1 and the order of tools among themselves.

**Prior.** A capability's mild bonus for use and overall success, a malus when deprecated,
and the signal of its last runs (``pml.registry.reliability``): each recent failure costs a
little, a slow one loses a little, and one that keeps failing loses ``FAILING_PENALTY`` so a
reliable alternative that fits nearly as well comes first. Recent runs only ever lower a
capability (its overall success is the usage prior's bonus already): a library whose
capabilities all work is not lifted above the tools.
"""

from __future__ import annotations

import math
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from pml.registry.reliability import Reliability

VECTOR_WEIGHT: Final = 0.7
LEXICAL_WEIGHT: Final = 0.3
# a tool's relevance r becomes 1 - (1 - r) ** TOOL_LIFT (see module)
TOOL_LIFT: Final = 2.0
USAGE_PRIOR: Final = 0.015
SUCCESS_PRIOR: Final = 0.03
USAGE_SATURATION: Final = 1000
# a deprecated capability's malus: it still answers, after what replaces it
DEPRECATED_PENALTY: Final = 0.15
# the recent runs: their failure rate costs up to RECENT_FAILURE_PENALTY, a slow one loses up
# to LATENCY_PENALTY (from 0 at 100 ms to all of it at 10 s, log scale), and one that keeps
# failing loses FAILING_PENALTY on top
RECENT_FAILURE_PENALTY: Final = 0.03
LATENCY_PENALTY: Final = 0.02
FAILING_PENALTY: Final = 0.12
NO_RUNS: Final = Reliability(0, 0, 0.0)

Scores = npt.NDArray[np.floating[Any]]


def calibrate(relevance: Scores, is_tool: npt.NDArray[np.bool_]) -> None:
    """Lift each tool's relevance (0..1) by ``TOOL_LIFT`` (in place; see module)."""
    relevance[is_tool] = 1.0 - np.power(1.0 - np.clip(relevance[is_tool], 0.0, 1.0), TOOL_LIFT)


def usage_prior(usage_count: int, success_count: int) -> float:
    """More use (log scale) and a better smoothed overall success rate: a mild bonus."""
    if usage_count <= 0:
        return 0.0
    usage = min(math.log1p(usage_count) / math.log1p(USAGE_SATURATION), 1.0)
    success = (success_count + 1) / (usage_count + 2)
    return USAGE_PRIOR * usage + SUCCESS_PRIOR * (2 * success - 1)


def reliability_prior(recent: Reliability) -> float:
    """The recent runs' part of the prior: 0 or less (0 before any run)."""
    if recent.runs <= 0:
        return 0.0
    bonus = -RECENT_FAILURE_PENALTY * (recent.runs - recent.successes) / recent.runs
    if recent.latency_ms > 100:
        bonus -= LATENCY_PENALTY * min(math.log10(recent.latency_ms / 100) / 2, 1.0)
    if recent.failing:
        bonus -= FAILING_PENALTY
    return bonus


def capability_prior(
    usage_count: int, success_count: int, recent: Reliability, *, deprecated: bool
) -> float:
    """Everything but relevance that places a capability (see module)."""
    bonus = usage_prior(usage_count, success_count) + reliability_prior(recent)
    return bonus - DEPRECATED_PENALTY if deprecated else bonus
