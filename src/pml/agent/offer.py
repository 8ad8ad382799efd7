"""The tools one turn offers its executor: only what the policy gate allows (SPEC §13).

    offer = await build_offer(parts, request, settings.agent)
    offer.specs()                 # OpenAI tool specs, sent with every executor round
    offer.offered["time__get_current_time"]     # OfferedTool(kind="upstream", ...)
    offer.withheld["filesystem__write_file"]    # Withheld(capability="file_write", rule=...)

Per turn, from the request's ``PolicyDecision``:

- upstream tools (``server__tool``, with ``[agent] upstream_tools``) whose permission
  capability the decision allows (or a ``server:tool`` exception names) and that no ``deny``
  rule refuses; ``memory_write`` tools are offered too, but calling one only records a
  proposal for the memory post-hook;
- named capabilities (``mcp__ns__action``) whose every tool the decision allows;
- ``pml_discover`` (``meta``), ``pml_execute`` (its runs are decided by the same policy:
  the turn's own request text is their intent, never one the model writes) and
  ``pml_remember`` (a memory proposal) when ``memory_write`` is allowed.

A known tool that is not offered is ``withheld`` with the rule that withholds it, so a
request for it is refused, audited and explained. At most ``MAX_OFFERED`` tools are offered
(PML's own first, then capabilities, then upstream tools); names must fit the OpenAI
function-name pattern.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Final, Literal, cast

from pml.policy.enforcer import PolicyEnforcer, RequestPolicy
from pml.registry.scope import Scope
from pml.sections_agent import AgentSettings
from pml.storage.database import Database
from pml.upstream.base import ToolSource

logger = logging.getLogger(__name__)

MAX_OFFERED: Final = 128
MAX_DESCRIPTION_CHARS: Final = 1024
FUNCTION_NAME: Final = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
REMEMBER_TOOL: Final = "pml_remember"
# What a snippet may never change: the intent its run is decided under is the turn's.
_EXECUTE_FIELDS: Final = ("code", "capability", "args", "name", "options")

ToolKind = Literal["upstream", "memory_write", "capability", "execute", "discover", "remember"]


@dataclass(frozen=True, slots=True)
class OfferedTool:
    """One tool the executor may call this turn."""

    name: str
    kind: ToolKind
    capability: str
    spec: dict[str, Any]
    server: str | None = None
    tool: str | None = None
    fqdn: str | None = None

    @property
    def address(self) -> str:
        """``server:tool`` for upstream tools, else PML's own name."""
        return f"{self.server}:{self.tool}" if self.server else f"pml:{self.name}"


@dataclass(frozen=True, slots=True)
class Withheld:
    """A known tool the gate keeps from this turn, and why."""

    name: str
    capability: str
    rule: str


@dataclass(slots=True)
class ToolOffer:
    """What one turn offers (``offered``) and keeps back (``withheld``)."""

    offered: dict[str, OfferedTool] = field(default_factory=dict[str, OfferedTool])
    withheld: dict[str, Withheld] = field(default_factory=dict[str, Withheld])

    def specs(self) -> list[dict[str, Any]]:
        return [tool.spec for tool in self.offered.values()]

    def add(self, tool: OfferedTool) -> None:
        if len(self.offered) < MAX_OFFERED and tool.name not in self.offered:
            self.offered[tool.name] = tool


# Named capabilities as tools: ``(name, description, input schema, fqdn, tools used)``.
CapabilityRow = tuple[str, str, Mapping[str, Any], str, list[str]]
CapabilityTools = Callable[[Scope], Awaitable[list[CapabilityRow]]]


@dataclass(frozen=True, slots=True)
class OfferParts:
    """What building an offer reads: the upstream tools (the gateway's start window, which
    waits for servers still starting), the enforcer and the capability tools."""

    pool: ToolSource
    enforcer: PolicyEnforcer
    capability_tools: CapabilityTools | None
    static_tools: Mapping[str, tuple[str, Mapping[str, Any]]]


async def build_offer(
    parts: OfferParts, request: RequestPolicy, settings: AgentSettings
) -> ToolOffer:
    """The tools of this turn (see module)."""
    offer = ToolOffer()
    enforcer = parts.enforcer
    allowed = request.decision.allowed
    if "meta" in allowed and "pml_discover" in parts.static_tools:
        description, schema = parts.static_tools["pml_discover"]
        offer.add(_pml_tool("pml_discover", "discover", description, schema))
    if "compute" in allowed and "pml_execute" in parts.static_tools:
        description, schema = parts.static_tools["pml_execute"]
        offer.add(_pml_tool("pml_execute", "execute", _execute_description(description), schema))
    if "memory_write" in allowed:
        offer.add(_pml_tool(REMEMBER_TOOL, "remember", _REMEMBER_DESCRIPTION, _REMEMBER_SCHEMA))
    if parts.capability_tools is not None:
        for name, description, schema, fqdn, used in await parts.capability_tools(request.scope):
            # a reference to another capability (no ``server:``) is checked when it runs
            checked = (t for t in used if ":" in t)
            blocked = next((t for t in checked if not _permitted(enforcer, request, t)[0]), None)
            if blocked is not None or not FUNCTION_NAME.fullmatch(name):
                capability = enforcer.capability_of(*_split(blocked)) if blocked else "unknown"
                rule = f"{request.decision.rule}: uses {blocked}" if blocked else "invalid name"
                offer.withheld[name] = Withheld(name, capability, rule)
                continue
            offer.add(
                OfferedTool(
                    name, "capability", "compute", _spec(name, description, schema), fqdn=fqdn
                )
            )
    if settings.upstream_tools:
        for upstream in await parts.pool.list_tools():
            name = upstream.pass_through_name
            address = upstream.address
            ok, capability, rule = _permitted(enforcer, request, address)
            if not FUNCTION_NAME.fullmatch(name):
                logger.debug("tool %s is not offered: its name is not a valid function name", name)
                continue
            if not ok:
                offer.withheld[name] = Withheld(name, capability, rule)
                continue
            kind: ToolKind = "memory_write" if capability == "memory_write" else "upstream"
            definition = upstream.definition
            spec = _spec(name, definition.description or "", definition.input_schema)
            offer.add(
                OfferedTool(
                    name, kind, capability, spec, server=upstream.server, tool=upstream.name
                )
            )
    return offer


def _permitted(
    enforcer: PolicyEnforcer, request: RequestPolicy, address: str
) -> tuple[bool, str, str]:
    """Whether the decision lets the executor see ``server:tool``, its capability, the rule."""
    server, tool = _split(address)
    capability = enforcer.capability_of(server, tool)
    decision = request.decision
    if enforcer.hides(request, server, tool):
        return False, capability, f"{decision.rule} forbids {capability} (or a deny rule)"
    if capability in decision.allowed:
        return True, capability, decision.rule
    if any(fnmatchcase(address, pattern) for pattern in decision.exceptions):
        return True, capability, decision.rule
    return False, capability, f"{decision.rule} does not allow {capability}"


def _split(address: str) -> tuple[str, str]:
    server, _, tool = address.partition(":")
    return server, tool


def _spec(name: str, description: str, schema: Mapping[str, Any] | None) -> dict[str, Any]:
    parameters: dict[str, Any] = dict(schema) if isinstance(schema, Mapping) else {}
    if parameters.get("type") != "object":
        parameters = {"type": "object", "properties": {}}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description[:MAX_DESCRIPTION_CHARS],
            "parameters": parameters,
        },
    }


def _pml_tool(
    name: str, kind: ToolKind, description: str, schema: Mapping[str, Any]
) -> OfferedTool:
    parameters: dict[str, Any] = dict(schema)
    if kind == "execute":  # the intent is the turn's; only the run's own fields are the model's
        properties = cast(Mapping[str, Any], parameters.get("properties") or {})
        kept = {k: v for k, v in properties.items() if k in _EXECUTE_FIELDS}
        parameters = {"type": "object", "properties": kept}
    capability = "memory_write" if kind == "remember" else "meta"
    return OfferedTool(name, kind, capability, _spec(name, description, parameters))


def _execute_description(description: str) -> str:
    return description + " Runs under this request's policy: tools it does not allow are refused."


_REMEMBER_DESCRIPTION: Final = (
    "Propose a fact to remember about the user or the project (one short sentence). It is "
    "not stored now: after your answer it is stored, or the user is asked first when it is "
    "sensitive. Never propose passwords, keys or tokens."
)
_REMEMBER_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {"fact": {"type": "string", "description": "The fact, in one sentence."}},
    "required": ["fact"],
}


async def capability_tool_rows(
    db: Database, listing: Mapping[str, tuple[str, Mapping[str, Any], str]]
) -> list[tuple[str, str, Mapping[str, Any], str, list[str]]]:
    """Each listed capability tool with the tools its code uses (one query)."""
    from pml.storage.discovery_repo import SqlDiscoveryRepository

    fqdns = [fqdn for _, _, fqdn in listing.values()]
    async with db.read() as conn:
        rows = await SqlDiscoveryRepository(conn).capabilities(fqdns)
    used = {row.fqdn: row.tools_used for row in rows}
    return [
        (name, description, schema, fqdn, used[fqdn])
        for name, (description, schema, fqdn) in listing.items()
        if fqdn in used
    ]
