"""Routing inheritance: where a capability may run (SPEC §8).

``routing = explicit ?? (any tool local → "local") ?? "cloud"``; no tools → ``"cloud"``. A
server is cloud only when a ``[routing] cloud`` pattern names it and no ``local`` pattern
does; everything else is local (secure default). A capability used by a capability
contributes its own routing, and an unknown one counts as local.

Example::

    >>> server_routing("tavily", cloud_patterns=["tavily", "memory*"])
    'cloud'
    >>> resolve_routing(["tavily:search", "filesystem:read_file"], cloud_patterns=["tavily"])
    'local'
    >>> resolve_routing([], cloud_patterns=[])
    'cloud'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Literal

from pml.errors import InvalidInput
from pml.registry.fqdn import is_fqdn, message_value
from pml.registry.names import capability_tool_parts, server_of

Routing = Literal["local", "cloud"]
ROUTINGS: tuple[Routing, ...] = ("local", "cloud")


def server_routing(
    server: str, cloud_patterns: Sequence[str], local_patterns: Sequence[str] = ()
) -> Routing:
    """``cloud`` if a cloud glob names ``server`` and no local glob does, else ``local``."""
    if not server:
        return "local"
    if any(fnmatchcase(server, pattern) for pattern in local_patterns):
        return "local"
    if any(fnmatchcase(server, pattern) for pattern in cloud_patterns):
        return "cloud"
    return "local"


def _is_capability_ref(ref: str) -> bool:
    return is_fqdn(ref) or capability_tool_parts(ref) is not None


def _tool_routing(
    ref: str,
    cloud_patterns: Sequence[str],
    local_patterns: Sequence[str],
    capability_routing: Mapping[str, Routing],
) -> Routing:
    if not isinstance(ref, str):  # pyright: ignore[reportUnnecessaryIsInstance]
        return "local"
    if _is_capability_ref(ref):
        known = capability_routing.get(ref)
        return known if known in ROUTINGS else "local"
    server = server_of(ref)
    if server is None:
        return "local"
    return server_routing(server, cloud_patterns, local_patterns)


def resolve_routing(
    tools_used: Sequence[str],
    *,
    cloud_patterns: Sequence[str],
    local_patterns: Sequence[str] = (),
    explicit: Routing | None = None,
    capability_routing: Mapping[str, Routing] | None = None,
) -> Routing:
    """The routing of code using ``tools_used``: explicit, else local if any tool is local."""
    if explicit is not None:
        if explicit not in ROUTINGS:
            raise InvalidInput(
                f'routing must be "local" or "cloud", not "{message_value(explicit)}"',
                field="routing",
            )
        return explicit
    known = capability_routing or {}
    for ref in tools_used:
        if _tool_routing(ref, cloud_patterns, local_patterns, known) == "local":
            return "local"
    return "cloud"
