"""Turning settings into the objects core code takes (entry points call these).

scope = scope_of(settings)              # Scope("local", "default", "<os user>")
registry = CapabilityRegistry(db, routing=routing_rules(settings))
"""

from __future__ import annotations

from pml.config import RESERVED_SERVER_NAME, Settings
from pml.registry.scope import Scope
from pml.registry.service import RoutingRules


def scope_of(settings: Settings) -> Scope:
    """The caller's scope on this machine: ``[scope]`` and the configured or OS user."""
    return Scope(settings.scope.org, settings.scope.project, settings.scope.effective_user())


def routing_rules(settings: Settings) -> RoutingRules:
    """The ``[routing]`` patterns as the registry takes them; PML's own tools (``pml:cap_list``
    ..., called from snippets) run in the gateway and never make code local."""
    cloud = (*settings.routing.cloud, RESERVED_SERVER_NAME)
    return RoutingRules(cloud=cloud, local=tuple(settings.routing.local))
