"""The discovery seam: what answers ``pml_discover`` for a caller scope.

    results = await discoverer.discover(scope, "read a json file", kind="tool", limit=5)

``pml.discovery.service.DiscoveryService`` is the implementation; the gateway's tool and
the suggestion mode of ``pml_execute`` take anything with this shape.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pml.registry.scope import Scope

KindFilter = Literal["tool", "capability", "all"]


class Discoverer(Protocol):
    """Ranks the tools and capabilities ``scope`` may see for an intent (SPEC §7)."""

    async def discover(
        self,
        scope: Scope,
        intent: str,
        *,
        kind: KindFilter = "all",
        limit: int = 5,
        min_score: float = 0.0,
    ) -> list[dict[str, Any]]:
        """Results best first, each with everything needed to call it."""
        ...
