"""PML's read-only registry tools, called from snippets as ``mcp.pml.<tool>(...)`` (SPEC §14).

    found = await mcp.pml.cap_list(pattern="fs:*")          # {"items": [...], "total": N}
    info = await mcp.pml.cap_lookup(name="fs:read_json")     # the cap_lookup answer
    hits = await mcp.pml.pml_discover(intent="read a json file")

``pml`` is a reserved namespace: ``mcp.pml.<tool>`` is never an upstream server's tool nor
a capability (a capability named ``pml:x`` stays callable as ``mcp["pml:x"]``). Only the
tools that change nothing are there — ``cap_list``, ``cap_lookup``, ``cap_whois``,
``cap_history`` and ``pml_discover``; ``cap_rename``, ``cap_curate`` and ``pml_execute``
are ``UNKNOWN_TOOL`` when the code is planned, before anything runs.

Planning (``plan_references(..., pml_tools=SnippetRegistryTools(registry, discovery))``)
resolves ``mcp.pml.<tool>`` (``capLookup`` and ``cap:lookup`` spell ``cap_lookup``) and
binds the tools to the scope it planned for (``Plan.registry_tools``); ``RunCaller``
answers those calls with them. A plan made without them cannot call them.

A snippet can do nothing here that its caller could not do with the same tools directly:
each call is answered by the very code behind the MCP tools (``CapTools`` and the
``pml_discover`` handler's parameters), for the run's scope, with the same argument checks
and errors. On top of that each call passes the run's enforcement point as ``pml:<tool>``
(permission capability ``meta``), like any other tool call of the run: the policy gate, the
``[permissions]`` rules and the audit log see it. A refusal there ends the run; an error the
tool answers (``NOT_FOUND``, ``INVALID_INPUT``, ...) is the snippet's ``ToolError``
(catchable), with the tool's message. The answer is the tool's JSON object, as JSON values
only. A run resumed after an approval calls these again (they change nothing) rather than
replaying them from the journal. They are traced (``task_results``) and audited, but write
no ``tool_usage`` rows, as the direct calls of these tools write none.

Recording and routing: a captured capability lists the PML tools it used as
``pml:<tool>`` in ``tools_used`` (so ``toolsUsed`` says what the code did). These calls run
in the gateway, next to the registry, wherever the rest of the code runs: they must not
make a capability ``local`` (SPEC §8 would, since every server no ``[routing] cloud``
pattern names is local). So ``pml.wiring.routing_rules`` adds ``pml`` to the cloud
patterns: the routing of such a capability is what its other tools make it (only
PML's tools → ``cloud``), unless an operator's ``[routing] local`` pattern names ``pml``.

Code that ``pml connect`` runs on the user's machine (SPEC §9) cannot call them: the
gateway refuses to hand over code that mixes the client's tools and PML's (``INVALID_INPUT``,
run them in separate snippets), and code planned on the client (an offline run) is
``UNKNOWN_TOOL`` saying that PML's tools run only on the gateway.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

import anyio

from pml.config import RESERVED_SERVER_NAME
from pml.discovery.base import Discoverer
from pml.errors import NotAvailable, PmlError
from pml.execution.spellings import folded_matches
from pml.gateway.schemas import DiscoverParams
from pml.registry.scope import Scope
from pml.registry.service import CapabilityRegistry
from pml.registry.tools import CapTools, parse_params
from pml.sandbox.base import SnippetToolError

PML_NAMESPACE: Final = RESERVED_SERVER_NAME
READ_ONLY_TOOLS: Final = ("cap_list", "cap_lookup", "cap_whois", "cap_history", "pml_discover")
WRITING_TOOLS: Final = ("cap_rename", "cap_curate", "pml_execute")
# Errors the tool answers about what it was asked: the snippet's ToolError (catchable).
# Anything else (storage down, an internal error, limits) ends the run.
ANSWERED_ERRORS: Final = frozenset(
    {"INVALID_INPUT", "INVALID_NAME", "NOT_FOUND", "VERSION_NOT_FOUND", "NOT_AVAILABLE"}
)
AVAILABLE = ", ".join(f"mcp.{PML_NAMESPACE}.{tool}" for tool in READ_ONLY_TOOLS)
ONLY_READ_ONLY = f"only PML's read-only tools can be called from snippets: {AVAILABLE}"
NOT_ON_CLIENT = (
    "PML's own tools run on the PML gateway: code that pml connect runs on this machine "
    "cannot call them; call them in a snippet of their own"
)


def registry_tool_named(written: str) -> tuple[str | None, bool]:
    """The read-only tool ``written`` designates and whether it was respelled
    (``capLookup`` and the seed spelling ``cap:lookup`` are ``cap_lookup``); ``None`` for
    anything else, the writing tools included."""
    if written in READ_ONLY_TOOLS:
        return written, False
    seed = written.replace(":", "_", 1)
    if seed in READ_ONLY_TOOLS:
        return seed, True
    matches = folded_matches(READ_ONLY_TOOLS, written)
    return (matches[0], True) if len(matches) == 1 else (None, False)


class SnippetRegistryTools:
    """Answers ``mcp.pml.<tool>`` calls of snippets, for the run's scope."""

    def __init__(self, registry: CapabilityRegistry, discovery: Discoverer | None) -> None:
        self._cap_tools = CapTools(registry)
        self._discovery = discovery

    def bound(self, scope: Scope) -> ScopedRegistryTools:
        """The tools as one run calls them: always for ``scope``, the run's caller."""
        return ScopedRegistryTools(self, scope)

    async def answer(self, scope: Scope, tool: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The tool's JSON answer, or the ``PmlError`` the MCP tool would answer."""
        if tool == "pml_discover":
            return await self._discover(scope, arguments)
        if tool not in READ_ONLY_TOOLS:  # planning never lets one through: a bug if it does
            raise NotAvailable(f"{tool} cannot be called from snippets: {ONLY_READ_ONLY}")
        return await self._cap_tools.call(tool, scope, arguments)

    async def _discover(self, scope: Scope, arguments: Mapping[str, Any]) -> dict[str, Any]:
        params = parse_params(DiscoverParams, arguments)
        if self._discovery is None:
            raise NotAvailable("pml_discover is not available in this gateway", tool="pml_discover")
        results = await self._discovery.discover(
            scope, params.intent, kind=params.kind, limit=params.limit, min_score=params.min_score
        )
        return {"results": results}


class ScopedRegistryTools:
    """``SnippetRegistryTools`` for one run's scope (what ``RunCaller`` calls)."""

    def __init__(self, tools: SnippetRegistryTools, scope: Scope) -> None:
        self._tools = tools
        self._scope = scope

    async def call(self, tool: str, arguments: Mapping[str, Any], *, timeout_s: float) -> Any:
        """The answer as the snippet sees it (JSON values only); an error the tool answers
        raises ``SnippetToolError``, any other ``PmlError`` (or the timeout) ends the run."""
        address = f"{PML_NAMESPACE}:{tool}"
        try:
            with anyio.fail_after(max(timeout_s, 0.001)):
                answer = await self._tools.answer(self._scope, tool, arguments)
        except PmlError as error:
            if error.code in ANSWERED_ERRORS:
                raise SnippetToolError(address, error.message) from None
            raise
        # What the MCP tool would send: datetimes and the like as their text.
        return json.loads(json.dumps(answer, ensure_ascii=False, default=str))
