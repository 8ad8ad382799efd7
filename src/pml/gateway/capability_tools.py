"""Named capabilities as MCP tools (SPEC §6.6): one cached listing per caller.

    catalog = CapabilityToolCatalog(db, budget=4_500)
    listing = await catalog.listing(scope)      # .tools, .fqdn_of("mcp__fs__read_json")
    catalog.invalidate("acme", "web")           # after a change in that org/project

A scope lists the named capabilities of its own org/project that it may see (its private
ones included), as ``mcp__<namespace>__<action>`` with the capability's parameters schema as
``inputSchema``. Capabilities of other projects stay reachable by FQDN through
``pml_execute``; listing them as tools would mix names of different owners. A listing is
built once and reused until a change in its org/project invalidates it, so ``tools/list``
costs no database round trip in the steady state.

However much PML learns, the listing stays within ``budget`` tokens (``[gateway]
capability_tools_budget``, estimated by ``pml.gateway.tools_budget``): the most used
capabilities first, then the most recently used, then by tool name; one that does not fit
is skipped for the next ones that do. The rest stay callable as tools by name (a
``tools/call`` of an unlisted ``mcp__ns__action`` resolves it), by name in ``pml_execute``,
and found by ``pml_discover``. The fingerprint covers the listed set, not its order: a
change in rank alone does not make clients list again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import mcp_types
import sqlalchemy as sa

from pml.gateway.tools_budget import MIN_TOOL_TOKENS, estimate_tokens
from pml.registry.names import TOOL_NAME_PATTERN
from pml.registry.scope import Scope
from pml.storage.database import Database
from pml.storage.tables import capability_records as records

MAX_DESCRIPTION: Final = 1024
DEFAULT_BUDGET: Final = 4_500  # tokens; with PML's own tools, under 6 000 in all
_EMPTY_OBJECT: Final[dict[str, Any]] = {"type": "object", "properties": {}}

_r = records.c
LISTING_STATEMENT = (
    sa.select(
        _r.tool_name,
        _r.fqdn,
        _r.display_name,
        _r.description,
        _r.intent,
        _r.parameters_schema,
        _r.version,
        _r.deprecated_at,
        _r.deprecation_message,
    )
    .where(
        _r.archived_at.is_(None),
        _r.org == sa.bindparam("org", type_=sa.String()),
        _r.project == sa.bindparam("project", type_=sa.String()),
        sa.or_(
            _r.visibility != "private", _r.created_by == sa.bindparam("user", type_=sa.String())
        ),
        _r.record_type == "capability",
        _r.named.is_(True),
    )
    .order_by(_r.usage_count.desc(), _r.last_used_at.desc().nulls_last(), _r.tool_name)
    .limit(sa.bindparam("candidates", type_=sa.Integer()))
)


@dataclass(frozen=True, slots=True)
class ToolListing:
    """The capability tools one caller sees, and what each name runs.

    ``wire`` holds each tool as the JSON text it is sent as; ``tools`` (the SDK's models,
    for the SDK server's path) are built from it on first use.
    """

    wire: tuple[str, ...]
    fqdns: Mapping[str, str]
    fingerprint: str
    # Whether named capabilities were left out for the budget (a change in usage can then
    # change what is listed: ``CapabilityToolCatalog.truncated_projects``).
    truncated: bool = False
    estimated_tokens: int = 0
    _models: list[tuple[mcp_types.Tool, ...]] = field(
        default_factory=list[tuple[mcp_types.Tool, ...]], compare=False, repr=False
    )

    @property
    def tools(self) -> tuple[mcp_types.Tool, ...]:
        """The tools as ``mcp_types.Tool`` (built once)."""
        if not self._models:
            self._models.append(
                tuple(mcp_types.Tool.model_validate_json(text) for text in self.wire)
            )
        return self._models[0]

    def fqdn_of(self, tool_name: str) -> str | None:
        """The FQDN behind a listed tool name, or ``None``."""
        return self.fqdns.get(tool_name)


def input_schema(schema: object) -> dict[str, Any]:
    """A capability's parameters schema as an MCP ``inputSchema`` (always ``type: object``).

    Schemas come from PML's own analysis; one that is not an object schema (a damaged or
    hand-edited row) is listed as an open object rather than breaking the whole list.
    """
    if not isinstance(schema, dict):
        return dict(_EMPTY_OBJECT)
    typed: dict[str, Any] = dict(schema)  # pyright: ignore[reportUnknownArgumentType]
    kind = typed.setdefault("type", "object")
    properties = typed.get("properties", {})
    if kind != "object" or not isinstance(properties, dict):
        return dict(_EMPTY_OBJECT)
    return typed


def describe(
    display_name: str, description: str | None, intent: str | None, deprecated: str | None = None
) -> str:
    """The tool description an agent reads: the capability's own words, then what it is
    (a deprecated one says so first)."""
    text = (description or intent or "").strip()
    if deprecated is not None:
        text = f"DEPRECATED: {deprecated}. {text}".strip()
    suffix = f"(PML capability {display_name})"
    if not text:
        return f"Learned capability {display_name}."
    room = MAX_DESCRIPTION - len(suffix) - 1
    if len(text) > room:
        text = text[: room - 1].rstrip() + "…"
    return f"{text} {suffix}"


class CapabilityToolCatalog:
    """Builds and caches each caller's capability tools (see module)."""

    def __init__(self, db: Database, *, budget: int = DEFAULT_BUDGET) -> None:
        self._db = db
        self._budget = max(0, budget)
        self._cache: dict[tuple[str, str, str], ToolListing] = {}
        self._generations: dict[tuple[str, str], int] = {}

    async def listing(self, scope: Scope) -> ToolListing:
        """The caller's capability tools (from the cache when nothing changed)."""
        key = (scope.org, scope.project, scope.user)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        project = (scope.org, scope.project)
        generation = self._generations.get(project, 0)
        listing = await self._load(scope)
        if self._generations.get(project, 0) == generation:  # no change while it loaded
            self._cache[key] = listing
        return listing

    def cached(self, scope: Scope) -> ToolListing | None:
        """The cached listing of ``scope``, without building one."""
        return self._cache.get((scope.org, scope.project, scope.user))

    def invalidate(self, org: str, project: str) -> None:
        """Forget the listings of ``org.project`` (a capability there changed)."""
        project_key = (org, project)
        self._generations[project_key] = self._generations.get(project_key, 0) + 1
        for key in [k for k in self._cache if k[:2] == project_key]:
            del self._cache[key]

    @property
    def budget(self) -> int:
        """The token budget of one caller's capability tools."""
        return self._budget

    def truncated_projects(self) -> set[tuple[str, str]]:
        """The ``(org, project)`` of the cached listings the budget cut short (their listed
        set may change with usage alone)."""
        return {key[:2] for key, listing in self._cache.items() if listing.truncated}

    def invalidate_all(self) -> None:
        """Forget every listing (changes may have been missed)."""
        for project_key in {k[:2] for k in self._cache}:
            self.invalidate(*project_key)

    async def _load(self, scope: Scope) -> ToolListing:
        candidates = self._budget // MIN_TOOL_TOKENS  # no more can fit
        if candidates == 0:
            return ToolListing((), {}, hashlib.sha256().hexdigest())
        async with self._db.read() as conn:
            rows = list(
                await conn.execute(
                    LISTING_STATEMENT,
                    {
                        "org": scope.org,
                        "project": scope.project,
                        "user": scope.user,
                        "candidates": candidates + 1,  # one more tells whether others exist
                    },
                )
            )
        wire: list[str] = []
        fqdns: dict[str, str] = {}
        signed: list[tuple[str, str]] = []
        used = 0
        truncated = len(rows) > candidates
        for row in rows[:candidates]:
            name = str(row.tool_name)
            if name in fqdns or not TOOL_NAME_PATTERN.fullmatch(name):
                continue  # unique and valid by the registry's rules; a damaged row is skipped
            if self._budget - used < MIN_TOOL_TOKENS:
                truncated = True
                break
            text = _tool_text(row)
            cost = estimate_tokens(text) + 1  # and the comma between tools
            if used + cost > self._budget:
                truncated = True
                continue  # a smaller one after it may still fit
            used += cost
            fqdns[name] = str(row.fqdn)
            wire.append(text)
            signed.append((name, f"{row.fqdn}@{row.version}:{text}"))
        digest = hashlib.sha256()
        for _, signature in sorted(signed):
            digest.update(signature.encode())
        return ToolListing(tuple(wire), fqdns, digest.hexdigest(), truncated, used)


def _tool_text(row: Any) -> str:  # a row of LISTING_STATEMENT
    """One capability tool as the compact JSON it is sent as (its display name closes the
    description, so no ``title`` repeats it)."""
    deprecated = (
        (row.deprecation_message or "deprecated") if row.deprecated_at is not None else None
    )
    description = describe(str(row.display_name), row.description, row.intent, deprecated)
    schema = input_schema(row.parameters_schema)
    return json.dumps(
        {"name": str(row.tool_name), "description": description, "inputSchema": schema},
        ensure_ascii=False,
        separators=(",", ":"),
    )
