"""The gateway's own tools that a service answers: ``pml_discover`` and ``cap_curate``.

    handlers = service_handlers(discovery=discovery, curation=curation)
    tools = GatewayTools(..., handlers=handlers)

Each handler validates its arguments with the tool's input model (``INVALID_INPUT`` naming
every bad field) before the service sees them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from pml.discovery.base import Discoverer
from pml.gateway.schemas import CurateParams, DiscoverParams
from pml.gateway.tools import ToolHandler
from pml.registry.scope import Scope
from pml.registry.tools import parse_params


class Curator(Protocol):
    """What answers ``cap_curate`` (``pml.curation.service.CurationService``)."""

    async def curate(self, scope: Scope, params: CurateParams) -> dict[str, Any]: ...


def service_handlers(
    *, discovery: Discoverer | None = None, curation: Curator | None = None
) -> dict[str, ToolHandler]:
    """Handlers for the services given (a tool without one answers ``NOT_AVAILABLE``)."""
    handlers: dict[str, ToolHandler] = {}
    if discovery is not None:
        found = discovery

        async def discover(scope: Scope, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
            params = parse_params(DiscoverParams, arguments)
            results = await found.discover(
                scope,
                params.intent,
                kind=params.kind,
                limit=params.limit,
                min_score=params.min_score,
            )
            return {"results": results}

        handlers["pml_discover"] = discover
    if curation is not None:
        curator = curation

        async def curate(scope: Scope, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
            return await curator.curate(scope, parse_params(CurateParams, arguments))

        handlers["cap_curate"] = curate
    return handlers
