"""More vectors per index row: a tool seen with its server, a capability's remembered intents.

    views = RowViews(dim=384)
    views.set(row=7, vectors=np.stack([v1, v2]))   # replaces what row 7 had
    views.raise_to(semantic, query_vector)         # semantic[row] = max(itself, its views)
    views.clear(7)

A row is found by whichever of its texts fits the request best: its semantic score is the
largest cosine over its main vector and its views. Views live in one matrix (slots reused
as rows come and go), so a search costs one matrix product over every view and one
``np.maximum.at``, whatever the number of rows; at most ``MAX_VIEWS`` per row.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import numpy.typing as npt

MAX_VIEWS: Final = 8

Vector = npt.NDArray[np.float32]
Scores = npt.NDArray[np.floating[Any]]


class RowViews:
    """Extra vectors of rows, searched together (see module)."""

    def __init__(self, dim: int, *, capacity: int = 64) -> None:
        self.dim = dim
        self._vectors = np.zeros((capacity, dim), dtype=np.float32)
        self._owner = np.full(capacity, -1, dtype=np.int64)  # -1: a free slot
        self._slots: dict[int, list[int]] = {}
        self._free: list[int] = []
        self._used = 0  # slots below this were handed out once

    def __len__(self) -> int:
        """How many views are held."""
        return sum(len(slots) for slots in self._slots.values())

    def of(self, row: int) -> int:
        """How many views ``row`` has."""
        return len(self._slots.get(row, ()))

    def set(self, row: int, vectors: Vector) -> None:
        """Replace ``row``'s views with ``vectors`` (shape ``(n, dim)``, the first
        ``MAX_VIEWS`` kept; ``n`` may be 0)."""
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise ValueError(f"views of shape {vectors.shape}, expected (n, {self.dim})")
        self.clear(row)
        kept = vectors[:MAX_VIEWS]
        if not len(kept):
            return
        slots = [self._slot() for _ in range(len(kept))]
        self._vectors[slots] = kept
        self._owner[slots] = row
        self._slots[row] = slots

    def clear(self, row: int) -> None:
        """Drop ``row``'s views (nothing happens if it has none)."""
        slots = self._slots.pop(row, None)
        if not slots:
            return
        self._owner[slots] = -1
        self._free.extend(slots)

    def raise_to(self, semantic: Scores, query_vector: Vector) -> None:
        """``semantic[row] = max(semantic[row], best cosine of row's views)``, in place."""
        if not self._slots:
            return
        owners = self._owner[: self._used]
        live = np.flatnonzero(owners >= 0)
        rows = owners[live]
        inside = rows < semantic.shape[0]
        cosines = np.einsum("ij,j->i", self._vectors[live[inside]], query_vector)
        np.maximum.at(semantic, rows[inside], cosines.astype(semantic.dtype))

    def _slot(self) -> int:
        if self._free:
            return self._free.pop()
        if self._used >= self._vectors.shape[0]:
            capacity = self._vectors.shape[0] * 2
            vectors = np.zeros((capacity, self.dim), dtype=np.float32)
            vectors[: self._used] = self._vectors[: self._used]
            owner = np.full(capacity, -1, dtype=np.int64)
            owner[: self._used] = self._owner[: self._used]
            self._vectors, self._owner = vectors, owner
        self._used += 1
        return self._used - 1
