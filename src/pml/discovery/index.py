"""The hybrid index: vectors, BM25 and a usage prior over tools and capabilities.

    index = HybridIndex(dim=384)
    index.put(entry, vector, terms("read_text_file Read a file"))
    hits = index.search(query_vector, terms("open a file"), scope, kind="all", limit=5)

Each row is an upstream tool (visible to every caller) or a capability (visible as the
registry decides: its own project, its creator for ``private``, its org for ``org``,
everyone for ``public``). A row may have more vectors than its main one (``views``: a tool
seen with its server, a capability's remembered intents); its cosine is the best of them.
A search masks what the caller may not see, then ranks by (``pml.discovery.ranking``)

    relevance = 0.7 · max(cosine, 0) + 0.3 · BM25 / BM25 ceiling of the query
    score = relevance (a tool's calibrated: 1 - (1 - relevance)²) + prior

where the prior is a capability's mild bonus for use and success, and its malus when it
is deprecated or keeps failing. Scores stay within 0..1 so that ``min_score`` means the
same thing whatever the catalog size. With ``kind="all"`` each kind keeps half of the
places for its rows that score at least ``KIND_SHARE_FLOOR`` of the best score, so neither
tools nor capabilities can crowd the other out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt

from pml.discovery.base import KindFilter
from pml.discovery.lexical import LexicalIndex
from pml.discovery.ranking import (
    LEXICAL_WEIGHT,
    NO_RUNS,
    VECTOR_WEIGHT,
    calibrate,
    capability_prior,
    usage_prior,
)
from pml.discovery.rerank import POOL, lift_over_their_tools
from pml.discovery.views import RowViews
from pml.registry.reliability import Reliability
from pml.registry.scope import Scope

Kind = Literal["tool", "capability"]
Vector = npt.NDArray[np.float32]
Scores = npt.NDArray[np.floating[Any]]
Rows = npt.NDArray[np.intp]

# with kind "all", each kind keeps half the places for rows scoring at least this share of
# the best score
KIND_SHARE_FLOOR: Final = 0.5

# visibility codes; tools are visible to every caller
_TOOL, _PRIVATE, _PROJECT, _ORG, _PUBLIC = range(5)
_VISIBILITY_CODES: Final = {
    "private": _PRIVATE,
    "project": _PROJECT,
    "org": _ORG,
    "public": _PUBLIC,
}


@dataclass(frozen=True, slots=True)
class Entry:
    """What one row stands for; ``payload`` is what results are rendered from."""

    key: str
    kind: Kind
    text_hash: str
    payload: object
    org: str = ""
    project: str = ""
    visibility: str = "public"
    created_by: str = ""
    usage_count: int = 0
    success_count: int = 0
    deprecated: bool = False
    # how its last runs went (a capability's; tools have none)
    recent: Reliability = NO_RUNS
    # the upstream servers a capability calls (``rerank``); a tool's own server
    servers: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Hit:
    """A ranked row: its entry, final score and the two signals it came from."""

    entry: Entry
    score: float
    semantic: float
    lexical: float


def _best(scores: Scores, rows: Rows, limit: int) -> Rows:
    """The ``limit`` best-scoring of ``rows`` (in no particular order)."""
    if rows.size <= limit:
        return rows
    return rows[np.argpartition(-scores[rows], limit - 1)[:limit]]


prior = usage_prior  # a capability's bonus for use and overall success


def _prior_of(entry: Entry) -> float:
    return capability_prior(
        entry.usage_count, entry.success_count, entry.recent, deprecated=entry.deprecated
    )


class _Codes:
    """Small integers for strings, so scope checks are array comparisons."""

    def __init__(self) -> None:
        self._codes: dict[str, int] = {}

    def code(self, value: str) -> int:
        return self._codes.setdefault(value, len(self._codes))

    def find(self, value: str) -> int:
        return self._codes.get(value, -2)  # never a stored code, nor a tool's -1


class HybridIndex:
    """Rows of tools and capabilities, searched by vector and BM25 together (see module)."""

    def __init__(self, dim: int, *, capacity: int = 256) -> None:
        self.dim = dim
        self._entries: list[Entry | None] = []
        self._rows: dict[str, int] = {}
        self._free: list[int] = []
        self._lexical = LexicalIndex()
        self._codes = _Codes()
        self._vectors = np.zeros((capacity, dim), dtype=np.float32)
        self._alive = np.zeros(capacity, dtype=np.bool_)
        self._visibility = np.zeros(capacity, dtype=np.int8)
        self._org = np.full(capacity, -1, dtype=np.int32)
        self._project = np.full(capacity, -1, dtype=np.int32)
        self._creator = np.full(capacity, -1, dtype=np.int32)
        self._prior = np.zeros(capacity, dtype=np.float32)
        self._views = RowViews(dim)

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, key: str) -> Entry | None:
        """The entry stored under ``key``."""
        row = self._rows.get(key)
        return self._entries[row] if row is not None else None

    def keys(self) -> list[str]:
        """Every key in the index."""
        return list(self._rows)

    def views(self, key: str) -> int:
        """How many vectors ``key`` has besides its main one."""
        row = self._rows.get(key)
        return self._views.of(row) if row is not None else 0

    def put(
        self,
        entry: Entry,
        vector: Vector | None,
        row_terms: Sequence[str] | None,
        views: Vector | None = None,
    ) -> None:
        """Add or replace ``entry`` with its (L2-normalised) vector and index terms; for an
        entry already here, ``None`` keeps its vector or its terms. ``views`` (shape
        ``(n, dim)``, L2-normalised) replaces its other vectors; ``None`` keeps them (a new
        entry has none)."""
        row = self._rows.get(entry.key)
        if row is None and (vector is None or row_terms is None):
            raise ValueError(f"a new entry needs a vector and terms: {entry.key}")
        if vector is not None and vector.shape != (self.dim,):
            raise ValueError(f"vector of shape {vector.shape}, expected ({self.dim},)")
        if views is not None and (views.ndim != 2 or views.shape[1] != self.dim):
            raise ValueError(f"views of shape {views.shape}, expected (n, {self.dim})")
        if row is None:
            row = self._free.pop() if self._free else self._append()
            self._rows[entry.key] = row
        self._entries[row] = entry
        if vector is not None:
            self._vectors[row] = vector
        self._alive[row] = True
        self._set_scope(row, entry)
        if row_terms is not None:
            self._lexical.put(row, row_terms)
        if views is not None:
            self._views.set(row, views)

    def set_stats(
        self, key: str, usage_count: int, success_count: int, recent: Reliability | None = None
    ) -> None:
        """New usage and success counts of a capability, and how its last runs went when
        given (its prior changes)."""
        row = self._rows.get(key)
        entry = self._entries[row] if row is not None else None
        if row is None or entry is None or entry.kind != "capability":
            return
        recent = entry.recent if recent is None else recent
        if (entry.usage_count, entry.success_count, entry.recent) != (
            usage_count,
            success_count,
            recent,
        ):
            entry = replace(
                entry, usage_count=usage_count, success_count=success_count, recent=recent
            )
            self._entries[row] = entry
            self._prior[row] = _prior_of(entry)

    def remove(self, key: str) -> None:
        """Drop ``key`` (nothing happens if it is not there)."""
        row = self._rows.pop(key, None)
        if row is None:
            return
        self._entries[row] = None
        self._alive[row] = False
        self._lexical.remove(row)
        self._views.clear(row)
        self._free.append(row)

    def search(
        self,
        query_vector: Vector,
        query_terms: Sequence[str],
        scope: Scope,
        *,
        kind: KindFilter = "all",
        limit: int = 5,
        min_score: float = 0.0,
    ) -> list[Hit]:
        """The best ``limit`` rows ``scope`` may see, best first (ties by key)."""
        size = len(self._entries)
        if size == 0 or limit <= 0:
            return []
        # einsum, not BLAS: OpenBLAS's threads make a 10 000-row product's p95 ~10 ms on a
        # busy 2-core machine (p50 0.3 ms); einsum's single loop is 0.6-0.7 ms at p50 and p95
        semantic = np.einsum("ij,j->i", self._vectors[:size], query_vector)
        self._views.raise_to(semantic, query_vector)
        np.maximum(semantic, 0.0, out=semantic)
        lexical = self._lexical.scores(query_terms, size=size)
        ceiling = self._lexical.ceiling(query_terms)
        if ceiling > 0:
            lexical /= ceiling
            np.minimum(lexical, 1.0, out=lexical)
        relevance = VECTOR_WEIGHT * semantic + LEXICAL_WEIGHT * lexical
        scores = relevance.copy()
        calibrate(scores, self._visibility[:size] == _TOOL)
        scores += self._prior[:size]
        np.clip(scores, 0.0, 1.0, out=scores)
        mask = self._visible(scope, size, kind)
        scores[~mask] = -1.0
        if kind == "all":
            self._over_their_tools(scores, relevance)
        candidates = np.flatnonzero(scores >= max(min_score, 0.0))
        if kind == "all" and limit >= 2:
            rows = self._mixed(scores, candidates, limit)
        else:
            rows = _best(scores, candidates, limit).tolist()
        hits: list[Hit] = []
        # by the exact score: rows within a rounding of each other keep their order
        rows = sorted(rows, key=lambda row: (-float(scores[row]), self._key_of(row)))
        for row in rows:
            entry = self._entries[row]
            if entry is not None:
                hits.append(
                    Hit(
                        entry,
                        round(float(scores[row]), 4),
                        float(semantic[row]),
                        float(lexical[row]),
                    )
                )
        return hits

    # -- internals -----------------------------------------------------------------------

    def _key_of(self, row: int) -> str:
        entry = self._entries[row]
        return entry.key if entry is not None else ""

    def _over_their_tools(self, scores: Scores, relevance: Scores) -> None:
        """A capability above the tools of the servers it calls when it fits as well
        (``rerank``)."""
        capabilities: list[tuple[int, tuple[str, ...]]] = []
        tools: list[tuple[int, str]] = []
        for row in _best(scores, np.flatnonzero(scores >= 0.0), POOL):
            entry = self._entries[int(row)]
            if entry is None or not entry.servers:
                continue
            if entry.kind == "tool":
                tools.append((int(row), entry.servers[0]))
            else:
                capabilities.append((int(row), entry.servers))
        if capabilities and tools:
            lift_over_their_tools(scores, relevance, self._prior, capabilities, tools)

    def _mixed(self, scores: Scores, candidates: Rows, limit: int) -> list[int]:
        """The best ``limit`` rows with each kind given half the places when it has a row
        scoring at least ``KIND_SHARE_FLOOR`` of the best one: a tool and a learned
        capability are scored from different kinds of text (a tool's long description, a
        capability's short intent), so neither kind may push every row of the other out of
        a short list."""
        is_tool = self._visibility[candidates] == _TOOL
        tools = _best(scores, candidates[is_tool], limit)
        capabilities = _best(scores, candidates[~is_tool], limit)
        merged = np.concatenate([tools, capabilities])
        if merged.size == 0:
            return []
        floor = float(scores[merged].max()) * KIND_SHARE_FLOOR
        reserved = limit // 2
        chosen: list[int] = []
        for group in (tools, capabilities):
            ordered = group[np.argsort(-scores[group], kind="stable")]
            chosen.extend(int(row) for row in ordered[:reserved] if scores[row] >= floor)
        rest = [int(row) for row in merged[np.argsort(-scores[merged], kind="stable")]]
        for row in rest:
            if len(chosen) >= limit:
                break
            if row not in chosen:
                chosen.append(row)
        return chosen

    def _append(self) -> int:
        row = len(self._entries)
        self._entries.append(None)
        if row >= self._vectors.shape[0]:
            self._grow(max(row * 2, 256))
        return row

    def _grow(self, capacity: int) -> None:
        def grown(array: npt.NDArray[np.generic], fill: float) -> npt.NDArray[np.generic]:
            shape = (capacity, *array.shape[1:])
            bigger = np.full(shape, fill, dtype=array.dtype)
            bigger[: array.shape[0]] = array
            return bigger

        self._vectors = grown(self._vectors, 0.0).astype(np.float32)
        self._alive = grown(self._alive, False).astype(np.bool_)
        self._visibility = grown(self._visibility, 0).astype(np.int8)
        self._org = grown(self._org, -1).astype(np.int32)
        self._project = grown(self._project, -1).astype(np.int32)
        self._creator = grown(self._creator, -1).astype(np.int32)
        self._prior = grown(self._prior, 0.0).astype(np.float32)

    def _set_scope(self, row: int, entry: Entry) -> None:
        if entry.kind == "tool":
            self._visibility[row] = _TOOL
            self._org[row] = self._project[row] = self._creator[row] = -1
            self._prior[row] = 0.0
            return
        self._visibility[row] = _VISIBILITY_CODES.get(entry.visibility, _PRIVATE)
        self._org[row] = self._codes.code(entry.org)
        self._project[row] = self._codes.code(entry.project)
        self._creator[row] = self._codes.code(entry.created_by)
        self._prior[row] = _prior_of(entry)

    def _visible(self, scope: Scope, size: int, kind: KindFilter) -> npt.NDArray[np.bool_]:
        visibility = self._visibility[:size]
        same_org = self._org[:size] == self._codes.find(scope.org)
        same_project = same_org & (self._project[:size] == self._codes.find(scope.project))
        own = same_project & (
            (visibility != _PRIVATE) | (self._creator[:size] == self._codes.find(scope.user))
        )
        capability = own | (same_org & (visibility == _ORG)) | (visibility == _PUBLIC)
        tool = visibility == _TOOL
        if kind == "tool":
            allowed = tool
        elif kind == "capability":
            allowed = capability & ~tool
        else:
            allowed = tool | capability
        return allowed & self._alive[:size]
