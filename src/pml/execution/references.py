"""What each ``mcp.<a>.<b>`` of a snippet designates, checked before anything runs.

    plan = await plan_references(analysis.calls, scope=scope, registry=registry, pool=pool)
    plan.targets[("filesystem", "read_file")]   # Target(kind="tool", server=..., tool=...)
    plan.capability_fqdns            # {("fs", "read_json"): "acme.web.fs.read_json.ab12"}

``mcp.<server>.<tool>`` names an upstream tool (a tool whose name is not an identifier is
also reachable with ``-``/``.`` written as ``_`` when that is unambiguous on the server);
``mcp.<namespace>.<action>`` a named capability (its tool name ``mcp__ns__action``);
``mcp["<fqdn or name>"]`` a capability; ``mcp.pml.<tool>`` one of PML's read-only registry
tools, when the run offers them (``pml_tools``; ``pml.execution.registry_calls``). A name
found only under another spelling (``mcp.fs.readJson`` for ``mcp__fs__read_json``; see
``pml.execution.spellings``) is used when unique and listed in ``Plan.respellings``.
Anything else is ``UNKNOWN_TOOL``, all of them listed at once with close matches.

A server a PML client runs on the user's machine (``ClientCaller.servers``) is planned as a
client tool (``on_client``) when the gateway does not run it as a cloud server: the client
checks its tools when it runs the code. A server that ``[routing] local`` names and the
gateway does not run can only be reached through a PML client: any other caller gets
``CLIENT_TOOLS_REQUIRE_CLIENT`` saying how to connect.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Literal

from pml.analysis.snippet import CallSite
from pml.errors import ClientToolsRequireClient, NotFound, UnknownTool, UpstreamUnavailable
from pml.execution.clients import HOW_TO_CONNECT, ClientCaller
from pml.execution.registry_calls import (
    NOT_ON_CLIENT,
    ONLY_READ_ONLY,
    PML_NAMESPACE,
    ScopedRegistryTools,
    SnippetRegistryTools,
    registry_tool_named,
)
from pml.execution.spellings import (
    Respelling,
    call_spelling,
    capability_variants,
    folded_matches,
    notice,
)
from pml.registry.fqdn import is_fqdn
from pml.registry.models import CapabilityRecord, RoutingRules
from pml.registry.names import capability_tool_parts
from pml.registry.routing import server_routing
from pml.registry.scope import Scope
from pml.registry.service import CapabilityRegistry
from pml.upstream.base import UpstreamPool

MAX_SUGGESTIONS = 3


@dataclass(frozen=True, slots=True)
class Target:
    """An upstream tool (``server``, ``tool``) or a capability (``fqdn``); ``on_client``: a
    tool of a server the calling PML client runs."""

    kind: Literal["tool", "capability"]
    server: str = ""
    tool: str = ""
    fqdn: str = ""
    on_client: bool = False

    @property
    def address(self) -> str:
        """``server:tool`` or the capability's FQDN (what ``toolsUsed`` lists)."""
        return f"{self.server}:{self.tool}" if self.kind == "tool" else self.fqdn

    @property
    def in_gateway(self) -> bool:
        """One of PML's own tools (``mcp.pml.<tool>``), answered by the gateway itself."""
        return self.kind == "tool" and self.server == PML_NAMESPACE and not self.on_client


@dataclass(frozen=True, slots=True)
class Plan:
    """Every reference of one snippet, resolved."""

    targets: dict[tuple[str, str], Target] = field(default_factory=dict[tuple[str, str], Target])
    respellings: tuple[Respelling, ...] = ()
    # What answers its ``mcp.pml.<tool>`` calls, for the scope it was planned in (None: the
    # plan was made where PML's tools are not offered, and such a call is refused).
    registry_tools: ScopedRegistryTools | None = field(default=None, compare=False)

    @property
    def capability_fqdns(self) -> dict[tuple[str, str], str]:
        """``(namespace, action)`` references to capabilities, to store as ``mcp["<fqdn>"]``."""
        return {
            key: target.fqdn
            for key, target in self.targets.items()
            if target.kind == "capability" and key[0]
        }

    @property
    def client_tools(self) -> list[str]:
        """``server:tool`` of every tool the calling PML client must run."""
        return [target.address for target in self.targets.values() if target.on_client]

    def notice(self) -> dict[str, Any]:
        """The answer fields naming the canonical spelling of each respelled reference."""
        return notice(self.respellings)


def tool_name_on(server_tools: Sequence[str], name: str) -> str | None:
    """``name`` as the server spells it: exact, or with ``_`` for ``-``/``.`` if unambiguous."""
    if name in server_tools:
        return name
    spelled = [tool for tool in server_tools if _identifier(tool) == name]
    return spelled[0] if len(spelled) == 1 else None


def _identifier(tool: str) -> str:
    return tool.replace("-", "_").replace(".", "_")


async def plan_references(
    calls: Sequence[CallSite],
    *,
    scope: Scope,
    registry: CapabilityRegistry,
    pool: UpstreamPool,
    client: ClientCaller | None = None,
    routing: RoutingRules | None = None,
    pml_tools: SnippetRegistryTools | None = None,
    start_wait_s: float = 0.0,
) -> Plan:
    """Resolve every call site (``UnknownTool`` listing all the unknown ones).

    ``pml_tools``: what answers PML's read-only tools (``mcp.pml.<tool>``) when the run may
    call them: runs on the gateway may, code a PML client runs may not (None).
    ``start_wait_s``: how long to wait for named servers still starting (``UpstreamUnavailable``
    for one still starting then)."""
    rules = routing or RoutingRules()
    servers = {status.name for status in pool.status() if status.state != "disabled"}
    on_client = _client_servers(client, servers, rules)
    named = {site.namespace for site in calls} & servers - on_client
    for name in await pool.settled(start_wait_s, names=named) if named else ():
        raise UpstreamUnavailable(
            f"Upstream server '{name}' is still starting after {start_wait_s:g} s", server=name
        )
    catalog: dict[str, list[str]] = {}
    for upstream in await pool.list_tools():
        catalog.setdefault(upstream.server, []).append(upstream.name)
    targets: dict[tuple[str, str], Target] = {}
    respellings: list[Respelling] = []
    unknown: list[str] = []
    unresolved: list[CallSite] = []
    for site in calls:
        key = (site.namespace, site.name)
        if key in targets:
            continue
        if site.namespace == PML_NAMESPACE:  # reserved: never a server or a capability
            found = await _pml_tool(site, pml_tools is not None, scope, registry)
        elif site.namespace in on_client:
            targets[key] = Target("tool", server=site.namespace, tool=site.name, on_client=True)
            continue
        else:
            found = await _resolve(site, servers, catalog, scope, registry)
        target, problem, respelling = found
        if target is not None:
            targets[key] = target
            if respelling is not None:
                respellings.append(respelling)
            continue
        unresolved.append(site)
        if problem not in unknown:
            unknown.append(problem)
    if unknown:
        _require_client(unresolved, servers, client, rules)
        raise UnknownTool(f"Unknown tools: {'; '.join(unknown)}", unknown=unknown)
    bound = pml_tools.bound(scope) if pml_tools is not None else None
    return Plan(targets, tuple(respellings), bound)


def _client_servers(
    client: ClientCaller | None, servers: set[str], rules: RoutingRules
) -> frozenset[str]:
    """The client's servers it runs for this call: all but those the gateway runs as cloud."""
    if client is None:
        return frozenset()
    return frozenset(
        name
        for name in client.servers
        if name not in servers or server_routing(name, rules.cloud, rules.local) == "local"
    )


def _require_client(
    unresolved: Sequence[CallSite],
    servers: set[str],
    client: ClientCaller | None,
    rules: RoutingRules,
) -> None:
    """``CLIENT_TOOLS_REQUIRE_CLIENT`` when an unresolved reference names a server that
    ``[routing] local`` keeps on the users' machines (one the calling client runs is
    resolved: it is never the reason)."""
    wanted = sorted(
        {
            site.namespace
            for site in unresolved
            if site.namespace
            and site.namespace not in servers
            and any(fnmatchcase(site.namespace, pattern) for pattern in rules.local)
        }
    )
    if not wanted:
        return
    names = ", ".join(wanted)
    if client is None:
        raise ClientToolsRequireClient(
            f"This code uses {names}, which run on the user's machine: {HOW_TO_CONNECT}",
            servers=wanted,
        )
    raise ClientToolsRequireClient(
        f"This code uses {names}, which run on the user's machine, but this pml connect "
        f"runs no server of that name: add it to the pml.toml of pml connect",
        servers=wanted,
    )


Resolution = tuple[Target | None, str, Respelling | None]  # target, or why not; respelled?


async def _resolve(
    site: CallSite,
    servers: set[str],
    catalog: dict[str, list[str]],
    scope: Scope,
    registry: CapabilityRegistry,
) -> Resolution:
    shown = _shown(site)
    if not site.namespace:
        record = await _capability(registry, scope, site.name)
        if record is None:
            return None, f"{shown} (no capability)", None
        return Target("capability", fqdn=record.fqdn), "", None
    if site.namespace in servers:
        return _server_tool(site, catalog.get(site.namespace))
    record = await _capability(registry, scope, f"mcp__{site.namespace}__{site.name}")
    if record is not None:
        return Target("capability", fqdn=record.fqdn), "", None
    found, candidates = await _respelled_capability(site, scope, registry)
    if found is not None:
        return Target("capability", fqdn=found[0].fqdn), "", found[1]
    if candidates:
        return None, f"{shown} (ambiguous: did you mean {', '.join(candidates)}?)", None
    close = _close(site.namespace, sorted(servers))
    hint = f"; did you mean server {', '.join(close)}?" if close else ""
    return None, f"{shown} (no server or capability '{site.namespace}'{hint})", None


def _server_tool(site: CallSite, tools: list[str] | None) -> Resolution:
    """``site`` on the server ``site.namespace`` whose tools are ``tools``."""
    server = site.namespace
    if not tools:  # not running, no stored catalog: the call will say why
        return Target("tool", server=server, tool=site.name), "", None
    spelled = tool_name_on(tools, site.name)
    if spelled is not None:
        return Target("tool", server=server, tool=spelled), "", None
    shown = _shown(site)
    folded = folded_matches(tools, site.name)
    if len(folded) == 1:
        canonical = _canonical_tool_spelling(server, tools, folded[0])
        respelling = Respelling(_written(site), canonical, f"{server}:{folded[0]}", site.line)
        return Target("tool", server=server, tool=folded[0]), "", respelling
    if folded:
        spellings = ", ".join(call_spelling(server, tool) for tool in folded)
        return None, f"{shown} (ambiguous on server '{server}': did you mean {spellings}?)", None
    close = _close(site.name, tools + [_identifier(tool) for tool in tools])
    hint = f"; did you mean {', '.join(f'mcp.{server}.{c}' for c in close)}?"
    return None, f"{shown} (server '{server}' has no such tool{hint if close else ''})", None


def _canonical_tool_spelling(server: str, tools: Sequence[str], tool: str) -> str:
    """``mcp.server.tool``, with ``_`` for ``-``/``.`` when that finds it, else subscripted."""
    identifier = _identifier(tool)
    if identifier.isidentifier() and tool_name_on(tools, identifier) == tool:
        return call_spelling(server, identifier)
    return call_spelling(server, tool)


async def _respelled_capability(
    site: CallSite, scope: Scope, registry: CapabilityRegistry
) -> tuple[tuple[CapabilityRecord, Respelling] | None, list[str]]:
    """When ``site.name`` spelled otherwise (camelCase, snake_case, ...) is the action of
    exactly one capability of the namespace: it and its respelling; when several: how to
    write each (tried as a few spellings: a bounded number of lookups)."""
    found: dict[str, CapabilityRecord] = {}
    for variant in capability_variants(site.name):
        record = await _capability(registry, scope, f"mcp__{site.namespace}__{variant}")
        if record is not None:
            found.setdefault(record.fqdn, record)
    if len(found) != 1:
        return None, sorted(_record_spelling(record) for record in found.values())
    record = next(iter(found.values()))
    written, line = _written(site), site.line
    return (record, Respelling(written, _record_spelling(record), record.display_name, line)), []


def _record_spelling(record: CapabilityRecord) -> str:
    parts = capability_tool_parts(record.tool_name or "")
    if parts is None:
        return f'mcp["{record.display_name}"]'
    return call_spelling(*parts)


async def _pml_tool(
    site: CallSite, available: bool, scope: Scope, registry: CapabilityRegistry
) -> Resolution:
    """``mcp.pml.<tool>``: one of PML's read-only tools, or why not."""
    shown = _shown(site)
    if not available:
        return None, f"{shown} ({NOT_ON_CLIENT})", None
    tool, respelled = registry_tool_named(site.name)
    if tool is not None:
        target = Target("tool", server=PML_NAMESPACE, tool=tool)
        canonical = call_spelling(PML_NAMESPACE, tool)
        written = _written(site)
        respelling = (
            Respelling(written, canonical, target.address, site.line) if respelled else None
        )
        return target, "", respelling
    hint = ""
    record = await _capability(registry, scope, f"mcp__{PML_NAMESPACE}__{site.name}")
    if record is not None:  # a capability in the reserved namespace: only by name
        hint = f'; the capability {record.display_name} is called as mcp["{record.display_name}"]'
    return None, f"{shown} ({ONLY_READ_ONLY}{hint})", None


async def _capability(
    registry: CapabilityRegistry, scope: Scope, ref: str
) -> CapabilityRecord | None:
    try:
        resolved = await registry.resolve(scope, ref)
    except NotFound:
        return None
    if resolved.record.record_type != "capability":
        return None
    return resolved.record


def _close(word: str, candidates: Sequence[str]) -> list[str]:
    unique = list(dict.fromkeys(candidates))
    return difflib.get_close_matches(word, unique, n=MAX_SUGGESTIONS, cutoff=0.6)


def _written(site: CallSite) -> str:
    return call_spelling(site.namespace, site.name) if site.namespace else f'mcp["{site.name}"]'


def _shown(site: CallSite) -> str:
    written = f"mcp.{site.namespace}.{site.name}" if site.namespace else f'mcp["{site.name}"]'
    return f"{written} at line {site.line}"


async def upstream_tools(
    scope: Scope, registry: CapabilityRegistry, plan: Plan | None, used: Sequence[str]
) -> list[tuple[str, str]]:
    """Every ``(server, tool)`` a run may call: those ``plan`` names, those the capabilities
    it names used when they were recorded (transitively), and the ``server:tool`` entries
    of ``used`` (a stored capability's ``tools_used``)."""
    addresses = list(used)
    if plan is not None:
        for target in plan.targets.values():
            if target.kind == "tool":
                addresses.append(target.address)
            else:
                nested = await registry.resolve(scope, target.fqdn)
                addresses.extend(nested.version.tools_used)
    found: list[tuple[str, str]] = []
    for address in dict.fromkeys(addresses):
        server, _, tool = address.partition(":")
        if tool and not is_fqdn(address):
            found.append((server, tool))
    return found
