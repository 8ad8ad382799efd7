"""Turning settings into the objects core code takes (entry points call these).

scope = scope_of(settings)              # Scope("local", "default", "<os user>")
registry = CapabilityRegistry(db, routing=routing_rules(settings))
remember_intents(recorder, registry, load_embedder("auto"))   # intents by meaning, announced
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from pml.config import RESERVED_SERVER_NAME, Settings
from pml.registry.changes import INTENTS_CHANGED
from pml.registry.scope import Scope
from pml.registry.service import RoutingRules

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from pml.discovery.embedder import Embedder
    from pml.execution.recorder import UsageRecorder
    from pml.registry.service import CapabilityRegistry


def scope_of(settings: Settings) -> Scope:
    """The caller's scope on this machine: ``[scope]`` and the configured or OS user."""
    return Scope(settings.scope.org, settings.scope.project, settings.scope.effective_user())


def routing_rules(settings: Settings) -> RoutingRules:
    """The ``[routing]`` patterns as the registry takes them; PML's own tools (``pml:cap_list``
    ..., called from snippets) run in the gateway and never make code local."""
    cloud = (*settings.routing.cloud, RESERVED_SERVER_NAME)
    return RoutingRules(cloud=cloud, local=tuple(settings.routing.local))


# Changes announced one by one per write at most; the rest reach discovery through its
# incremental read (``capabilities_since`` follows new intents too).
MAX_ANNOUNCED_INTENTS: Final = 100


def remember_intents(
    recorder: UsageRecorder, registry: CapabilityRegistry, embedder: Embedder | None
) -> None:
    """The usage recorder compares new intents by meaning with ``embedder`` (in its batched
    write, never on an answer's path), and announces each capability whose remembered
    intents changed (``INTENTS_CHANGED``: this process's discovery at once, other replicas
    through the registry's ``NOTIFY``)."""
    recorder.intent_meaning = EmbeddedMeaning(embedder) if embedder is not None else None

    async def announce(fqdns: set[str]) -> None:
        by_project: dict[tuple[str, str], list[str]] = {}
        for fqdn in sorted(fqdns)[:MAX_ANNOUNCED_INTENTS]:
            org, project = fqdn.split(".", 2)[:2]
            by_project.setdefault((org, project), []).append(fqdn)
        for (org, project), changed in by_project.items():  # one NOTIFY per project
            first, *rest = changed
            await registry.announce(Scope(org, project, "pml"), first, INTENTS_CHANGED, *rest)

    recorder.on_intents_changed(announce)


class EmbeddedMeaning:
    """``MeaningCheck`` by an embedding model: the cosine of its unit vectors, computed in a
    worker thread; vectors are cached by text (the kept intents come back at every new one)."""

    def __init__(self, embedder: Embedder, *, cache_size: int = 4096) -> None:
        self._embedder = embedder
        self._cache_size = cache_size
        self._vectors: OrderedDict[str, NDArray[np.float32]] = OrderedDict()

    async def similarities(self, texts: Sequence[str]) -> list[list[float]]:
        import numpy as np

        from pml.discovery.background import embed_in_background

        found: dict[str, NDArray[np.float32]] = {}
        missing: list[str] = []
        for text in dict.fromkeys(texts):
            vector = self._vectors.get(text)
            if vector is None:
                missing.append(text)
            else:
                found[text] = vector
        if missing:
            made = await embed_in_background(self._embedder.embed, missing)
            for text, vector in zip(missing, made, strict=True):
                found[text] = vector
        for text, vector in found.items():
            self._vectors[text] = vector
            self._vectors.move_to_end(text)
        while len(self._vectors) > self._cache_size:
            self._vectors.popitem(last=False)
        if not texts:
            return []
        matrix = np.stack([found[text] for text in texts]).astype(np.float64)
        cosines: list[list[float]] = np.clip(matrix @ matrix.T, -1.0, 1.0).tolist()
        return cosines
