"""The analyses of recent snippets, bounded by count and by the text they hold.

    cache = AnalysisCache(entries=4096, max_chars=16_000_000)
    analysis = cache.get(code) or cache.put(code, analyze_snippet(code, ...))

A hand-off and the trace that ends it share one analysis only if it is still here when the
trace arrives: ``pml connect`` sends it after the code ran, about a second later, and a busy
gateway hands off hundreds of snippets in that second. So the cache keeps thousands of
small analyses, and the ``max_chars`` bound keeps a stream of large snippets from holding
more than that much text (an analysis is weighed as its code, its lifted code and the
literals it lifted). The least recently used go first; one analysis heavier than an eighth
of the bound is returned but not kept. Safe to use from several threads.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from pml.analysis.snippet import SnippetAnalysis

ENTRIES = 4096
MAX_CHARS = 16_000_000
_OVERHEAD_CHARS = 512  # the objects around the text: calls, parameters, schemas


def weight(analysis: SnippetAnalysis) -> int:
    """The text an analysis holds, in characters (its lifted literals are its code's)."""
    return 2 * len(analysis.code) + len(analysis.lifted_code) + _OVERHEAD_CHARS


class AnalysisCache:
    """A least-recently-used map from code to its analysis (see the module)."""

    def __init__(self, *, entries: int = ENTRIES, max_chars: int = MAX_CHARS) -> None:
        self._entries = entries
        self._max_chars = max_chars
        self._held: OrderedDict[str, tuple[SnippetAnalysis, int]] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    @property
    def chars(self) -> int:
        """The weight held now."""
        return self._chars

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, code: object) -> bool:  # no use: the order stays
        return code in self._held

    def get(self, code: str) -> SnippetAnalysis | None:
        with self._lock:
            found = self._held.get(code)
            if found is None:
                return None
            self._held.move_to_end(code)
            return found[0]

    def put(self, code: str, analysis: SnippetAnalysis) -> SnippetAnalysis:
        """Keep ``analysis`` (unless it is too heavy) and return it."""
        heavy = weight(analysis)
        if heavy * 8 > self._max_chars:
            return analysis
        with self._lock:
            former = self._held.pop(code, None)
            if former is not None:
                self._chars -= former[1]
            self._held[code] = (analysis, heavy)
            self._chars += heavy
            while len(self._held) > self._entries or self._chars > self._max_chars:
                _, (_, dropped) = self._held.popitem(last=False)
                self._chars -= dropped
        return analysis
