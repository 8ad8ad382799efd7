"""An embedder for discovery tests: the hashing embedder (deterministic, no model needed),
recording every text it is asked to embed."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from pml.discovery.embedder import Embedder, HashingEmbedder


class Counting:
    """The hashing embedder (deterministic, no model needed), counting what it embeds."""

    def __init__(self) -> None:
        self.inner: Embedder = HashingEmbedder()
        self.model_id = self.inner.model_id
        self.dim = self.inner.dim
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        self.texts.extend(texts)
        return self.inner.embed(texts)
