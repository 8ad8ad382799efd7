"""Index entries and vectors shared by the ranking tests (8 dimensions, one scope)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from pml.discovery.index import Entry
from pml.registry.scope import Scope

DIM = 8
ME = Scope("acme", "web", "erwan")


def axis(i: int) -> npt.NDArray[np.float32]:
    vector = np.zeros(DIM, dtype=np.float32)
    vector[i] = 1.0
    return vector


def capability_entry(key: str, **fields: Any) -> Entry:
    scope: dict[str, Any] = {
        "org": "acme",
        "project": "web",
        "visibility": "project",
        "created_by": "erwan",
    }
    return Entry(key, "capability", key, None, **(scope | fields))
