"""A BM25 index over rows that come and go, scored into one numpy array per query.

    index = LexicalIndex()
    index.put(0, terms("read_text_file Read a file"))
    scores = index.scores(terms("read file"), size=1)   # float32 array, one score per row
    shares = scores / index.ceiling(terms("read file"))  # 0..1: how much of the query matched

Postings are kept per term as ``{row: term frequency}``; a query turns the postings of its
terms into numpy arrays (cached until that term changes) and adds their BM25 weights, so a
query costs a few array operations per query term whatever the number of rows.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

K1: Final = 1.2
B: Final = 0.75

Scores = npt.NDArray[np.float32]
_Postings = tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]


class LexicalIndex:
    """BM25 (k1 = 1.2, b = 0.75) over rows identified by integers."""

    def __init__(self) -> None:
        self._postings: dict[str, dict[int, int]] = {}
        self._lengths: dict[int, int] = {}
        self._row_terms: dict[int, tuple[str, ...]] = {}
        self._total_length = 0
        self._arrays: dict[str, _Postings] = {}

    def __len__(self) -> int:
        return len(self._lengths)

    def put(self, row: int, row_terms: Sequence[str]) -> None:
        """Index ``row`` with these terms (replacing what it had)."""
        self.remove(row)
        counts = Counter(row_terms)
        for term, count in counts.items():
            self._postings.setdefault(term, {})[row] = count
            self._arrays.pop(term, None)
        self._lengths[row] = len(row_terms)
        self._row_terms[row] = tuple(counts)
        self._total_length += len(row_terms)

    def remove(self, row: int) -> None:
        """Forget ``row`` (nothing happens if it is not indexed)."""
        length = self._lengths.pop(row, None)
        if length is None:
            return
        self._total_length -= length
        for term in self._row_terms.pop(row, ()):
            rows = self._postings[term]
            del rows[row]
            self._arrays.pop(term, None)
            if not rows:
                del self._postings[term]

    def scores(self, query_terms: Sequence[str], *, size: int) -> Scores:
        """BM25 score of every row ``0 .. size-1`` for the query (0 where nothing matches)."""
        result = np.zeros(size, dtype=np.float32)
        count = len(self._lengths)
        if not count or not query_terms:
            return result
        average = max(self._total_length / count, 1.0)
        for term in dict.fromkeys(query_terms):
            postings = self._postings.get(term)
            if not postings:
                continue
            idf = math.log(1.0 + (count - len(postings) + 0.5) / (len(postings) + 0.5))
            rows, weights = self._weights(term, postings, average)
            inside = rows < size
            np.add.at(result, rows[inside], (weights[inside] * idf).astype(np.float32))
        return result

    def ceiling(self, query_terms: Sequence[str]) -> float:
        """The score of an average-length row holding each query term once: dividing by it
        gives a share (about 0..1, capped by the caller) that grows with how much of the
        query a row covers (a term no row has counts as the rarest possible, so matching
        one word of a long query stays small)."""
        count = len(self._lengths)
        total = 0.0
        for term in dict.fromkeys(query_terms):
            rows = len(self._postings.get(term, ()))
            total += math.log(1.0 + (count - rows + 0.5) / (rows + 0.5))
        return total

    def _weights(self, term: str, postings: dict[int, int], average: float) -> _Postings:
        """Rows of ``term`` and their BM25 term weights (without idf), cached per term."""
        cached = self._arrays.get(term)
        if cached is None:
            rows = np.fromiter(postings.keys(), dtype=np.int64, count=len(postings))
            tf = np.fromiter(postings.values(), dtype=np.float32, count=len(postings))
            lengths = np.fromiter(
                (self._lengths[r] for r in postings), dtype=np.float32, count=len(postings)
            )
            # The length normalisation uses the average at caching time: it drifts slowly
            # as rows are added and is refreshed whenever the term's rows change.
            norm = K1 * (1.0 - B + B * lengths / average)
            cached = (rows, (tf * (K1 + 1.0) / (tf + norm)).astype(np.float32))
            self._arrays[term] = cached
        return cached
